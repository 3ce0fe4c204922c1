"""The simulator's HTTP API against SGLang 0.5.9's shapes, over a real socket."""

from __future__ import annotations

import gzip
import itertools
import json
import time

import httpx
import pytest
from tests.fixtures.simulator import FAST


def sse_events(resp: httpx.Response) -> list[str]:
    """Payloads of ``data: ...`` events, checking the blank-line framing as we go."""
    raw = b"".join(resp.iter_raw()).decode()
    assert raw.endswith("\n\n"), raw[-100:]
    blocks = raw.split("\n\n")[:-1]
    out = []
    for b in blocks:
        assert b.startswith("data: "), b
        assert "\n" not in b, "one data line per event"
        out.append(b[len("data: ") :])
    return out


def test_health_model_and_server_info(simulator):
    with httpx.Client(base_url=simulator.url, timeout=10) as c:
        assert c.get("/health").status_code == 200
        assert c.get("/health_generate").status_code == 200
        for path in ("/model_info", "/get_model_info"):
            info = c.get(path).json()
            assert info["model_path"] == "glm-5-sim"
            assert info["is_generation"] is True
            assert info["architectures"] == ["GlmMoeDsaForCausalLM"]
        for path in ("/server_info", "/get_server_info"):
            si = c.get(path).json()
            assert si["version"] == "0.5.9"
            assert si["tp_size"] == 2
            assert si["port"] == simulator.port
            assert si["max_total_num_tokens"] > 400_000
            st = si["internal_states"][0]
            assert isinstance(st["last_gen_throughput"], float)
            assert st["memory_usage"]["token_capacity"] == si["max_total_num_tokens"]
        models = c.get("/v1/models").json()
        assert models["object"] == "list"
        assert models["data"][0]["id"] == "glm-5-sim"
        assert models["data"][0]["object"] == "model"
        assert c.get("/nope").status_code == 404
        assert c.get("/generate").status_code == 405
        assert c.get("/metrics").status_code == 404  # only with --enable-metrics
    log = simulator.log_text()
    assert "Endpoint '/get_model_info' is deprecated" in log
    assert '"GET /server_info HTTP/1.1" 200 OK' in log


def test_native_generate_stream_cumulative(simulator):
    body = {"input_ids": [1, 2, 3, 4, 5], "sampling_params": {"max_new_tokens": 6}, "stream": True}
    with (
        httpx.Client(base_url=simulator.url, timeout=10) as c,
        c.stream("POST", "/generate", json=body) as r,
    ):
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) == 6
    for i, ch in enumerate(chunks, start=1):
        meta = ch["meta_info"]
        assert meta["completion_tokens"] == i
        assert meta["prompt_tokens"] == 5
        assert len(ch["output_ids"]) == i  # cumulative
        assert ch["text"].startswith(chunks[0]["text"])
    assert chunks[0]["meta_info"]["finish_reason"] is None
    assert "e2e_latency" not in chunks[0]["meta_info"]
    last = chunks[-1]["meta_info"]
    assert last["finish_reason"] == {"type": "length", "length": 6}
    assert last["e2e_latency"] > 0
    assert len({ch["meta_info"]["id"] for ch in chunks}) == 1


def test_native_generate_non_stream_text_and_batch(simulator):
    with httpx.Client(base_url=simulator.url, timeout=10) as c:
        one = c.post(
            "/generate", json={"text": "Hello there", "sampling_params": {"max_new_tokens": 3}}
        ).json()
        assert one["meta_info"]["completion_tokens"] == 3
        assert len(one["output_ids"]) == 3
        assert one["text"]
        many = c.post(
            "/generate",
            json={"input_ids": [[1, 2], [3, 4, 5]], "sampling_params": {"max_new_tokens": 2}},
        ).json()
        assert [m["meta_info"]["prompt_tokens"] for m in many] == [2, 3]
        bad = c.post("/generate", json={"sampling_params": {}})
        assert bad.status_code == 400
        assert "input_ids" in bad.json()["error"]["message"]


