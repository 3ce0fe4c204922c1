"""Bench input audit: every bad option value is one line naming the flag, exit 2, before any
server is contacted (never exit 0 with NaN in the JSON, 70 from a crash, 5 "cannot reach", or
a run that never ends); dataset files read within a limit; open-loop levels named by rate."""

from __future__ import annotations

import json
import math
import os

import pytest
from tests.fixtures.cli import bench_json, run_cli

from glmserve.bench.results import BenchResult, render_plain
from glmserve.bench.workload import check_dataset_file, read_dataset
from glmserve.errors import ConfigError
from glmserve.store import RunStore

URL = "http://127.0.0.1:9"  # nothing listens: before the fixes most of these were exit 5


def _one_line_usage_error(code: int, err: str, flag: str) -> None:
    assert code == 2, err
    assert flag in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        # 1: non-finite / non-positive floats, gates included (were exit 0 or exit 1 after a run)
        (["--slo", "ttft_ms=nan"], "--slo"),
        (["--slo", "ttft_ms=inf"], "--slo"),
        (["--slo", "tpot_ms=abc"], "--slo"),
        (["--slo", "ttft_ms=100,ttft_ms=200"], "--slo"),
        (["--stall-timeout", "nan"], "--stall-timeout"),
        (["--stall-timeout", "inf"], "--stall-timeout"),
        (["--min-decode-tok-s", "nan"], "--min-decode-tok-s"),
        (["--min-decode-tok-s", "-1"], "--min-decode-tok-s"),
        (["--max-ttft-ms", "nan"], "--max-ttft-ms"),
        (["--max-ttft-ms", "-1"], "--max-ttft-ms"),
        (
            ["--mode", "concurrency", "--concurrency", "1", "--min-output-tok-s", "1:nan"],
            "--min-output-tok-s",
        ),
        (
            ["--mode", "concurrency", "--concurrency", "1", "--min-output-tok-s", "1:-5"],
            "--min-output-tok-s",
        ),
        (["--random-range-ratio", "nan"], "--random-range-ratio"),
        # 2: burstiness (inf was exit 70 in gammavariate), and without an open loop
        (["--request-rate", "5", "--burstiness", "inf"], "--burstiness"),
        (["--request-rate", "5", "--burstiness", "nan"], "--burstiness"),
        (["--request-rate", "5", "--burstiness", "1e6"], "--burstiness"),
        (["--burstiness", "2"], "--burstiness"),
        (["--request-rate", "nan"], "--request-rate"),
        (["--request-rate", "1e-9"], "--request-rate"),  # 200 requests over 6,000 years
        # 4: durations that never end
        (["--duration", "nan"], "--duration"),
        (["--duration", "inf"], "--duration"),
        (["--duration", "1e308"], "--duration"),
        (["--duration", "-1"], "--duration"),
        # 5: sizes and lists
        (["--mode", "concurrency", "--concurrency", "10000000"], "--concurrency"),
        (["--mode", "concurrency", "--concurrency", "1,,2"], "--concurrency"),
        (["--mode", "concurrency", "--concurrency", ""], "--concurrency"),
        (["--concurrency", "0"], "--concurrency"),  # decode mode ignored it
        (["--concurrency", "-1"], "--concurrency"),
        (["--concurrency", "abc"], "--concurrency"),
        (["--concurrency", "4"], "--concurrency"),  # decode: one stream
        (["--request-rate", "5", "--concurrency", "4"], "--concurrency"),
        (["--warmup", "-1"], "--warmup"),
        (["--workers", "0"], "--workers"),
        (["--workers", "-1"], "--workers"),
        (["--workers", "1000"], "--workers"),
        (["--rate-sweep", "100000"], "--rate-sweep"),
        (["--rate-sweep", "0"], "--rate-sweep"),
        (["--label", "k=" + "v" * 300], "--label"),  # said "--mode rate needs --request-rate"
        (["--request-rate", "5", "--max-concurrency", "10000000"], "--max-concurrency"),
        (["--mode", "decode", "--request-rate", "5"], "--mode"),
        (["--mode", "concurrency", "--rate-sweep", "2"], "--mode"),
        (["--label", "k=v", "--label", "k=w"], "--label"),
        # 9: an empty rate list names --request-rate, not "--mode rate"
        (["--request-rate", ""], "--request-rate"),
        (["--request-rate", "5,,10"], "--request-rate"),
        # 8: inputs and outputs checked before the bench, not after it
        (["--dataset-path", "/dev/zero"], "--dataset-path"),
        (["--dataset-path", "/nonexistent/prompts.txt"], "--dataset-path"),
        (["--output", "/nonexistent/dir/out.json"], "--output"),
        (["--output", "/"], "--output"),
        # 2026-12-03 audit: empty list items and sizes that exhausted the client (exit 70)
        (["--percentiles", "50,,99"], "--percentiles"),
        (["--dataset-name", "sonnet"], "--dataset-name"),
        (["--dataset-name", "sharegpt"], "--dataset-name"),
        (["--dataset-name", "random", "--dataset-path", "/etc/hostname"], "--dataset-name"),
        (["--slo", "ttft_ms=5,,tpot_ms=6"], "--slo"),
        (["--output-len", "99999999999999999999"], "--output-len"),
        (["--input-len", "1000000000"], "--input-len"),
        (["--num-prompts", "99999999999999999999"], "--num-prompts"),
        (["--warmup", "1000000000"], "--warmup"),
        (["--input-len", "1000000", "--warmup", "30"], "--input-len"),
    ],
)
def test_bad_value_is_a_one_line_usage_error_before_any_request(capsys, args, flag):
    code, out, err = run_cli(capsys, "bench", "--url", URL, "--num-prompts", "2", *args)
    _one_line_usage_error(code, err, flag)
    assert out == ""
    with RunStore.open() as store:
        assert store.list_bench_results() == []


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1",
        "http://256.1.1.1:80",
        "foo",
        "http://",
        "ftp://x",
        "http://h:99999",
        "http://h:0",
        "http://h:1/?q=1",
    ],
)
def test_malformed_url_is_a_usage_error_naming_url(capsys, url):
    code, _, err = run_cli(capsys, "bench", "--url", url, "--num-prompts", "1")
    _one_line_usage_error(code, err, "--url")


