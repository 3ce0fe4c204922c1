"""Every error glmserve raises on purpose, and the one place exit codes are decided.

The CLI shows ``str(error)`` as one line and exits with ``error.exit_code``; ``--debug``
adds the traceback. Lower-layer errors (ssh, httpx, sqlite, yaml) are translated at the
boundary with ``raise X(...) from exc`` so callers only ever see this tree::

    GlmserveError                      exit 2 unless overridden
    ├── ConfigError                    2  bad profile / hosts file / --set path / argv
    │   ├── FlagValidationError        2  argv rejected for the target SGLang release
    │   ├── YamlSyntaxError            2  a YAML file is not YAML at all
    │   ├── RunNotServing              2  the run was stopped: nothing of it to measure
    │   ├── RunLogMissing              2  `logs`: the run's server.log is gone from its host
    │   ├── StoreError                 2  runs.sqlite damaged, locked or from a newer glmserve;
    │   │                              a sweep/tune state folder that cannot be written
    │   ├── PortClaimed                2  another live run holds this host:port
    │   ├── TraceFormatError           2  a profiler trace is not a Chrome trace (file:line)
    │   └── SimUsageError              2  `glmserve simulate`: a --sim-* option, or --port, is wrong
    ├── BenchmarkGateFailed            1  a --min-*/--max-* gate was missed
    ├── BenchIncomplete                7  a bench finished but some requests failed (stored,
    │                                     marked incomplete: not a measurement to act on)
    ├── DiagnosedError                    carries the log's diagnosis
    │   ├── ServerCrashed              3  the server died
    │   ├── ServerNotReady             4  stalled, hung, or timed out before READY
    │   └── JobEnded                      a Slurm job ended by the scheduler, not the server:
    │       ├── JobTimeLimit           8  its time limit (JobState TIMEOUT/DEADLINE)
    │       ├── JobNodeFailure         9  a node of it failed or was set DOWN (NODE_FAIL)
    │       └── JobPreempted          10  preempted by a higher-priority job
    │   └── NotAServerLog              6  `diagnose` input holds no SGLang log line
    ├── TransportError                 5  ssh/connection/HTTP reachability failures
    │   ├── RemoteCommandError         5  a remote command exited non-zero (carries Result)
    │   ├── ServerIdentityError        5  the port answers, but not with the run's server
    │   ├── ProcessUnverified          5  a run's process group could not be verified (the
    │   │                                 /proc probe was cut off or unreadable): not judged
    │   ├── NoRequestSucceeded         5  the server answered, but no bench request succeeded
    │   └── ServerStreamError             an error event inside one response stream (recorded
    │                                     as that request's error, never shown by the CLI)
    ├── RunNotFound                    2  unknown run id
    ├── StopFailed                     the first failure's code, after every run was tried
    ├── HostLost                       5  a tune host stopped answering (caught by the tune)
    ├── OutputError                   74  stdout/stderr could not be written (ENOSPC, EIO;
    │                                     EPIPE, as from `| head`, is click's silent exit 1)
    └── Interrupted                  130  Ctrl-C/SIGTERM (a bare Ctrl-C prints "interrupted")
        ├── SweepInterrupted         130  during a sweep (saved, server stopped)
        ├── TuneInterrupted          130  during a tune (saved, servers stopped)
        └── BenchInterrupted         130  during a bench (partial result stored, incomplete)

Not in the tree, on purpose: ``glmserve_runtime.PatchError`` (the patch runs inside SGLang's
workers on the GPU host, where glmserve itself is not installed) and two private control-flow
signals that never leave their module (``argspec.value_checks._TypeRejected``,
``bench.fasthttp._ClosedBeforeResponse``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Exit codes: the user's contract (docs/exit-codes.md). Keep in sync with that page.
EXIT_OK = 0
EXIT_GATE_FAILED = 1
EXIT_USAGE = 2
EXIT_CRASHED = 3
EXIT_TIMEOUT = 4
EXIT_TRANSPORT = 5
EXIT_NOT_A_LOG = 6
EXIT_INCOMPLETE = 7
EXIT_TIME_LIMIT = 8  # a Slurm job hit its time limit
EXIT_NODE_FAIL = 9  # a Slurm job lost its node (NODE_FAIL)
EXIT_PREEMPTED = 10  # a Slurm job was preempted
EXIT_INTERNAL = 70  # a bug in glmserve (EX_SOFTWARE); --debug shows the traceback
EXIT_OUTPUT = 74  # stdout/stderr could not be written (EX_IOERR): a full disk, a dead device
EXIT_INTERRUPTED = 130


class GlmserveError(Exception):
    """Base of all deliberate glmserve errors; ``exit_code`` picks the process status."""

    exit_code: int = EXIT_USAGE


class ConfigError(GlmserveError):
    """A profile, hosts file, override or argument is wrong. Message names file:line or key."""

    exit_code = EXIT_USAGE


class FlagValidationError(ConfigError):
    """An argv is not what the target SGLang release's argparse accepts.

    ``findings`` holds every error found (not just the first) so the CLI can list them.
    """

    def __init__(self, message: str, findings: list[Any] | None = None) -> None:
        super().__init__(message)
        self.findings = findings or []


class RunNotFound(GlmserveError):
    exit_code = EXIT_USAGE


class BenchmarkGateFailed(GlmserveError):
    exit_code = EXIT_GATE_FAILED


class DiagnosedError(GlmserveError):
    """An error that carries the log's ``diagnosis`` (a ``glmserve.diagnose.Diagnosis`` or
    None), so ``--json`` and the sweep can report the verdict and not only the message."""

    def __init__(self, message: str, diagnosis: Any = None) -> None:
        super().__init__(message)
        self.diagnosis = diagnosis


class ServerCrashed(DiagnosedError):
    """The server process died or reported a fatal error; ``diagnosis`` says why."""

    exit_code = EXIT_CRASHED


class ServerNotReady(DiagnosedError):
    """Stalled, hung or timed out before becoming ready."""

    exit_code = EXIT_TIMEOUT


class JobEnded(DiagnosedError):
    """A Slurm run's job was ended by the scheduler (its time limit, a node failure, a
    preemption), not by its server: each has its own exit code, so a script can resubmit
    (node failure, preemption) or ask for more time (time limit)."""

    exit_code = EXIT_CRASHED


class JobTimeLimit(JobEnded):
    exit_code = EXIT_TIME_LIMIT


class JobNodeFailure(JobEnded):
    exit_code = EXIT_NODE_FAIL


class JobPreempted(JobEnded):
    exit_code = EXIT_PREEMPTED


# A Slurm run's verdict (the store's state) -> its error.
JOB_END_ERRORS: dict[str, type[JobEnded]] = {
    "TIME_LIMIT": JobTimeLimit,
    "NODE_FAIL": JobNodeFailure,
    "PREEMPTED": JobPreempted,
}


class NotAServerLog(DiagnosedError):
    """`diagnose` was given input without one SGLang log line (binary junk, an empty file,
    some other text): no verdict, rather than "STARTING" for a file that is no server log."""

    exit_code = EXIT_NOT_A_LOG


class TransportError(GlmserveError):
    """Could not reach a host or a server (ssh connect/auth, HTTP connect)."""

    exit_code = EXIT_TRANSPORT


class YamlSyntaxError(ConfigError):
    """The text is not YAML at all (as opposed to YAML glmserve refuses to accept)."""


class Interrupted(GlmserveError):
    """Ctrl-C or SIGTERM ended a verb: the one way an interruption reaches ``cli.main``
    (exit 130). A bare Ctrl-C, or a verb saying what it left running, is a ``notice``: its
    message is printed as is ("interrupted"), with no "error:" prefix and no traceback."""

    exit_code = EXIT_INTERRUPTED
    notice = True


class TuneInterrupted(Interrupted):
    """Ctrl-C/SIGTERM: running servers were stopped and the tune saved; exit 130."""

    notice = False


class StopFailed(GlmserveError):
    """Some runs could not be stopped; exits with the first failure's own code (5: a host
    was unreachable) after every run was tried."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ServerIdentityError(TransportError):
    """The server answering on the run's port is not the run's server (exit 5)."""


