"""Output agreement end to end against the simulator: ``bench --probe`` stores the probe set's
outputs; ``bench --reference N`` on a server whose simulated output garbles is WRONG_OUTPUT
(the output-agreement gate fails, exit 1); one that drifts slightly (the Triton FP8 case)
agrees; ``compare`` shows the verdict and gives the garbled one no speedup."""

from __future__ import annotations

import json

import httpx
import pytest

from glmserve.bench import agreement as ag
from glmserve.cli import main

SIM = ["--tp-size", "2", "--disable-cuda-graph", "--sim-speed", "20"]
BENCH = ["--warmup", "0", "--output-len", "4"]


def bench(capsys, url: str, *args: str) -> tuple[int, dict, str]:
    rc = main(["bench", "--url", url, "--json", *BENCH, *args])
    cap = capsys.readouterr()
    return rc, json.loads(cap.out), cap.err


@pytest.fixture
def reference(capsys, start_simulator) -> int:
    sim = start_simulator(*SIM)
    rc, res, err = bench(capsys, sim.url, "--probe")
    assert rc == 0, err
    probe = res["probe"]
    assert len(probe["outputs"]) >= 24 and len(probe["sha256"]) == 64
    assert all(len(o["tokens"]) == 32 and o["prompt_ids"] for o in probe["outputs"])
    # distinct prompts, distinct outputs: the text model reads the context
    assert len({tuple(o["tokens"]) for o in probe["outputs"]}) == len(probe["outputs"])
    return res["id"]


def test_same_model_reproduces_the_reference_exactly(capsys, start_simulator, reference):
    sim = start_simulator(*SIM)
    rc, res, err = bench(capsys, sim.url, "--reference", str(reference))
    assert rc == 0, err
    a = res["probe"]["agreement"]
    assert a["verdict"] == ag.AGREES and a["nll_method"] == "teacher-forced"
    assert a["greedy_agreement"] == 1.0 and a["excess_nll"] == pytest.approx(0.0, abs=1e-12)


def test_garbled_output_is_wrong_output_and_fails_the_gate(capsys, start_simulator, reference):
    sim = start_simulator(*SIM, "--sim-output-fault", "garble@flashinfer/fp8_e4m3")
    rc, res, _ = bench(capsys, sim.url, "--reference", str(reference))
    assert rc == 1  # the output-agreement gate
    a = res["probe"]["agreement"]
    assert a["verdict"] == ag.WRONG_OUTPUT
    assert a["excess_nll"] > 1.0 and a["greedy_agreement"] < 0.2
    gate = next(g for g in res["gates"] if g["gate"] == "output-agreement")
    assert not gate["ok"] and ag.WRONG_OUTPUT in gate["reason"]
    # compare: the verdict shown, no speedup for a server that computes another model
    assert main(["compare", str(reference), str(res["id"]), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    row = table["rows"][1]
    assert row["output"]["verdict"] == ag.WRONG_OUTPUT
    assert not row["comparable"] and row["decode_speedup"] is None
    assert ag.WRONG_OUTPUT in row["incomparable_reason"]


def test_fault_for_another_backend_leaves_output_alone(capsys, start_simulator, reference):
    sim = start_simulator(*SIM, "--sim-output-fault", "garble@triton")
    rc, res, err = bench(capsys, sim.url, "--reference", str(reference))
    assert rc == 0, err
    assert res["probe"]["agreement"]["verdict"] == ag.AGREES


def test_slight_drift_within_threshold_is_not_flagged(capsys, start_simulator, reference):
    sim = start_simulator(*SIM, "--sim-output-fault", "drift=0.02")
    rc, res, err = bench(capsys, sim.url, "--reference", str(reference))
    assert rc == 0, err
    a = res["probe"]["agreement"]
    assert a["verdict"] == ag.AGREES
    assert 0 < a["excess_nll"] < 0.05  # not identical: it does drift
    assert 0.5 < a["greedy_agreement"] < 1.0  # some near-ties flip
    # compare (agreed-prefix estimate from the stored outputs) agrees too, and says so
    assert main(["compare", str(reference), str(res["id"])]) == 0
    text = capsys.readouterr().out
    assert "output agrees with reference" in text


def test_openai_logprobs_and_echo_on_the_simulator(start_simulator):
    sim = start_simulator(*SIM)
    body = {"model": "m", "prompt": "The capital of France is", "max_tokens": 5, "logprobs": 1}
    one = httpx.post(sim.url + "/v1/completions", json=body, timeout=30).json()
    out = ag.from_openai("p", one)
    assert len(out.tokens) == 5 and all(lp <= 0 for lp in out.logprobs)
    echo = httpx.post(sim.url + "/v1/completions", json={**body, "echo": True}, timeout=30).json()
    lp = echo["choices"][0]["logprobs"]
    assert lp["token_logprobs"][0] is None  # the prompt's first token has none
    assert lp["tokens"][-5:] == list(out.tokens)  # greedy: the same continuation
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
            "logprobs": True}  # fmt: skip
    got = httpx.post(sim.url + "/v1/chat/completions", json=chat, timeout=30).json()
    assert len(ag.from_openai("c", got).tokens) == 3


def test_logprob_start_len_past_the_input_is_refused(start_simulator):
    sim = start_simulator(*SIM)
    body = {"input_ids": [1, 2, 3], "return_logprob": True, "logprob_start_len": 9,
            "sampling_params": {"max_new_tokens": 1}}  # fmt: skip
    r = httpx.post(sim.url + "/generate", json=body, timeout=30)
    assert r.status_code == 400 and "logprob_start_len" in r.text


def test_a_chat_bench_probes_through_generate_and_says_so(capsys, start_simulator, reference):
    sim = start_simulator(*SIM)
    rc, res, err = bench(capsys, sim.url, "--api", "chat", "--reference", str(reference))
    assert rc == 0, err
    probe = res["probe"]
    assert probe["endpoint"] == "native" and probe["bench_api"] == "chat"
    assert probe["agreement"]["verdict"] == ag.AGREES
    assert probe["agreement"]["nll_method"] == "teacher-forced"
    rc = main(["bench", "--url", sim.url, *BENCH, "--api", "chat", "--probe"])
    assert rc == 0
    cap = capsys.readouterr()
    assert "probed through /generate; benched through --api chat" in cap.out + cap.err


def test_compare_of_stored_outputs_does_not_call_a_partly_garbled_server_agreeing(
    capsys, start_simulator, reference
):
    # 10% of positions garbled: the outputs diverge exactly there, so over the tokens both
    # chose the candidate's logprobs equal the reference's; teacher forced it is WRONG_OUTPUT.
    sim = start_simulator(*SIM, "--sim-output-fault", "garble=0.1")
    rc, res, err = bench(capsys, sim.url, "--probe")
    assert rc == 0, err
    assert main(["compare", str(reference), str(res["id"]), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][1]
    assert row["output"]["verdict"] is None  # was "agrees" (0.000 nats/token, agreed-prefix)
    assert any(f"--reference {reference}" in n for n in row["notes"])
    rc, forced, _ = bench(capsys, sim.url, "--reference", str(reference))
    assert rc == 1 and forced["probe"]["agreement"]["verdict"] == ag.WRONG_OUTPUT
