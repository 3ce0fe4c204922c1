"""The pure parts of the run-identity check and of a bench's completeness (issue 10 #2, #11)."""

from __future__ import annotations

import pytest

from glmserve.bench.metrics import StreamRecord
from glmserve.bench.results import build_result, summarize_level
from glmserve.deploy.identity import (
    compare_server_info,
    expected_server_args,
    parse_listener,
    refusal,
)
from glmserve.errors import (
    EXIT_CRASHED,
    EXIT_TIMEOUT,
    EXIT_TRANSPORT,
    EXIT_USAGE,
    ServerIdentityError,
)
from glmserve.store import RunRecord


def _run(state: str = "READY", argv: list[str] | None = None, **kw) -> RunRecord:
    spec = {"argv": argv if argv is not None else ["--model-path", "/m/glm5",
                                                    "--attention-backend", "flashinfer",
                                                    "--tp-size=8"]}  # fmt: skip
    return RunRecord(run_id="a1", host="local", profile="p", port=30001, run_dir="/r",
                     state=state, spec=spec, **kw)  # fmt: skip


def test_expected_args_come_from_the_recorded_argv_and_port():
    assert expected_server_args(_run()) == {
        "model_path": "/m/glm5",
        "attention_backend": "flashinfer",
        "tp_size": "8",
        "port": "30001",
    }
    # flags the argv does not set are not compared (the server resolves them itself)
    assert expected_server_args(_run(argv=["--model", "x"])) == {"model_path": "x",
                                                                "port": "30001"}  # fmt: skip


def test_server_info_of_another_run_is_named_field_by_field():
    info = {"model_path": "/m/glm5", "attention_backend": "trtllm_mla", "tp_size": 8,
            "port": 30001, "version": "0.5.9"}  # fmt: skip
    problems = compare_server_info(expected_server_args(_run()), info)
    assert problems == ["attention_backend is 'trtllm_mla', the run was launched with 'flashinfer'"]
    same = {**info, "attention_backend": "flashinfer"}
    assert compare_server_info(expected_server_args(_run()), same) == []
    # an older release that reports fewer fields is not a mismatch
    assert compare_server_info(expected_server_args(_run()), {"version": "0.4.0"}) == []


@pytest.mark.parametrize(
    "text, verdict",
    [
        ("L 555\nS 10 444\nS 11 555\n", "ours"),
        ("L 555\nS 10 444\n", "foreign"),
        ("L 555\nE 10\n", "unseen"),  # our fds unreadable: no verdict from the host
        ("S 10 444\n", "unseen"),  # nothing listening visible (another net namespace)
    ],
)
def test_listener_ownership(text, verdict):
    assert parse_listener(text)[0] == verdict


@pytest.mark.parametrize(
    "state, alive, code",
    [
        ("STOPPED", [], EXIT_USAGE),
        ("CRASHED", [], EXIT_CRASHED),
        ("EXITED", [], EXIT_CRASHED),
        ("STALLED", [7], EXIT_TIMEOUT),
        ("LOADING", [7], EXIT_TIMEOUT),
    ],
)
def test_a_run_not_alive_and_ready_is_refused_with_its_state(state, alive, code):
    run = _run(state, category="CRASH", root_cause="boom")
    err = refusal(run, {"state": state, "alive_pids": alive})
    assert err is not None and err.exit_code == code
    assert f"run a1 is {state}" in str(err) and "nothing stored" in str(err)
    assert refusal(_run(), {"state": "READY", "alive_pids": [7]}) is None


def test_identity_mismatch_is_a_transport_error():
    assert ServerIdentityError("x").exit_code == EXIT_TRANSPORT


def _rec(ok: bool, tokens: int) -> StreamRecord:
    r = StreamRecord(dispatch=0.0, send=0.0, chunk_times=[0.1 * (i + 1) for i in range(tokens)],
                     chunk_tokens=list(range(1, tokens + 1)), end=0.1 * tokens + 0.05)  # fmt: skip
    if ok:
        r.completion_tokens = tokens
    else:
        r.error = "stream cut: RemoteProtocolError"
    return r


def test_a_level_with_no_stream_finished_has_no_throughput_figure():
    level = summarize_level([_rec(False, 20) for _ in range(4)], 4, 1, {}, None)
    assert level["completed"] == 0 and level["output_tok_s"] is None


def test_a_result_with_a_failed_request_is_never_complete():
    levels = [summarize_level([_rec(True, 10), _rec(False, 3)], 2, 1, {}, None)]
    res = build_result("concurrency", levels, {}, {}, {}, None)
    assert res.complete is False and res.stopped == "1 of 2 requests failed"
    clean = [summarize_level([_rec(True, 10), _rec(True, 10)], 2, 1, {}, None)]
    assert build_result("concurrency", clean, {}, {}, {}, None).complete is True