class ProcessUnverified(TransportError):
    """A run's process group could not be verified on its host: the run is reported as
    unverified (exit 5), never as stopped or exited."""


class RunNotServing(ConfigError):
    """The run was stopped: there is no server of it to measure (exit 2)."""


class SweepInterrupted(Interrupted):
    """Ctrl-C: the running server was stopped and the sweep saved; exit 130."""

    notice = False


class RunLogMissing(ConfigError):
    """The run's server.log does not exist on its host (deleted, or the run never started):
    ``logs`` says so, naming the file (exit 2), instead of printing nothing and exiting 0."""


class StoreError(ConfigError):
    """runs.sqlite is damaged, locked, or from a newer glmserve, or a sweep/tune state folder
    cannot be written (a read-only ``$GLMSERVE_HOME``): exit 2, names the file."""


class PortClaimed(ConfigError):
    """Another live run already holds this host:port in the store (exit 2)."""

    def __init__(self, message: str, holder: str | None = None) -> None:
        super().__init__(message)
        self.holder = holder


class TraceFormatError(ConfigError):
    """A trace file is not a Chrome trace (message names file:line)."""


class BenchIncomplete(GlmserveError):
    """The bench ran to its end, the server is up, but some requests failed: the result is
    stored and printed, marked incomplete, and a script must not take it as a measurement
    (exit 7, apart from 1: a missed gate is a slow server, this is an unanswered one)."""

    exit_code = EXIT_INCOMPLETE


