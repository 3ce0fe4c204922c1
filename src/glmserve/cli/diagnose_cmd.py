"""`glmserve diagnose`: offline classification of an SGLang log (a file, stdin, or a run's log).

Only parses options, reads the log and renders; the classification is glmserve.diagnose. A
file or stdin is read in chunks and streamed through the diagnoser, so memory does not grow
with the log's size.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import typer

from glmserve.cli._app import app, emit_json, out
from glmserve.cli.options import JsonOpt
from glmserve.cli.views import render_diagnosis
from glmserve.errors import (
    EXIT_CRASHED,
    EXIT_OK,
    EXIT_TIMEOUT,
    ConfigError,
    NotAServerLog,
    RunNotServing,
    ServerCrashed,
    ServerNotReady,
)

if TYPE_CHECKING:
    from glmserve.diagnose import Diagnosis
    from glmserve.remote.transport import Transport
    from glmserve.store import RunRecord, RunStore

READ_CHUNK = 1 << 20  # bytes per read of a file or stdin
# A file or stdin whose first EVIDENCE_WITHIN bytes hold no SGLang line is refused without
# reading the rest (a server's first line is its server_args; even NCCL_DEBUG=INFO chatter
# comes after it): keeps `diagnose` of 200 MB of junk well under 10 s.
EVIDENCE_WITHIN = 32 << 20

_HELP = """Classify an SGLang server log: start-up phase, or crash category, root-cause
line and a hint.

TARGET is a log file, `-` for stdin, a glmserve group id (the first failed
node decides, else node 0) or a run id (its server.log is fetched, and its
processes are looked at as `status` does: a log cut off mid-start whose
processes are gone is EXITED, a run stopped with `glmserve stop` exits 2).

\b
Exit codes:
  0  READY or still starting (STARTING ... WARMUP)
  3  CRASHED (or EXITED)
  4  STALLED (only from a watcher; a file alone never stalls)
  6  the file or stdin holds no SGLang log line (empty, binary, other text)
  2  no such file or run, or the run was stopped

\b
Examples:
  glmserve diagnose server.log
  glmserve diagnose server.log --json | jq .category
  ssh gpu1 cat /root/glmserve/runs/3fa2c1d0/server.log | glmserve diagnose -
