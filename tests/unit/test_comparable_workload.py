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


GSP = {"dataset_name": "generated-shared-prefix", "gsp_num_groups": 2,
       "gsp_prompts_per_group": 6, "gsp_system_prompt_len": 2048, "gsp_question_len": 32,
       "gsp_output_len": 4, "gsp_num_turns": 1, "think_time": 0.0}  # fmt: skip


def test_the_workload_kind_and_its_parameters_are_compared():
    assert fields(row(**GSP), row(**GSP)) == []
    assert fields(row(), row(**GSP)) == ["workload"]  # random vs shared prefix
    assert fields(row(**GSP), row(**{**GSP, "gsp_system_prompt_len": 1024})) == ["workload"]
    assert fields(row(**GSP), row(**{**GSP, "gsp_num_turns": 2})) == ["workload"]
    assert fields(row(**GSP), row(**{**GSP, "think_time": 0.5})) == ["workload"]
    assert fields(row(trace_sha256="a" * 64), row(trace_sha256="b" * 64)) == ["workload"]


def test_a_flushed_cache_is_another_measurement():
    assert fields(row(**GSP), row(**GSP, flush_cache=True)) == ["flush_cache"]
    assert fields(row(), row(flush_cache=False)) == []  # older results: never flushed