class BenchInterrupted(Interrupted):
    """Ctrl-C during a bench: the partial result was printed and stored, marked incomplete."""

    notice = False


class NoRequestSucceeded(TransportError):
    """The server answered, but not one request of the bench succeeded (exit 5)."""


class ServerStreamError(TransportError):
    """The server reported an error inside a response stream; the bench client records it as
    that request's error (it never reaches the CLI)."""


class SimUsageError(ConfigError):
    """A ``--sim-*`` option (glmserve's, not SGLang's) or a ``--port`` no socket can bind is
    wrong: exit 2 with one line, where a bad SGLang flag gets argparse's usage block as
    SGLang prints it."""


class HostLost(GlmserveError):
    """A tune host stopped answering: take it out of the pool, re-queue its job. Caught by
    the tune's worker (never a TransportError: the job's own handler would catch it)."""

    exit_code = EXIT_TRANSPORT


class OutputError(GlmserveError):
    """Writing stdout or stderr failed (``> /dev/full``: ENOSPC; EIO): not a glmserve bug,
    and not the verb's own outcome either (exit 74, EX_IOERR). Raised by ``cli.main`` after
    the command, never inside a verb."""

    exit_code = EXIT_OUTPUT


@dataclass
class Result:
    """What one command on a host returned (local or over ssh)."""

    cmd: str
    rc: int
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def tail(self, stream: str = "stderr", lines: int = 5) -> str:
        text = self.stderr if stream == "stderr" else self.stdout
        return "\n".join(text.strip().splitlines()[-lines:])


class RemoteCommandError(TransportError):
    """A command on a host exited non-zero; the message carries its stderr tail."""

    def __init__(self, result: Result, what: str = "") -> None:
        tail = result.tail() or result.tail("stdout")
        label = what or result.cmd
        super().__init__(f"{label} failed (exit {result.rc}): {tail}".strip())
        self.result = result
