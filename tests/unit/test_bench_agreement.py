"""Output agreement from hand-built logprob payloads of both endpoints (sglang 0.5.9 shapes)."""

from __future__ import annotations

import pytest

from glmserve.bench import agreement as ag
from glmserve.bench.probes import load_probe_set
from glmserve.errors import TransportError

REF_A = ag.ProbeOutput("a", (1, 2, 3, 4), (-0.1,) * 4)
REF_B = ag.ProbeOutput("b", (5, 6), (-0.2,) * 2)


def native(out: list[tuple[float, int]], inp: list[tuple[float | None, int]] | None = None):
    """A /generate answer as tokenizer_manager.add_logprob_to_meta_info builds it."""
    meta = {
        "id": "x",
        "output_token_logprobs": [[lp, tid, None] for lp, tid in out],
        "input_token_logprobs": [[lp, tid, None] for lp, tid in (inp or [])],
    }
    return {"text": "", "output_ids": [t for _, t in out], "meta_info": meta}


def completion(tokens: list[str], lps: list[float | None]):
    return {
        "choices": [
            {
                "index": 0,
                "text": "".join(tokens),
                "logprobs": {
                    "text_offset": [-1] * len(tokens),
                    "token_logprobs": lps,
                    "tokens": tokens,
                    "top_logprobs": [],
                },
            }
        ]
    }


def chat(tokens: list[str], lps: list[float]):
    content = [
        {"token": t, "bytes": list(t.encode()), "logprob": lp, "top_logprobs": []}
        for t, lp in zip(tokens, lps, strict=True)
    ]
    return {"choices": [{"index": 0, "message": {}, "logprobs": {"content": content}}]}


def test_native_parse_keeps_ids_logprobs_and_prompt_ids():
    p = native([(-0.1, 7), (-0.2, 8)], inp=[(None, 1), (-3.0, 2)])
    o = ag.from_native("a", p)
    assert o.tokens == (7, 8)
    assert o.logprobs == (-0.1, -0.2)
    assert o.prompt_ids == (1, 2)
    assert ag.ProbeOutput.from_dict(o.to_dict()) == o


def test_native_without_logprobs_is_one_transport_error():
    with pytest.raises(TransportError, match="without logprobs"):
        ag.from_native("a", {"text": "x", "meta_info": {"id": "x"}})


def test_openai_completion_and_chat_parse_by_token_text():
    c = ag.from_openai("a", completion([" the", " cat"], [-0.5, -0.25]))
    h = ag.from_openai("a", chat([" the", " cat"], [-0.5, -0.25]))
    assert c.tokens == h.tokens == (" the", " cat")
    assert c.logprobs == h.logprobs == (-0.5, -0.25)
    with pytest.raises(TransportError):
        ag.from_openai("a", {"choices": [{"logprobs": None}]})


def test_greedy_agreement_counts_tokens_before_first_divergence():
    assert ag.greedy_agreement([1, 2, 3, 4], [1, 2, 9, 4]) == 0.5
    assert ag.greedy_agreement([1, 2, 3, 4], [1, 2, 3, 4]) == 1.0
    assert ag.greedy_agreement([1, 2, 3, 4], [5, 2, 3, 4]) == 0.0
    assert ag.greedy_agreement([1, 2, 3, 4], [1, 2]) == 0.5  # a shorter candidate stops early


def test_teacher_forced_native_reads_reference_tokens_after_the_none():
    # input_ids = prompt (3 ids) + reference (2 ids), logprob_start_len = 2: entry 0 is the
    # prompt's last token with None, then the reference tokens' logprobs under the candidate
    p = native([(-0.1, 99)], inp=[(None, 3), (-0.3, 7), (-0.6, 8)])
    assert ag.forced_native(p, [7, 8]) == [-0.3, -0.6]
    with pytest.raises(TransportError, match="not of the reference"):
        ag.forced_native(p, [7, 9])


def test_teacher_forced_openai_skips_echoed_prompt():
    p = completion(["A", "B", " the", " cat"], [None, -1.0, -0.4, -0.7])
    assert ag.forced_openai(p, 2, 2) == [-0.4, -0.7]