"""


def _looks_like_path(text: str) -> bool:
    """Run ids are 8 hex digits (or a prefix): a '/', a dot or a leading '~' means a path."""
    return "/" in text or "." in text or text.startswith("~")


class _Chunks:
    """A binary stream as chunks, counting the bytes (to tell an empty input from junk)."""

    def __init__(self, stream: BinaryIO, label: str) -> None:
        self.stream, self.label, self.size = stream, label, 0

    def __iter__(self) -> Iterator[bytes]:
        while True:
            try:
                chunk = self.stream.read(READ_CHUNK)
            except OSError as exc:
                raise ConfigError(f"cannot read {self.label}: {exc.strerror or exc}") from exc
            if not chunk:
                return
            self.size += len(chunk)
            yield chunk


def _diagnose_stream(stream: BinaryIO, label: str) -> Diagnosis:
    """Stream a file or stdin through the diagnoser; refuse input that is no SGLang log."""
    from glmserve.diagnose import diagnose_stream

    chunks = _Chunks(stream, label)
    diag = diagnose_stream(chunks, evidence_within=EVIDENCE_WITHIN)
    if not diag.sglang_log:
        if chunks.size == 0:
            what = "is empty"
        elif chunks.size >= EVIDENCE_WITHIN:
            what = f"holds no SGLang log line in its first {chunks.size >> 20} MiB"
        else:
            what = f"holds no SGLang log line ({chunks.size} bytes)"
        raise NotAServerLog(f"{label} {what}: not an SGLang server log", diag)
    return diag


def _diagnose_target(target: str) -> tuple[Diagnosis, str]:
    """(diagnosis, label) for a path, `-` or a run id."""
    if target == "-":
        return _diagnose_stream(sys.stdin.buffer, "<stdin>"), "<stdin>"
    if not target.strip():  # Path("") is "."
        raise ConfigError("diagnose: empty LOG or RUN (an unset shell variable?)")
    path = Path(target)
    if path.is_file():
        try:
            with path.open("rb") as f:
                return _diagnose_stream(f, str(path)), str(path)
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if path.exists():
        raise ConfigError(f"{path} is not a file")
    if _looks_like_path(target):  # not a run id: say what is missing
        raise ConfigError(f"{target}: no such log file")
    try:  # lazy: lifecycle pulls in ssh/sqlite
        from glmserve.remote.run_host import transport_for_run
        from glmserve.store import RunStore
    except ImportError as exc:
        raise ConfigError(f"no such log file or run: {target}") from exc
    from glmserve.deploy.deployment import Deployment
    from glmserve.diagnose import diagnose_stream

    with RunStore.open() as store:
        dep = Deployment.resolve(store, target)
        runs = [dep.named] if dep.named is not None else dep.runs
        found = []
        for run in runs:
            # A run's server.log is the server's own output: empty means it has not written yet.
            diag = diagnose_stream(_run_log_chunks(transport_for_run(run), run.log_path))
            diag, label = _with_run_state(diag, run, store)
            if dep.named is None and dep.grouped:
                label = f"group {dep.group_id} node {run.meta.get('node_rank')} ({label})"
            found.append((diag, label))
    # A group id: the first node that failed decides (as for the group's launch), else node 0.
    bad = [f for f in found if exit_code_for(f[0]) != EXIT_OK]
    return (bad or found)[0]


def _with_run_state(diag: Diagnosis, run: RunRecord, store: RunStore) -> tuple[Diagnosis, str]:
    """A run's verdict is its log's *and* its processes': a log that stops mid-warmup says
    "still starting", but if the processes are gone (killed, OOM-killed, a worker dead behind
    a 503 /health) the answer is what ``status`` says. Looked at live, as ``status`` does;
    when the host cannot be reached the log's verdict stands, labelled so."""
    import dataclasses

    from glmserve.deploy.assess import assess_run
    from glmserve.diagnose import Category, State
    from glmserve.errors import TransportError

    label = f"run {run.run_id}"
    if diag.state in (State.CRASHED, State.EXITED):
        return diag, label  # the log already names the failure
    try:
        state = str(assess_run(run, store)["state"])
    except TransportError as exc:
        return diag, f"{label} (host not reachable, log only: {exc})"
    run = store.get_run(run.run_id)
    if state == "EXITED":
        return diag.exited(None), label
    if state == "CRASHED":
        try:
            category: Category | None = Category(run.category) if run.category else None
        except ValueError:
            category = Category.CRASH
        crashed = dataclasses.replace(
            diag,
            state=State.CRASHED,
            category=category or Category.CRASH,
            root_cause=run.root_cause or "the server's processes died",
            hint=run.hint or diag.hint,
        )
        return crashed, label
    if state == "STALLED":
        return dataclasses.replace(diag, state=State.STALLED, hint=run.hint or diag.hint), label
    if state == "FAILED":  # its launch failed before any server process existed
        raise RunNotServing(
            f"{label} never started: its launch failed (phase {diag.phase.value} in its log); "
            f"its log: glmserve logs {run.run_id}"
        )
    if state == "STOPPED":
        raise RunNotServing(
            f"{label} was stopped (glmserve stop) in phase {diag.phase.value}; its log: "
            f"glmserve logs {run.run_id}"
        )
    return diag, label


def _run_log_chunks(t: Transport, path: str) -> Iterator[bytes]:
    """A run's log read by byte offset (over ssh for a remote host), one chunk at a time, so
    a big remote log is never held whole."""
    offset = 0
    while True:
        data, new = t.read_from(path, offset)
        if not data or new <= offset:  # the end (or a log truncated under us: stop there)
            return
        offset = new
        yield data


def exit_code_for(diag: Diagnosis) -> int:
    """The process status `diagnose` (and watchers reusing it) report for a verdict."""
    from glmserve.diagnose import State

    if diag.state in (State.CRASHED, State.EXITED):
        return EXIT_CRASHED
    if diag.state is State.STALLED:
        return EXIT_TIMEOUT
    return EXIT_OK


@app.command("diagnose", help=_HELP)
def diagnose(
    target: str = typer.Argument(..., metavar="LOGFILE|RUN|-", help="Log file, run id, or -."),
    json_out: JsonOpt = False,
) -> None:
    try:
        diag, label = _diagnose_target(target)
    except NotAServerLog as exc:
        if json_out:
            emit_json(exc.diagnosis.to_dict())
        raise
    if json_out:
        emit_json(diag.to_dict())
    else:
        out.print(render_diagnosis(diag, label), end="")
    # The verdict's exit status goes through the error tree (one stderr line + the code), so
    # it survives cli.main, which runs click with standalone_mode=False.
    code = exit_code_for(diag)
    where = f"{label}:{diag.line}" if diag.line else label
    if code == EXIT_CRASHED:
        what = f": {diag.category.value}" if diag.category else ""
        raise ServerCrashed(f"server {diag.state.value.lower()}{what} at {where}", diag)
    if code == EXIT_TIMEOUT:
        raise ServerNotReady(f"server stalled in {diag.phase.value} ({where})", diag)