@pytest.mark.parametrize("k", [3])
def test_tokens_per_chunk_and_usage(start_simulator, k):
    sim = start_simulator("--sim-tokens-per-chunk", str(k), "--disable-cuda-graph", *FAST)
    n = 10
    body = {"model": "m", "prompt": "abcd" * 8, "max_tokens": n, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    with (
        httpx.Client(base_url=sim.url, timeout=10) as c,
        c.stream("POST", "/v1/completions", json=body) as r,
    ):
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    docs = [json.loads(e) for e in events[:-1]]
    usage_doc = docs[-1]
    assert usage_doc["choices"] == []
    content = docs[:-1]
    assert all(d["object"] == "text_completion" and d["usage"] is None for d in content)
    pieces = [d["choices"][0]["text"] for d in content]
    # SGLang's stream_interval: the first token alone, then k per chunk, the remainder in
    # the last one: 10 = 1+3+3+3 (k=3)
    assert len(content) == 1 + -(-(n - 1) // k)
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    assert usage_doc["usage"]["completion_tokens"] == n
    assert usage_doc["usage"]["prompt_tokens"] == 8
    assert usage_doc["usage"]["total_tokens"] == n + 8
    # each token's text is " word": count them in what was streamed
    assert sum(p.count(" ") for p in pieces) == n
    # native stream: completion_tokens 1, then advancing by k per chunk
    body2 = {"input_ids": [7] * 4, "sampling_params": {"max_new_tokens": n}, "stream": True}
    with (
        httpx.Client(base_url=sim.url, timeout=10) as c,
        c.stream("POST", "/generate", json=body2) as r,
    ):
        counts = [json.loads(e)["meta_info"]["completion_tokens"] for e in sse_events(r)[:-1]]
    assert counts == [1, 4, 7, 10]


def test_chat_completions_stream_and_non_stream(simulator):
    msgs = [{"role": "user", "content": "Say something long enough."}]
    with httpx.Client(base_url=simulator.url, timeout=10) as c:
        body = {"model": "m", "messages": msgs, "max_tokens": 4, "stream": True,
                "stream_options": {"include_usage": True}}  # fmt: skip
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            events = sse_events(r)
        docs = [json.loads(e) for e in events[:-1]]
        assert docs[0]["choices"][0]["delta"]["role"] == "assistant"
        assert all(d["model"] == "m" for d in docs)  # SGLang echoes the request's model
        fin = docs[-2]["choices"][0]  # a finish chunk with an empty delta, then usage
        assert fin["finish_reason"] == "length" and fin["delta"]["content"] is None
        assert all(d["choices"][0]["finish_reason"] is None for d in docs[:-2])
        assert all(d["object"] == "chat.completion.chunk" for d in docs)
        text = "".join(d["choices"][0]["delta"]["content"] or "" for d in docs if d["choices"])
        assert text.count(" ") == 4
        assert docs[-1]["usage"]["completion_tokens"] == 4
        full = c.post("/v1/chat/completions", json={**body, "stream": False}).json()
        assert full["object"] == "chat.completion"
        assert full["choices"][0]["message"]["role"] == "assistant"
        assert full["usage"]["completion_tokens"] == 4
        wrong = c.post(
            "/v1/chat/completions", content=b"{}", headers={"content-type": "text/plain"}
        )
        assert wrong.status_code == 400


def test_ground_truth_matches_what_the_client_saw(simulator):
    n = 12
    body = {"input_ids": [1] * 16, "sampling_params": {"max_new_tokens": n}, "stream": True}
    arrivals = []
    with httpx.Client(base_url=simulator.url, timeout=10) as c:
        with c.stream("POST", "/generate", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    arrivals.append(time.perf_counter())
                    rid = json.loads(line[6:])["meta_info"]["id"]
        trace = c.get("/sim/trace", params={"rid": rid}).json()
        cfg = c.get("/sim/config").json()
    rec = trace["requests"][rid]
    assert rec["completion_tokens"] == n
    assert len(rec["gen_times"]) == n and len(rec["emit_times"]) == n
    assert all(e >= g for g, e in zip(rec["gen_times"], rec["emit_times"], strict=True))
    # the client saw the same gaps the server emitted (same host, same clock)
    srv_gaps = [b - a for a, b in zip(rec["emit_times"], rec["emit_times"][1:], strict=False)]
    cli_gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert sum(cli_gaps) == pytest.approx(sum(srv_gaps), rel=0.1, abs=0.01)
    # decode steps follow the cost model (time-scaled)
    decode = [s for s in trace["steps"] if s["kind"] == "decode"]
    assert decode
    for s in decode:
        assert s["end"] - s["start"] == pytest.approx(s["model_s"] * cfg["time_scale"], rel=1e-6)
    # and the tokens really left at that pace: emission gaps of consecutive decode steps
    pairs = [(a, b) for a, b in itertools.pairwise(trace["steps"]) if b["kind"] == "decode"]
    achieved = sum(b["emitted"] - a["emitted"] for a, b in pairs)
    configured = sum(b["model_s"] * cfg["time_scale"] for _, b in pairs)
    assert achieved == pytest.approx(configured, rel=0.15)
    assert cfg["shape"]["cast_mode"] == "whole_pool"


def test_metrics_profile_and_flush(start_simulator, tmp_path):
    sim = start_simulator("--enable-metrics", "--tp-size", "2", "--disable-cuda-graph", *FAST)
    with httpx.Client(base_url=sim.url, timeout=10) as c:
        c.post("/generate", json={"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 3}})
        text = c.get("/metrics").text
        assert "# TYPE sglang:num_running_reqs gauge" in text
        assert 'sglang:generation_tokens_total{model_name="glm-5-sim"}' in text
        assert "sglang:time_to_first_token_seconds_bucket" in text
        r = c.post("/start_profile", json={"output_dir": str(tmp_path), "num_steps": 3})
        assert r.text == "Start profiling.\n"
        c.post("/generate", json={"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 8}})
        files = sorted(tmp_path.glob("*-TP-*.trace.json.gz"))
        assert [f.name.split("-TP-")[1] for f in files] == ["0.trace.json.gz", "1.trace.json.gz"]
        doc = json.loads(gzip.decompress(files[0].read_bytes()))
        kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
        names = {e["name"] for e in kernels}
        assert any(n.startswith("void at::native::unrolled_elementwise_kernel") for n in names)
        assert any(n.startswith("ncclDevKernel_AllReduce_Sum_bf16") for n in names)
        assert c.post("/flush_cache").status_code == 200
    log = sim.log_text()
    assert "Profiling starts. Traces will be saved to:" in log
    assert "Profiling done." in log


def test_sender_threads_keep_framing_order_and_ground_truth(start_simulator):
    sim = start_simulator("--sim-send-threads", "2", "--disable-cuda-graph", *FAST)
    n = 8
    with httpx.Client(base_url=sim.url, timeout=10) as c:
        for _ in range(3):  # keep-alive: later requests reuse the connection
            body = {"input_ids": [3] * 8, "sampling_params": {"max_new_tokens": n}, "stream": True}
            with c.stream("POST", "/generate", json=body) as r:
                events = sse_events(r)
            assert events[-1] == "[DONE]"
            metas = [json.loads(e)["meta_info"] for e in events[:-1]]
            assert [m["completion_tokens"] for m in metas] == list(range(1, n + 1))
            rec = c.get("/sim/trace", params={"rid": metas[0]["id"]}).json()["requests"]
            times = rec[metas[0]["id"]]
            assert len(times["emit_times"]) == n
            assert times["emit_times"] == sorted(times["emit_times"])