@pytest.mark.parametrize(
    ("url", "fault"),
    [
        ("http://[::1", "no closing ']'"),
        ("http://[::1:8000/v1", "no closing ']'"),
        ("http://::1]:8000", "a ']' with no '['"),
    ],
)
def test_an_unbalanced_ipv6_bracket_is_named(capsys, url, fault):
    """It said "not a URL (Invalid port: ':1')": httpx's reading of the unclosed address."""
    code, _, err = run_cli(capsys, "bench", "--url", url, "--num-prompts", "1")
    _one_line_usage_error(code, err, "--url")
    assert fault in err and "Invalid port" not in err, err


def test_nan_slo_against_a_live_server_is_refused_and_nothing_stored(capsys, fake):
    """The audit's case: exit 0 with ``NaN`` in the JSON and the store, every request good."""
    code, data, err = bench_json(capsys, fake, "--slo", "ttft_ms=nan")
    _one_line_usage_error(code, err, "--slo")
    assert data == {}
    with RunStore.open() as store:
        assert store.list_bench_results() == []


def test_open_loop_is_implied_and_explicit_rate_mode_still_works(capsys, fake):
    fake.n_tokens, fake.itl = 8, 0.001  # as asked (--output-len 8)
    code, data, err = bench_json(capsys, fake, "--request-rate", "inf", "--burstiness", "2")
    assert code == 0, err
    assert data["mode"] == "rate" and data["settings"]["burstiness"] == 2.0
    code, data, err = bench_json(capsys, fake, "--mode", "rate", "--request-rate", "inf")
    assert code == 0 and data["mode"] == "rate"


