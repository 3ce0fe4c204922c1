"""Issue 14 #1 prompts: a ShareGPT JSON / JSONL / plain text dataset file, ``--tokenizer`` for
exact token lengths, ``--random-range-ratio``; bad files are one-line errors (exit 2)."""

from __future__ import annotations

import json

import pytest
from tests.fixtures.tokenizer import VOCAB

from glmserve.bench.workload import dataset_prompts, lengths, make_prompts, read_dataset
from glmserve.cli import main
from glmserve.errors import ConfigError

SIM = ["--disable-cuda-graph", "--sim-speed", "20"]


def bench(capsys, url: str, *args: str) -> tuple[int, dict, str]:
    # --output-len 8 unless args give it: an option given twice with two values is refused
    length = [] if "--output-len" in args else ["--output-len", "8"]
    rc = main(["bench", "--url", url, "--json", "--warmup", "0", *length, *args])
    cap = capsys.readouterr()
    return rc, (json.loads(cap.out) if cap.out.strip() else {}), cap.err


def sharegpt(n: int, words: int) -> list[dict]:
    return [
        {"conversations": [
            {"from": "human", "value": " ".join(VOCAB[(i + j) % len(VOCAB)] for j in range(words))},
            {"from": "gpt", "value": "ok"},
        ]}
        for i in range(n)
    ]  # fmt: skip