def test_same_model_agrees_with_zero_excess():
    ref = [ag.from_native("a", native([(-0.1, 7), (-0.2, 8)]))]
    res = ag.agree(ref, ref, forced={"a": [-0.1, -0.2]})
    assert res.verdict == ag.AGREES
    assert res.excess_nll == pytest.approx(0.0)
    assert res.greedy_agreement == 1.0


def test_garbled_candidate_is_wrong_output_on_both_measures():
    ref = [REF_A, REF_B]
    cand = [
        ag.ProbeOutput("a", (9, 9, 9, 9), (-0.1,) * 4),
        ag.ProbeOutput("b", (7, 7), (-0.2,) * 2),
    ]
    forced = {"a": [-6.0] * 4, "b": [-5.0] * 2}
    res = ag.agree(ref, cand, forced=forced)
    assert res.verdict == ag.WRONG_OUTPUT
    assert res.excess_nll == pytest.approx(((-0.4 + 24) + (-0.4 + 10)) / 6)
    assert len(res.reasons) == 2


def test_slight_drift_within_thresholds_is_not_flagged():
    # one probe diverges late, the other not at all; the candidate's logprobs differ by 0.02
    ref = [REF_A, REF_B]
    cand = [
        ag.ProbeOutput("a", (1, 2, 3, 8), (-0.12,) * 4),
        ag.ProbeOutput("b", (5, 6), (-0.22,) * 2),
    ]
    res = ag.agree(ref, cand, forced={"a": [-0.12] * 4, "b": [-0.22] * 2})
    assert res.verdict == ag.AGREES
    assert res.greedy_agreement == pytest.approx((0.75 + 1.0) / 2)
    assert res.excess_nll == pytest.approx(0.02)


def test_without_forcing_the_agreed_prefix_estimates_excess_nll():
    ref = [ag.ProbeOutput("a", (1, 2, 3, 4), (-0.1, -0.1, -0.1, -0.1))]
    cand = [ag.ProbeOutput("a", (1, 2, 5, 5), (-0.5, -0.5, -9.0, -9.0))]
    res = ag.agree(ref, cand)
    assert res.nll_method == "agreed-prefix"
    assert res.excess_nll == pytest.approx(0.4)  # over the two agreed tokens only
    assert res.wrong


def test_thresholds_are_options():
    ref = [ag.ProbeOutput("a", (1, 2), (-0.1, -0.1))]
    cand = [ag.ProbeOutput("a", (1, 2), (-0.3, -0.3))]
    assert ag.agree(ref, cand).verdict == ag.WRONG_OUTPUT  # 0.2 > 0.1 default
    loose = ag.Thresholds(max_excess_nll=0.5)
    assert ag.agree(ref, cand, thresholds=loose).verdict == ag.AGREES


def test_probe_set_is_shipped_with_its_sha256():
    ps = load_probe_set()
    assert len(ps.probes) >= 24
    assert len({p.id for p in ps.probes}) == len(ps.probes)
    assert len({p.kind for p in ps.probes}) >= 6
    assert len(ps.sha256) == 64
    assert max(len(p.prompt) for p in ps.probes) > 10 * min(len(p.prompt) for p in ps.probes)


def test_a_url_without_generate_fails_the_probe_naming_generate_and_the_bench_api():
    """An OpenAI-only gateway in front of SGLang: the bench through --api chat works, the
    probe (always /generate) cannot; the failure says why, and fails the gate."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from glmserve.bench.probe import ProbeSpec, probe_gate, probe_step

    class OpenAIOnly(BaseHTTPRequestHandler):
        def do_POST(self):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            return None

    srv = ThreadingHTTPServer(("127.0.0.1", 0), OpenAIOnly)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        d = probe_step(f"http://127.0.0.1:{srv.server_port}", ProbeSpec(), api="chat")
    finally:
        srv.shutdown()
    assert d["endpoint"] == "native" and d["bench_api"] == "chat"
    assert "HTTP 404" in d["error"] and "native /generate, whatever --api" in d["error"]
    assert "--api chat" in d["error"]
    gate = probe_gate(d)
    assert gate is not None and not gate["ok"]