def test_output_file_in_a_writable_directory_is_written(capsys, fake, tmp_path):
    fake.n_tokens, fake.itl = 8, 0.001  # as asked (--output-len 8)
    dest = tmp_path / "r.json"
    code, data, _ = bench_json(capsys, fake, "--output", str(dest))
    assert code == 0 and json.loads(dest.read_text())["id"] == data["id"]


# -- 8: dataset files ----------------------------------------------------------------------


def test_dataset_over_the_limit_is_refused_regular_file_and_pipe(tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("a prompt\n" * 100)
    with pytest.raises(ConfigError, match=r"--dataset-path .*limit"):
        check_dataset_file(str(big), limit=100)
    assert read_dataset(str(big), limit=10_000)[0] == "a prompt"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    pid = os.fork()
    if pid == 0:  # the writer: more than the limit, then exit
        try:
            with open(fifo, "w") as f:
                f.write("x\n" * 1000)
        finally:
            os._exit(0)
    try:
        with pytest.raises(ConfigError, match="limit"):
            read_dataset(str(fifo), limit=100)
    finally:
        os.waitpid(pid, 0)


def test_dataset_device_and_directory_are_refused(tmp_path):
    for path in ("/dev/zero", str(tmp_path)):
        with pytest.raises(ConfigError, match="not a regular file"):
            check_dataset_file(path)


# -- 9: wording ------------------------------------------------------------------------------


def test_open_loop_level_is_named_by_its_rate(capsys):
    from glmserve.bench.settings import LevelRun
    from glmserve.cli.views import PlainProgress

    PlainProgress().level_finished(LevelRun(concurrency=0, workers=1, rate=5.0))
    PlainProgress().level_finished(LevelRun(concurrency=8, workers=1, rate=math.inf))
    PlainProgress().level_finished(LevelRun(concurrency=4, workers=1))
    err = capsys.readouterr().err
    assert "rate 5 req/s: 0 requests" in err and "concurrency 0" not in err
    assert "rate inf req/s, max concurrency 8" in err and "concurrency 4: 0 requests" in err

    levels = [{"concurrency": 0, "request_rate": 5.0, "error_samples": ["boom"]}]
    res = BenchResult(mode="rate", complete=False, levels=levels)
    assert render_plain(res) == ["level r=5: error: boom"]


def test_help_shows_the_bracketed_range_and_every_mode(capsys):
    _, out, _ = run_cli(capsys, "bench", "--help")
    flat = " ".join(out.replace("│", " ").split())
    assert "[len*ratio," in flat
    assert "rate (open loop" in flat


def test_a_duration_times_rate_schedule_too_large_to_build_is_refused():
    """--duration D at rate R precomputes about 1.5 x R x D arrivals: 1.5 million prompts
    were a MemoryError before any request."""
    from glmserve.bench.session import Gates, validate_settings
    from glmserve.bench.settings import BenchSettings

    s = BenchSettings(base_url=URL, mode="rate", request_rate=[1000.0], duration=1000)
    with pytest.raises(ConfigError, match="prompts to build"):
        validate_settings(s, Gates())


def test_a_run_and_a_url_together_are_refused(capsys):
    """`bench RUN --url URL` measured the URL and filed the result under RUN (its profile,
    argv, GPUs), unchecked: compare then showed a profile against itself as a speedup."""
    code, out, err = run_cli(capsys, "bench", "65afd5ea", "--url", URL, "--num-prompts", "2")
    _one_line_usage_error(code, err, "--url")
    assert "not both" in err and out == ""
    with RunStore.open() as store:
        assert store.list_bench_results() == []


def test_credentials_in_the_url_are_refused_and_never_echoed(capsys):
    """`--url http://user:secretpw@host` stored the password in six places of the result,
    the CSV export and the report."""
    code, out, err = run_cli(capsys, "bench", "--url", "http://user:secretpw@127.0.0.1:9",
                             "--num-prompts", "1")  # fmt: skip
    _one_line_usage_error(code, err, "--url")
    assert "secretpw" not in err + out and "user:password" in err
