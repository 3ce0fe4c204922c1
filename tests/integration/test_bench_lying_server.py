"""``glmserve bench`` against a hostile stand-in server (tests/fixtures/hostile_server.py):
every lie a stream can tell ends with the right exit code and a stored result marked as it
should be, the reason named, never exit 70 or a traceback.

Before (an audit, issue 20): aborted streams counted as successes (exit 0, complete), so did
1 or 80 tokens for 8 asked and a negative count; SSE comments and a line without a newline
kept a request alive past --stall-timeout; JSON of the wrong shape was exit 70 with nothing
stored."""

from __future__ import annotations

import json

import pytest
from tests.fixtures.cli import run_glmserve
from tests.fixtures.hostile_server import HostileServer

from glmserve.store import RunStore

# (case, api, exit code, what the first error says; None: every request ok)
CASES = [
    ("ok", "native", 0, None),
    ("ok", "openai", 0, None),
    ("ok", "chat", 0, None),
    ("abort_running", "native", 5, "aborted by the server after 3 of 8 tokens: Aborted"),
    ("abort_running", "openai", 5, "aborted by the server after 3 of 8 tokens"),
    ("abort_running", "chat", 5, "aborted by the server after 3 of 8 tokens"),
    ("abort_queued", "native", 5,
     "aborted by the server after 0 of 8 tokens: The request queue is full. (status 503)"),
    ("abort_half", "native", 7, "aborted by the server after 3 of 8 tokens"),
    ("short", "native", 5, "finish_reason length after 1 of 8 tokens"),
    ("short", "openai", 5, "finish_reason length after 1 of 8 tokens"),
    ("long", "native", 5, "more tokens than asked: the server sent 9, max_new_tokens was 8"),
    ("long", "chat", 5, "more tokens than asked: the server sent 9, max_new_tokens was 8"),
    ("negative", "native", 5,
     "bad stream payload: meta_info.completion_tokens is the number -3, not a token count"),
    ("no_finish", "native", 5, "no finish_reason: the stream ended after 8 of 8 tokens"),
    ("no_finish", "openai", 5, "no finish_reason: the stream ended after 8 of 8 tokens"),
    ("sse_ping", "native", 5, "stalled: no token for 1 s (after 2 tokens)"),
    ("slow_endless_line", "native", 5, "stalled: no token for 1 s (after 2 tokens)"),
    ("endless_line", "native", 5, "stream line longer than 4 MiB without a newline"),
    ("tokens_beyond", "native", 5, "more tokens than asked: the server sent 9"),
    ("tokens_beyond", "openai", 5, "more tokens than asked: the server sent 9"),
    ("meta_list", "native", 5, "bad stream payload: meta_info is a list, not an object"),
    ("count_list", "native", 5, "bad stream payload: meta_info.completion_tokens is a list"),
    ("count_huge", "native", 5,
     "bad stream payload: meta_info.completion_tokens is the number 1e+300"),
    ("payload_list", "native", 5, "bad stream payload: a data: payload is a list"),
    ("usage_list", "openai", 5, "bad stream payload: usage is a list, not an object"),
    ("choices_dict", "openai", 5, "bad stream payload: choices is an object, not a list"),
    ("delta_string", "chat", 5, "bad stream payload: delta is a string, not an object"),
    ("server_info_string", "native", 0, None),
    ("server_info_dict", "native", 0, None),
    ("bad_content_length", "native", 5, "bad stream payload: bad Content-Length b'abc'"),
    ("negative_content_length", "native", 5, "bad stream payload: bad Content-Length b'-5'"),
    ("bad_chunk_size", "native", 5, "bad stream payload: bad chunk size b'zz'"),
    # the fault-injection pass of 2026-12-05 (robust4, item 4)
    ("truncated_event", "native", 5, "stream cut: ended without [DONE]"),
    ("truncated_event", "chat", 5, "stream cut: ended without [DONE]"),
    ("bad_json", "native", 5, "bad stream payload: unexpected character"),
    ("bad_json", "openai", 5, "bad stream payload: unexpected character"),
    ("error_body_200", "native", 5,
     'not an event stream (HTTP 200, application/json): {"object": "error", "message": "boom"'),
    ("error_body_200", "chat", 5, "not an event stream (HTTP 200, application/json)"),
    ("sse_error_200", "native", 5, "server error in stream: CUDA out of memory"),
    ("sse_error_200", "chat", 5, "server error in stream: CUDA out of memory"),
    ("reset", "native", 5, "stream cut: RemoteProtocolError"),
    ("reset", "openai", 5, "stream cut: RemoteProtocolError"),
    ("no_done", "native", 5,
     "stream cut: ended without [DONE] after finish_reason length (8 tokens)"),
    ("no_done", "openai", 5,
     "stream cut: ended without [DONE] after finish_reason length (8 tokens)"),
    ("no_done", "chat", 5,
     "stream cut: ended without [DONE] after finish_reason length (8 tokens)"),
    ("no_done_hang", "native", 5, "stalled: no token for 1 s (after 8 tokens)"),
]  # fmt: skip


def bench(url: str, api: str, prompts: int = 4) -> tuple[int, dict, str]:
    res = run_glmserve("bench", "--url", url, "--api", api, "--json", "--warmup", "0",
                       "--num-prompts", str(prompts), "--output-len", "8",
                       "--stall-timeout", "1", timeout=120)  # fmt: skip
    data = json.loads(res.stdout) if res.stdout.strip() else {}
    return res.returncode, data, res.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("case", "api", "code", "error"), CASES,
                         ids=[f"{c}-{a}" for c, a, _, _ in CASES])  # fmt: skip
def test_every_hostile_stream_ends_with_its_exit_code_and_a_stored_marked_result(
    case, api, code, error
):
    with HostileServer(case) as srv:
        got, data, err = bench(srv.url, api)
    assert "Traceback" not in err, err
    assert got == code, (got, err[-2000:])
    assert data.get("id") is not None, err  # stored
    with RunStore.open() as store:
        stored = store.get_bench_result(data["id"])["result"]
    lv = stored["levels"][0]
    if error is None:
        assert stored["complete"] is True and lv["errors"] == 0 and lv["completed"] == 4
        assert stored["server"]["last_gen_throughput"] in (42.0, None)
        return
    assert stored["complete"] is False
    assert lv["errors"] >= 1 and any(error in e for e in lv["error_samples"]), lv["error_samples"]
    assert error in err  # the reason is on the last line the user sees
    if code == 7:
        assert lv["completed"] >= 1 and "requests failed" in stored["stopped"]


def test_an_aborted_run_fails_its_gate_instead_of_passing_it():
    """The audit's case: every request aborted after 3 tokens passed --min-decode-tok-s."""
    with HostileServer("abort_running") as srv:
        res = run_glmserve("bench", "--url", srv.url, "--json", "--warmup", "0",
                           "--num-prompts", "3", "--output-len", "8",
                           "--min-decode-tok-s", "1")  # fmt: skip
    data = json.loads(res.stdout)
    assert res.returncode == 5, res.stderr
    assert data["complete"] is False and data["levels"][0]["completed"] == 0
    assert data["decode_tok_s"] is None
