"""``BenchSettings`` is a frozen, pure input (issue 21): a bench run on it leaves it as it was;
the endpoint, model, dataset rows and the abort/failed events belong to the running bench,
and the stored settings still carry them where they always were."""

from __future__ import annotations

import dataclasses
import json

import pytest

from glmserve.bench.progress import Progress
from glmserve.bench.session import Gates, run_bench
from glmserve.bench.settings import BenchSettings, RunningBench, resolve_inputs


def test_settings_cannot_be_changed_and_hold_no_run_time_state():
    s = BenchSettings("http://127.0.0.1:9")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.model = "x"  # type: ignore[misc]
    assert not {"abort", "failed", "dataset_rows"} & {f.name for f in dataclasses.fields(s)}
    assert s.aborted is False and s.failed is None  # the runner's functions take either


def test_a_run_leaves_its_settings_as_given_and_stores_what_it_learnt(fake, tmp_path):
    data = tmp_path / "d.txt"
    data.write_text("one prompt\ntwo prompts\n")
    fake.n_tokens = 4
    s = BenchSettings(fake.url, output_len=4, num_prompts=2, warmup=0, dataset_path=str(data),
                      gpu_telemetry=False, metrics_interval=0)  # fmt: skip
    before = dataclasses.replace(s)
    out = run_bench(s, None, Gates(), Progress(), store_result=False)
    assert s == before and s.model is None and s.dataset_sha256 is None
    stored = out.result.settings
    assert stored["model"] == "default" and stored["base_url"] == fake.url
    assert len(stored["dataset_sha256"]) == 64 and stored["dataset_rows"] == 2
    keys = list(stored)
    assert keys.index("dataset_path") + 1 == keys.index("dataset_sha256")
    assert keys.index("dataset_sha256") + 1 == keys.index("dataset_rows")


def test_a_trace_is_resolved_into_a_new_value(tmp_path):
    trace = tmp_path / "t.jsonl"
    rows = [{"timestamp": t, "input_length": 600, "output_length": 4, "hash_ids": [0, 1]}
            for t in (0, 500, 1000)]  # fmt: skip
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = BenchSettings("", dataset_name="mooncake", dataset_path=str(trace))
    r = resolve_inputs(s)
    assert s.trace_rows is None and s.request_rate is None and s.dataset_sha256 is None
    assert (r.trace_rows, r.request_rate) == (3, [2.0])
    assert r.trace_sha256 == r.dataset_sha256 and len(r.trace_sha256) == 64
    assert resolve_inputs(r) == r


def test_the_running_bench_reads_through_and_signals():
    run = RunningBench.start(BenchSettings("http://h:1", seed=7, model="m"))
    assert (run.seed, run.base_url, run.model, run.aborted) == (7, "http://h:1", "m", False)
    run.abort.set()
    run.base_url = "http://h:2"
    assert run.aborted and run.settings.base_url == "http://h:1"
    assert run.to_dict()["base_url"] == "http://h:2"


def test_a_trace_replay_validates_without_changing_its_settings(tmp_path):
    """Validation sees the trace's rate (``--mode rate`` needs one) on a resolved copy."""
    from glmserve.bench.session import validate_settings

    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 600, "output_length": 4}\n')
    s = BenchSettings("", mode="rate", dataset_name="mooncake", dataset_path=str(trace))
    validate_settings(s, Gates())
    assert s.request_rate is None and s.trace_rows is None
