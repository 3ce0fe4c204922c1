"""What `glmserve diagnose` is given: non-logs refused (issue 10 #13), big logs streamed in
bounded memory (issue 11 #9), and the bulk path giving the per-line path's verdict."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from tests.fixtures.diagnose_corpus import CASES

from glmserve import diagnose
from glmserve.cli import main as run
from glmserve.diagnose import diagnose_lines

ROOT = Path(__file__).resolve().parents[2]
SERVING = (
    '[2026-03-02 11:00:{s:02d}] INFO:     127.0.0.1:{p} - "POST /v1/chat/completions HTTP/1.1" '
    "200 OK\n"
    "[2026-03-02 11:00:{s:02d} TP0] Decode batch. #running-req: {r}, #token: {p}, token usage: "
    "0.{r:02d}, cuda graph: True, gen throughput (token/s): 1{p}.5, #queue-req: 0, \n"
)
# The child's own peak RSS (VmHWM of its address space): ru_maxrss of a child also counts the
# parent's pages at fork/exec time, and pytest's RSS grows over a run.
REPORT_PEAK = (
    "import atexit, sys\n"
    "atexit.register(lambda: sys.stderr.write('PEAK_RSS_KB ' + next(\n"
    "    ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM:')) + '\\n'))\n"
)
CLI = "from glmserve.cli import main; raise SystemExit(main())"
OOM = (
    "[2026-03-02 12:00:00 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
)


@pytest.mark.parametrize(
    "content",
    [b"", b"\n\n", (ROOT / "README.md").read_bytes(), b"root:x:0:0:root:/root:/bin/bash\n",
     bytes(random.Random(3).randrange(256) for _ in range(200_000))],
    ids=["empty", "blank-lines", "README", "passwd", "random-bytes"],
)  # fmt: skip
def test_input_without_an_sglang_line_is_refused(tmp_path: Path, capsys, content: bytes) -> None:
    f = tmp_path / "input.txt"
    f.write_bytes(content)
    assert run(["diagnose", str(f)]) == 6  # errors.EXIT_NOT_A_LOG
    cap = capsys.readouterr()
    assert cap.out == ""  # no "state STARTING" / "patch active on 1/?" for a README
    assert cap.err.count("\n") == 1 and str(f) in cap.err
    assert "holds no SGLang log line" in cap.err or "is empty" in cap.err


def test_refusal_on_stdin_and_as_json(monkeypatch, capsys) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"hello\nworld\n")))
    assert run(["diagnose", "-", "--json"]) == 6
    cap = capsys.readouterr()
    assert json.loads(cap.out)["sglang_log"] is False and "<stdin>" in cap.err


def test_an_excerpt_without_prefix_is_still_a_log(tmp_path: Path) -> None:
    """A pasted traceback (no SGLang prefix) is SGLang output: crash evidence counts."""
    excerpts = [c for c in CASES if c.path.name == "oom_host_errno12_5762.log"]
    assert excerpts and "[20" not in excerpts[0].body
    f = tmp_path / "x.log"
    f.write_text(excerpts[0].body)
    assert run(["diagnose", str(f)]) == 3


def test_help_and_docs_document_exit_code_6(capsys) -> None:
    run(["diagnose", "--help"])
    assert "6  the file or stdin holds no SGLang log line" in capsys.readouterr().out
    assert "| 6 |" in (ROOT / "docs" / "exit-codes.md").read_text()


# -- streaming ---------------------------------------------------------------------------------


def test_line_blocks_match_split_for_any_chunking() -> None:
    rnd = random.Random(7)
    data = b"".join(
        rnd.choice([b"", b"\n", b"ab", b"cd\n", b"\r\n", "é\n".encode(), b"x" * 50])
        for _ in range(5000)
    )
    want = data.split(b"\n")
    if want[-1] == b"":
        want.pop()
    for _ in range(20):
        cuts = sorted(rnd.sample(range(len(data)), 40))
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        assert [ln for block in diagnose.iter_line_blocks(chunks) for ln in block] == want


def test_an_endless_line_is_cut_not_accumulated() -> None:
    chunks = [b"A" * 1_000_000] * 50 + [b"B\nnext"]
    lines = [ln for block in diagnose.iter_line_blocks(chunks) for ln in block]
    assert [len(ln) for ln in lines] == [diagnose.MAX_LINE_BYTES, 4]


def _per_line(body: str):  # type: ignore[no-untyped-def]
    parts = body.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    return diagnose_lines(parts)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.path.stem)
def test_bulk_path_gives_the_per_line_verdict_on_every_corpus_log(case) -> None:  # type: ignore[no-untyped-def]
    rnd = random.Random(case.path.name)
    data = case.body.encode()
    cuts = sorted(rnd.sample(range(len(data)), min(5, len(data))))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    assert diagnose.diagnose_stream(chunks).to_dict() == _per_line(case.body).to_dict()


def test_bulk_path_on_a_serving_log_with_errors_between_progress_lines() -> None:
    """Per-request errors, a traceback, progress after them: the bulk path skips nothing that
    matters (last progress line, a candidate's line number, the crash)."""
    rnd = random.Random(11)
    parts = ["[2026-03-02 10:09:17] The server is fired up and ready to roll!\n"]
    for i in range(3000):
        parts.append(SERVING.format(s=i % 60, p=rnd.randint(1000, 9999), r=rnd.randint(1, 64)))
        if i in (500, 2100):
            parts.append('  File "/sgl/python/sglang/srt/managers/io_struct.py", line 9, in x\n')
            parts.append("    raise ValueError('bad request')\n")
            parts.append("ValueError: bad request\n")
    parts.append(OOM)
    parts.append("[2026-03-02 12:00:00] Received sigquit from a child process.\n")
    body = "".join(parts)
    data = body.encode()
    bulk = diagnose.diagnose_stream([data[i : i + 4096] for i in range(0, len(data), 4096)])
    line = _per_line(body)
    assert bulk.to_dict() == line.to_dict()
    assert bulk.category is not None and bulk.category.value == "OOM"


def test_diagnose_streams_stdin_in_bounded_memory() -> None:
    """100 MiB of serving log on a pipe: the CLI's peak RSS stays far below the log size
    (the whole-text reader held the log several times over)."""
    block = "".join(
        SERVING.format(s=i % 60, p=1000 + i, r=1 + i % 64) for i in range(2000)
    ).encode()
    total = 100 << 20
    proc = subprocess.Popen(
        [sys.executable, "-c", REPORT_PEAK + CLI, "diagnose", "-"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip

    def feed() -> None:
        assert proc.stdin is not None
        sent = 0
        with proc.stdin:
            proc.stdin.write(b"[2026-03-02 10:09:17] The server is fired up and ready to roll!\n")
            while sent < total:
                proc.stdin.write(block)
                sent += len(block)
            proc.stdin.write(OOM.encode())

    writer = threading.Thread(target=feed)
    writer.start()
    out = proc.stdout.read() if proc.stdout else b""
    err = proc.stderr.read() if proc.stderr else b""
    status = proc.wait()
    writer.join()
    assert status == 3, err
    assert b"OOM" in out
    peak_kib = int(err.rsplit(b"PEAK_RSS_KB ", 1)[1].split()[0])
    assert peak_kib < 100 * 1024  # under 100 MiB for a 100 MiB log


def test_a_runs_log_is_streamed_too(tmp_path: Path) -> None:
    """`diagnose RUN` reads the run's server.log by byte offset, chunk by chunk: a 100 MiB log
    does not make the CLI hold 100 MiB (reading it whole held it twice, bytes and text)."""
    from glmserve.store import RunRecord, RunStore

    block = "".join(SERVING.format(s=i % 60, p=1000 + i, r=1 + i % 64) for i in range(2000))
    with (tmp_path / "server.log").open("w") as f:
        f.write("[2026-03-02 10:09:17] The server is fired up and ready to roll!\n")
        for _ in range((100 << 20) // len(block) + 1):
            f.write(block)
        f.write(OOM)
    with RunStore.open() as store:
        store.add_run(
            RunRecord(run_id="b16a0000", host="local", profile="p", port=1, run_dir=str(tmp_path))
        )
    proc = subprocess.run(
        [sys.executable, "-c", REPORT_PEAK + CLI, "diagnose", "b16a0000"],
        capture_output=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-500:]
    assert b"OOM" in proc.stdout
    peak_kib = int(proc.stderr.rsplit(b"PEAK_RSS_KB ", 1)[1].split()[0])
    assert peak_kib < 100 * 1024


class _EndlessJunk:
    """stdin that never ends: binary junk lines for ever, counting what was read."""

    def __init__(self) -> None:
        self.read_bytes = 0
        self._chunk = bytes(random.Random(5).randrange(256) for _ in range(4096)) * 256

    def read(self, n: int = -1) -> bytes:
        if self.read_bytes > 256 << 20:  # the old reader would go on for ever: fail, not hang
            raise AssertionError("diagnose kept reading input that holds no SGLang line")
        self.read_bytes += len(self._chunk)
        return self._chunk


def test_junk_is_refused_after_the_first_mebibytes_not_read_to_the_end(monkeypatch, capsys) -> None:
    """Issue 11 #9: 200 MB of random bytes took 24 s to refuse; input whose first
    EVIDENCE_WITHIN bytes hold no SGLang line is refused without reading the rest."""
    from glmserve.cli import diagnose_cmd

    junk = _EndlessJunk()
    monkeypatch.setattr(sys, "stdin", type("S", (), {"buffer": junk})())
    assert run(["diagnose", "-"]) == 6
    err = capsys.readouterr().err
    assert "holds no SGLang log line in its first" in err and err.count("\n") == 1
    assert junk.read_bytes < diagnose_cmd.EVIDENCE_WITHIN + (4 << 20)


def test_a_log_whose_first_line_comes_late_within_the_limit_is_still_diagnosed(
    tmp_path: Path,
) -> None:
    """Non-SGLang chatter (a wrapper's output) before the first SGLang line is fine as long as
    that line comes within the limit: the verdict is the one of the whole file."""
    from glmserve.diagnose import diagnose_stream

    chatter = b"wrapper: waiting for the GPU lock\n" * ((8 << 20) // 34)
    ready = b"[2026-03-02 10:09:17] The server is fired up and ready to roll!\n"
    log = chatter + ready + OOM.encode()
    chunks = (log[i : i + (1 << 20)] for i in range(0, len(log), 1 << 20))
    d = diagnose_stream(chunks, evidence_within=16 << 20)
    assert d.sglang_log and d.state.value == "CRASHED" and d.category.value == "OOM"


def test_a_run_whose_launch_failed_is_not_said_to_be_stopped(tmp_path: Path, capsys) -> None:
    """A FAILED run never started (its launch failed before a server process existed):
    ``diagnose RUN`` said "was stopped (glmserve stop)", which nobody did."""
    from glmserve.store import RunRecord, RunStore

    (tmp_path / "server.log").write_text("[2026-03-02 10:09:17] server_args=ServerArgs()\n")
    with RunStore.open() as store:
        store.add_run(
            RunRecord(
                run_id="fa11ed00", host="local", profile="p", port=1, run_dir=str(tmp_path),
                state="FAILED",
            )
        )  # fmt: skip
    assert run(["diagnose", "fa11ed00"]) == 2
    err = capsys.readouterr().err
    assert "never started" in err, err
    assert "glmserve stop" not in err, err
