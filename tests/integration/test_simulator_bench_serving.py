"""SGLang's own benchmark client (sglang 0.5.9 ``python -m sglang.bench_serving``) against the
simulator, offline: it must run to completion and report the output throughput the server
really produced (its ``/sim/trace``, within 5%), which is at most what the cost model predicts
and, on a loaded box, somewhat less (the simulator is late when descheduled, never faster).

bench_serving imports ``datasets`` at module level but the ``random-ids`` dataset never uses
it; the test puts a one-function stand-in on the client's PYTHONPATH instead of installing
pyarrow & co. The tokenizer is a small WordLevel one built here with ``tokenizers``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from glmserve.bench import groundtruth as gt
from glmserve.simulator import costmodel
from glmserve.simulator.costmodel import CostModel, ServerShape

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

NEEDED = ("sglang", "aiohttp", "transformers", "tokenizers", "tqdm", "pybase64", "PIL")


def _missing() -> list[str]:
    return [m for m in NEEDED if importlib.util.find_spec(m) is None]


def make_tokenizer(path: Path) -> Path:
    """A 2,000-word WordLevel tokenizer saved as a transformers-loadable directory."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "[PAD]": 1}
    for i in range(2000):
        vocab[f"w{i}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "unk_token": "[UNK]",
                "pad_token": "[PAD]",
                "model_max_length": 100000,
            }
        )
    )
    return path


def test_bench_serving_random_ids_matches_the_server_and_cost_model(start_simulator, tmp_path):
    missing = _missing()
    if missing:
        pytest.skip(f"bench_serving needs {', '.join(missing)} (see .ci/run)")
    shim = tmp_path / "shim" / "datasets"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(
        "def load_dataset(*args, **kwargs):\n"
        "    raise RuntimeError('datasets is not installed (offline test stand-in)')\n"
    )
    tok_dir = make_tokenizer(tmp_path / "tok")
    num, in_len, out_len, speed = 16, 32, 128, 4.0  # ~3 s run: the client ramp-up is a small share
    sim = start_simulator(
        "--served-model-name", "glm-5", "--tp-size", "8", "--disable-cuda-graph",
        "--max-running-requests", "64", "--sim-speed", str(speed),
    )  # fmt: skip
    out_file = tmp_path / "bench.jsonl"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "shim"), os.environ.get("PYTHONPATH", "")]),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    cmd = [
        sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang",
        "--base-url", sim.url, "--model", "glm-5", "--tokenizer", str(tok_dir),
        "--dataset-name", "random-ids", "--num-prompts", str(num),
        "--random-input-len", str(in_len), "--random-output-len", str(out_len),
        "--random-range-ratio", "1.0", "--request-rate", "inf", "--seed", "1",
        "--disable-tqdm", "--output-file", str(out_file),
    ]  # fmt: skip
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "Serving Benchmark Result" in res.stdout
    result = json.loads(out_file.read_text().splitlines()[-1])
    assert result["completed"] == num
    assert result["total_output_tokens"] == num * out_len
    shape = ServerShape(attention_backend="flashinfer", kv_cache_dtype="fp8_e4m3")
    predicted = costmodel.predict_batch_run(CostModel(), shape, num, in_len, out_len, 64)
    expected = predicted["output_throughput"] * speed  # the simulator runs `speed` x faster
    trace = httpx.get(sim.url + "/sim/trace", timeout=30).json()
    reqs = [r for r in trace["requests"].values() if r["max_new_tokens"] == out_len]
    assert len(reqs) == num
    start = min(r["arrival"] for r in reqs)
    end = max(r["emit_times"][-1] for r in reqs)
    truth = gt.truth_tok_s(trace, start, end)
    got = result["output_throughput"]
    print(f"bench_serving {got:.1f} tok/s, server {truth:.1f}, cost model {expected:.1f}")
    assert got == pytest.approx(truth, rel=0.05), f"bench_serving {got:.1f} vs server {truth:.1f}"
    # the server's own rate: never above the model (its prefill and first step start after the
    # arrival, so a little below it), and late by little more than the box's load
    assert 0.8 * expected < truth <= expected, (truth, expected)
