"""The report, rendered by headless Chromium, never shows a false verdict (audit of
compare/report): a crashed run's incomplete result gets "n/c (... incomplete: N of M requests
failed)" instead of 0.99x; the flag diff of flashinfer vs flashinfer_gtc shows the
``GLMSERVE_PATCHES`` env var and the patches that really differ, not only ``--port``; a
``--url`` bench result id is accepted and labelled by server URL and client host."""

from __future__ import annotations

import pytest
from tests.fixtures.report import CHROMIUM, Tables, chromium

from glmserve.cli import main
from glmserve.store import RunRecord, RunStore

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")

ARGV = ["python3", "-u", "-m", "sglang.launch_server", "--model-path", "/m/GLM-5",
        "--tp-size", "8", "--attention-backend", "flashinfer"]  # fmt: skip
PATCH = "flashinfer_mla_gather_cast"


def _result(decode: float, errors: int = 0, stopped: str | None = None) -> dict:
    pct = lambda v: {"p50": v, "p90": v, "p99": v, "mean": v}  # noqa: E731
    lv = {"concurrency": 1, "request_rate": None, "requests": 16, "completed": 16 - errors,
          "errors": errors, "max_concurrency_seen": 1, "output_tok_s": decode,
          "decode_tok_s": pct(decode), "ttft_ms": pct(50.0), "itl_ms": pct(1000 / decode),
          "e2e_ms": pct(900.0)}  # fmt: skip
    return {"version": 1, "mode": "decode", "complete": not errors and stopped is None,
            "stopped": stopped or (f"{errors} of 16 requests failed" if errors else None),
            "levels": [lv], "decode_tok_s": decode, "ttft_ms": 50.0,
            "settings": {"mode": "decode", "api": "native", "input_len": 128,
                         "output_len": 256, "num_prompts": 16},
            "server": {"version": "0.5.9", "args": {"tp_size": 8}}}  # fmt: skip


def _run(store: RunStore, run_id: str, profile: str, port: int, patched: bool, state: str):
    env = {"GLMSERVE_PATCHES": PATCH} if patched else {}
    command = [*ARGV, "--port", str(port)]
    store.add_run(RunRecord(run_id=run_id, host="gpu-7", profile=profile, port=port,
                            run_dir="/tmp/x", state=state, patches=[PATCH] if patched else [],
                            spec={"command": command, "env": env}))  # fmt: skip
    return {"argv": command, "run_id": run_id, "profile": profile, "host": "gpu-7",
            "patches": [PATCH] if patched else []}  # fmt: skip


def _render(tmp_path, *ids: str) -> Tables:
    html = tmp_path / "r.html"
    assert main(["report", *ids, "--html", str(html)]) == 0
    proc = chromium(tmp_path, "--dump-dom", html.as_uri())
    assert proc.returncode == 0, proc.stderr[-1500:]
    dom = Tables()
    dom.feed(proc.stdout)
    return dom


@pytest.mark.slow
def test_crashed_run_gets_no_speedup_and_env_patches_are_in_the_flag_diff(tmp_path):
    with RunStore.open() as store:
        meta = _run(store, "r-fi", "flashinfer", 30000, False, "READY")
        store.add_bench_result("r-fi", _result(13.8), meta)
        meta = _run(store, "r-gtc", "flashinfer_gtc", 30001, True, "READY")
        store.add_bench_result("r-gtc", _result(18.4), meta)
        meta = _run(store, "r-bad", "flashinfer_gtc", 30002, True, "CRASHED")
        store.add_bench_result("r-bad", _result(13.7, 16, "server CRASHED: CUDA error"), meta)
    dom = _render(tmp_path, "r-fi", "r-gtc", "r-bad")

    summary = {r[0]: r for r in dom.tables["summary"][1:]}
    assert summary["flashinfer_gtc (r-gtc)"][-2] == "1.33x"
    assert summary["flashinfer_gtc (r-gtc)"][1] == "ok"
    assert summary["flashinfer_gtc (r-bad)"][1] == "crashed"
    bad = summary["flashinfer_gtc (r-bad)"][-2]
    assert bad.startswith("n/c (") and "incomplete: server CRASHED: CUDA error" in bad
    assert "16 of 16 requests failed" in bad and not bad.endswith("x")
    assert any("r-bad" in li and "no speedup shown" in li for li in dom.incomparable)

    diff = {r[0]: r[1:] for r in dom.tables["flag-diff"][1:]}
    assert diff["env GLMSERVE_PATCHES"][:2] == ["(absent)", PATCH]
    assert diff["patches"][:2] == ["(none)", PATCH]
    meta = dom.tables["metadata"]
    by = {r[1]: dict(zip(meta[0], r, strict=True)) for r in meta[1:]}
    hashes = {r["run"]: r for r in by.values()}
    # the same flags on another port: the same argv hash, a different config (the patch)
    assert hashes["r-fi"]["argv hash"] == hashes["r-gtc"]["argv hash"]
    assert hashes["r-fi"]["config hash"] != hashes["r-gtc"]["config hash"]
    assert hashes["r-gtc"]["config hash"] == hashes["r-bad"]["config hash"]


@pytest.mark.slow
def test_report_takes_a_url_bench_result_id_and_labels_where_it_ran(tmp_path):
    res = _result(20.0)
    meta = {"url": "http://10.0.0.5:30000", "client_host": "laptop", "argv": None}
    with RunStore.open() as store:
        rid = store.add_bench_result(None, res, meta)
    dom = _render(tmp_path, str(rid))
    meta_rows = dom.tables["metadata"]
    row = dict(zip(meta_rows[0], meta_rows[1], strict=True))
    assert row["result"] == str(rid)
    assert row["host"] == "server URL http://10.0.0.5:30000 (client host laptop)"
    assert row["gpus"] == "TP 8 (server's /server_info)"
    assert row["server args"] == "tp_size=8"
    assert dom.tables["summary"][1][0] == f"result {rid}"


@pytest.mark.slow
def test_an_incomplete_result_of_a_live_run_is_not_ok(tmp_path):
    """Audit round 2: a result with failed requests (the run still READY), or one cut short
    by SIGTERM, showed status "ok" in the summary; with settings that also differ, the cell
    said only "settings differ"."""
    with RunStore.open() as store:
        meta = _run(store, "r-fi", "flashinfer", 30000, False, "READY")
        store.add_bench_result("r-fi", _result(13.8), meta)
        meta = _run(store, "r-half", "flashinfer_gtc", 30001, True, "READY")
        half = _result(18.4, 2)
        half["settings"]["num_prompts"] = 10
        store.add_bench_result("r-half", half, meta)
    dom = _render(tmp_path, "r-fi", "r-half")
    summary = {r[0]: r for r in dom.tables["summary"][1:]}
    row = summary["flashinfer_gtc (r-half)"]
    assert row[1] == "incomplete"
    assert row[-2].startswith("n/c (settings differ; ") and "2 of 16 requests failed" in row[-2]
