"""What counts as the same workload for a speedup (2026-12-03 audit): the seed where it draws
random lengths or a dataset's order, a dataset's content rather than its path, and a
``--num-prompts`` that only repeats the mode's default."""

from __future__ import annotations

from glmserve.bench.comparable import differences


def row(**settings) -> dict:
    base = {"mode": "rate", "api": "native", "input_len": 128, "output_len": 128,
            "random_range_ratio": 0.0, "request_rate": [10.0], "seed": 0}  # fmt: skip
    return {"result": {"settings": {**base, **settings}}}


def fields(a: dict, b: dict) -> list[str]:
    return [d["field"] for d in differences(a, b)]


def test_the_seed_matters_only_where_it_draws_the_workload():
    assert fields(row(seed=1), row(seed=2)) == ["seed"]  # random lengths: other requests
    fixed = {"mode": "concurrency", "random_range_ratio": 1.0, "request_rate": None}
    assert fields(row(seed=1, **fixed), row(seed=2, **fixed)) == []  # same shape


def test_a_dataset_is_its_content_not_its_path():
    fixed = {"random_range_ratio": 1.0}
    same = fields(row(dataset_path="./ds.txt", dataset_sha256="ab" * 32, **fixed),
                  row(dataset_path="/tmp/ds.txt", dataset_sha256="ab" * 32, **fixed))  # fmt: skip
    assert same == []
    other = fields(row(dataset_path="ds.txt", dataset_sha256="ab" * 32, **fixed),
                   row(dataset_path="ds.txt", dataset_sha256="cd" * 32, **fixed))  # fmt: skip
    assert other == ["dataset_path"]


def test_num_prompts_given_as_the_default_is_the_same_workload():
    decode = {"mode": "decode", "random_range_ratio": 1.0, "request_rate": None}
    assert fields(row(num_prompts=None, **decode), row(num_prompts=5, **decode)) == []
    assert fields(row(num_prompts=None, **decode), row(num_prompts=6, **decode)) == ["num_prompts"]
    assert fields(row(num_prompts=None), row(num_prompts=200)) == []  # open loop: 200