def test_dataset_formats_parse(tmp_path):
    js = tmp_path / "d.json"
    js.write_text(json.dumps(sharegpt(3, 5)))
    jl = tmp_path / "d.jsonl"
    jl.write_text("\n".join(json.dumps(x) for x in [*sharegpt(2, 4), {"prompt": "hello"}]))
    txt = tmp_path / "d.txt"
    txt.write_text("first prompt\n\nsecond prompt\n")
    assert len(read_dataset(str(js))) == 3
    assert read_dataset(str(jl))[-1] == "hello"
    assert read_dataset(str(txt)) == ["first prompt", "second prompt"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\nnot json\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl:2"):
        read_dataset(str(bad))
    assert dataset_prompts(str(txt), 5, 0)[:2] != []  # cycled to the count asked


def test_random_range_ratio_draws_lengths_in_range():
    import random

    ls = lengths(2000, 100, 0.25, random.Random(0))
    assert min(ls) >= 25 and max(ls) <= 100 and len(set(ls)) > 50
    assert {len(p) for p in make_prompts(50, 64, 0, 0.5)} <= set(range(32, 65))
    assert {len(p) for p in make_prompts(5, 64, 0)} == {64}


def test_sharegpt_with_tokenizer_gives_exact_prompt_tokens(capsys, start_simulator, tmp_path,
                                                           tokenizer_dir):  # fmt: skip
    sim = start_simulator("--tokenizer-path", str(tokenizer_dir), *SIM, timeout=90)
    data = tmp_path / "sharegpt.json"
    data.write_text(json.dumps(sharegpt(4, 12)))
    code, res, err = bench(capsys, sim.url, "--dataset-path", str(data), "--tokenizer",
                           str(tokenizer_dir), "--num-prompts", "4", "--api", "openai")  # fmt: skip
    assert code == 0, err
    lv = res["levels"][0]
    assert lv["input_tokens"] == 4 * 12  # token ids sent: exactly the words
    assert res["settings"]["dataset_path"] == str(data)
    # without a tokenizer the text is sent and the server's count is the one recorded
    code, res, err = bench(capsys, sim.url, "--dataset-path", str(data), "--num-prompts", "4")
    assert code == 0, err
    assert res["levels"][0]["input_tokens"] == 4 * 12


def test_range_ratio_against_the_simulator(capsys, start_simulator):
    sim = start_simulator(*SIM)
    args = ["--mode", "concurrency", "--concurrency", "8", "--num-prompts", "32",
            "--random-range-ratio", "0.5", "--input-len", "64", "--output-len", "32",
            "--output-details"]  # fmt: skip
    code, res, err = bench(capsys, sim.url, *args)
    assert code == 0, err
    pr = res["levels"][0]["per_request"]
    assert all(16 <= n <= 32 for n in pr["output_tokens"]) and len(set(pr["output_tokens"])) > 3
    assert all(32 <= n <= 64 for n in pr["input_tokens"])


def test_bad_dataset_and_tokenizer_are_usage_errors(capsys, start_simulator, tmp_path):
    sim = start_simulator(*SIM)
    code, _, err = bench(capsys, sim.url, "--dataset-path", str(tmp_path / "missing.json"))
    assert code == 2 and "missing.json" in err
    code, _, err = bench(capsys, sim.url, "--tokenizer", str(tmp_path))
    assert code == 2 and "--tokenizer" in err
    code, _, err = bench(capsys, sim.url, "--random-range-ratio", "1.5")
    assert code == 2 and "--random-range-ratio" in err


def conversations(replies: list[int], prompt_words: int = 6) -> list[dict]:
    """ShareGPT rows whose replies have the given lengths in words (= tokens here)."""
    return [
        {"conversations": [
            {"from": "human", "value": " ".join(VOCAB[(i + j) % 400] for j in range(prompt_words))},
            {"from": "gpt", "value": " ".join(VOCAB[j % 400] for j in range(n))},
        ]}
        for i, n in enumerate(replies)
    ]  # fmt: skip


def test_dataset_rows_keep_the_reply_after_the_prompt(tmp_path):
    from glmserve.bench.workload import DatasetRow, read_dataset_rows

    jl = tmp_path / "d.jsonl"
    rows = [{"conversations": [{"from": "system", "value": "be brief"},
                               {"from": "human", "value": "q1"}, {"from": "gpt", "value": "a1"}]},
            {"prompt": "q2", "completion": "a2"},
            {"conversations": [{"role": "user", "content": "q3"}]}]  # fmt: skip
    jl.write_text("\n".join(json.dumps(r) for r in rows))
    assert read_dataset_rows(str(jl)) == [
        DatasetRow("q1", "a1"), DatasetRow("q2", "a2"), DatasetRow("q3", None)
    ]  # fmt: skip


def test_dataset_output_lengths_follow_the_replies_as_bench_serving_does(
    capsys,
    start_simulator,
    tmp_path,
    tokenizer_dir,
):
    """bench_serving's ShareGPT default: with a tokenizer and no --output-len each request asks
    for its reply's length in tokens; replies under 2 tokens are skipped. --output-len (or its
    alias --sharegpt-output-len) fixes it; without a tokenizer --output-len's default applies
    and stderr says why."""
    sim = start_simulator("--tokenizer-path", str(tokenizer_dir), *SIM, timeout=90)
    data = tmp_path / "sharegpt.json"
    replies = [5, 9, 1, 13, 7]  # the 1-token reply is pruned
    data.write_text(json.dumps(conversations(replies)))
    common = ["bench", "--url", sim.url, "--json", "--warmup", "0", "--dataset-path", str(data),
              "--mode", "concurrency", "--concurrency", "4", "--num-prompts", "4",
              "--output-details"]  # fmt: skip
    rc = main([*common, "--tokenizer", str(tokenizer_dir)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    res = json.loads(cap.out)
    assert sorted(res["levels"][0]["per_request"]["output_tokens"]) == [5, 7, 9, 13]
    assert res["settings"]["output_len"] == "reply"
    import hashlib

    assert res["settings"]["dataset_sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert "output tokens" not in cap.err

    rc = main([*common, "--tokenizer", str(tokenizer_dir), "--sharegpt-output-len", "6"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    res = json.loads(cap.out)
    assert res["levels"][0]["per_request"]["output_tokens"] == [6, 6, 6, 6]
    assert res["settings"]["output_len"] == 6

    rc = main(common)  # no tokenizer: the default length, and a note saying so
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    res = json.loads(cap.out)
    assert set(res["levels"][0]["per_request"]["output_tokens"]) == {256}
    assert "256 output tokens (no --tokenizer to count replies" in cap.err


def test_a_dataset_without_usable_replies_is_a_usage_error(capsys, start_simulator, tmp_path,
                                                           tokenizer_dir):  # fmt: skip
    sim = start_simulator(*SIM)
    data = tmp_path / "short.json"
    data.write_text(json.dumps(conversations([1, 0])))
    rc = main(["bench", "--url", sim.url, "--warmup", "0", "--dataset-path", str(data),
               "--tokenizer", str(tokenizer_dir)])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "no prompt with a reply of at least 2 tokens" in err
    assert "give --output-len N" in err


def test_dataset_lengths_count_special_tokens_as_bench_serving_does(tmp_path, tokenizer_dir):
    """bench_serving measures prompt and reply with ``tokenizer.encode(text)``: a BOS token
    counts (a reply of n words asks for n + 1 tokens, a 1-word reply is kept), and the prompt
    ids are what the server makes of the text (BOS first)."""
    from tokenizers import processors
    from transformers import AutoTokenizer

    from glmserve.bench.workload import dataset_prompts_with_replies

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    tok.add_special_tokens({"bos_token": "[BOS]"})
    bos = tok.convert_tokens_to_ids("[BOS]")
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="[BOS] $A", special_tokens=[("[BOS]", bos)]
    )
    data = tmp_path / "d.json"
    data.write_text(json.dumps(conversations([4, 1], prompt_words=3)))
    prompts, outs, rows = dataset_prompts_with_replies(str(data), 2, 0, tok)
    assert rows == 2 and sorted(outs) == [2, 5]  # 1 + BOS, 4 + BOS
    assert all(p[0] == bos and len(p) == 4 for p in prompts)


def test_repeated_dataset_prompts_are_noted(capsys, start_simulator, tmp_path):
    sim = start_simulator(*SIM)
    data = tmp_path / "d.txt"
    data.write_text("one prompt\nanother prompt\n")
    code, res, err = bench(capsys, sim.url, "--dataset-path", str(data), "--num-prompts", "6")
    assert code == 0, err
    assert any("the dataset gave 2 distinct prompts for 6 requests" in n for n in res["notes"])
    assert res["settings"]["dataset_rows"] == 2


def test_random_and_sharegpt_output_lens_apply_to_their_own_prompts():
    """bench_serving's --random-output-len is ignored for a ShareGPT file and
    --sharegpt-output-len for random prompts; --output-len is both (refused beside either)."""
    from glmserve.bench.options import pick_output_len

    assert pick_output_len(None, 1024, None, "d.json") is None  # the replies' lengths
    assert pick_output_len(None, 1024, 64, "d.json") == 64
    assert pick_output_len(None, 1024, 64, None) == 1024
    assert pick_output_len(16, None, None, "d.json") == 16
    with pytest.raises(ConfigError, match="--output-len and --random-output-len"):
        pick_output_len(16, 1024, None, None)
