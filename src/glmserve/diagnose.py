"""Classify an SGLang server log: start-up phase, or crash category + root-cause line + hint.

Pure (no I/O) and incremental: :class:`LogDiagnoser` takes one line at a time (the watcher
feeds lines as they arrive from the remote log) in O(1) per line, and ``diagnose_lines`` /
``diagnose_text`` run it over a whole log. STALLED and EXITED need facts a log does not hold
(time, PIDs): the watcher derives them with :meth:`Diagnosis.stalled` / :meth:`Diagnosis.exited`
and :func:`phase_stall_budget`.

What is recognised (reference; the tables below are the implementation)
-----------------------------------------------------------------------
Line handling: ANSI escapes and NULs are dropped, ``\\r``-joined tqdm redraws are read segment
by segment, lines are capped at ``MAX_LINE_CHARS``, bytes are decoded with replacement. The
SGLang prefix ``[YYYY-mm-dd HH:MM:SS TPn]`` (also ``DPn``/``PPn``/``EPn``/``ATTN_CPn`` tags,
0.3.x's time-only ``[HH:MM:SS TPn]``, a lost opening bracket) is stripped for matching and for
``root_cause`` and gives the rank. Decorations in front of it are stripped too (``_DECOR``):
markdown ``> `` quotes, Ray ``(SGLangEngine pid=N)``, CI ``[...Z]`` and kubectl timestamps,
``date | ERROR | stderr |``, docker-compose ``name  |``, Google Cloud Logging ``ERROR
2025-..Z``, Python logging ``date - name - LEVEL -`` and torchrun ``[rank0]:`` prefixes.
A keyword prefilter (``_KEYWORDS``) lets ordinary INFO lines skip the regexes.

Progress (``_PROGRESS``; the phase only moves forward, a lagging rank does not undo it):
  STARTING          initial state; ``server_args=ServerArgs(...)`` is parsed for tp_size, port,
                    mem_fraction_static, max_running_requests, cuda_graph_max_bs, ...
  LOADING_WEIGHTS   ``Load weight begin``/``end``, ``Loading safetensors|pt checkpoint shards``.
  KV_ALLOCATED      ``KV Cache is allocated``, ``Memory pool end``, ``max_total_num_tokens=``.
  CAPTURING_GRAPHS  ``Capture cuda graph begin``/``end``, 0.5.23's ``Capture target decode cuda
                    graph ...`` (any ``Capture ... cuda graph``), ``Capturing batches|num tokens``.
  WARMUP            ``Uvicorn running on``, ``Application startup complete``, ``/get_model_info``,
                    ``/model_info``, any ``warmup`` line that is not an error.
  READY             ``The server is fired up and ready to roll!``, a client ``POST /v1/...``
                    answered 200, or ``Decode batch, #running-req: N>0`` (decode statistics are
                    only logged every 40 decode steps of real requests).
  A kernel's warmup (``DeepGEMM warmup: 100%|``, JIT pre-compile) is progress, not WARMUP.
  ``Prefill batch``/``Decode batch``, ``Init torch distributed``, JIT/compile progress bars
  count as progress (``last_progress_line``) without changing the phase.

Crash evidence, three kinds:
  * Root-cause rules (``RULES``: regex, category, hint builder, priority, flags). Categories
    OOM, ILLEGAL_MEMORY_ACCESS, UNSUPPORTED_ARCH, UNSUPPORTED_KV_DTYPE, NCCL, WEIGHT_LOADING,
    PORT_IN_USE, BAD_ARGS, COMPILE_ERROR, PATCH_FAILED. Highlights: ``CUDA out of memory`` /
    ``OutOfMemoryError`` / SGLang's ``... out of memory`` RuntimeErrors (hint: lower
    ``--mem-fraction-static``/``--max-running-requests``/``--cuda-graph-max-bs`` with the numbers
    of the server_args line), ``Not enough memory. Please try to increase
    --mem-fraction-static`` (hint: raise it), ``Cannot allocate memory`` (host RAM), FlashInfer
    MLA ``static_assert(sizeof(DType) == 2)`` and ``... kv cache dtype ... not supported``,
    TllmGen/DeepGEMM ``Unsupported architecture``, ``no kernel image is available``,
    ``illegal memory access``/``unspecified launch failure``, ``NCCL error``/``unhandled system
    error``/``peer access is not supported``/watchdog timeouts (weak), HF/safetensors errors,
    ``does not appear to have a file named``, ``Model architectures [...] are not supported``,
    argparse ``prog: error: ...`` (hint names the flag), ``Address already in use``/``[Errno
    98]`` (hint names the port), Triton ``OutOfResources``/``CompilationError``, nvcc/ptxas/
    ninja failures and ``Command '[gcc|nvcc|ninja ...]' returned non-zero exit status`` (also
    inside an "Ignore import error" warning), ``glmserve patch NAME FAILED: ...`` (printed by
    the runtime patch), argparse's ``usage: prog [-h]`` banner (weak BAD_ARGS: an excerpt cut
    before the ``error:`` line; ``--help`` output, the banner followed by the option list, is no
    crash), ``KeyError: 'a.b.weight_scale'`` (a checkpoint tensor the loader cannot map:
    WEIGHT_LOADING; after READY only with a cascade, as requests log it too), a CUDA
    kernel's ``block: [..], thread: [..] Assertion ... failed`` (CRASH, device-side assert
    hint), Gloo ``gloo/transport/tcp/pair.cc`` (weak NCCL).
    A rule on a ``WARNING``/``INFO`` line, a ``fatal=False`` rule (``NCCL WARN``, the PyTorch
    "sm_120 is not compatible" warning) and a ``needs_error`` phrase outside an error line
    only explain a crash that other lines prove.
  * Generic exception lines (``RuntimeError: ...``, ``torch.x.FooError: ...``, ``Fatal Python
    error``, ``Segmentation fault``, ``terminate called after throwing``): category CRASH,
    upgraded by the traceback frames above them (``weight_utils.py``/``load_weights`` ->
    WEIGHT_LOADING, ``server_args.py`` -> BAD_ARGS, ``triton/compiler``/``cpp_extension``/
    ``flashinfer/jit`` -> COMPILE_ERROR, ``pynccl``/``initialize_model_parallel`` -> NCCL).
    The source line a traceback prints under each ``File "...", line N`` frame is code, never
    an error (``raise RuntimeError(f"NCCL error: ...")``).
  * Cascade markers (``_CASCADE``), never a root cause while anything better exists:
    ``Received sigquit from a child process``, ``Killed`` (also bash's ``NNN Killed  cmd``),
    ``Rank N scheduler is dead``, ``died during initialization (exit code: N)``, ``Child
    process unexpectedly failed``, ``... hit an exception:``, ``Exception in <thread>:``,
    ``Process Process-N:``, ``Initialization failed. Please see the error messages above``,
    and before READY a traceback header logged with SGLang's prefix (soft: a later READY
    clears it, since SGLang also logs survivable failures that way). A process's own report
    (``... hit an exception:``, ``Exception in X:``, a logged traceback) outranks the
    launcher's reaction (sigquit, Killed, "scheduler is dead") when no error line exists.

Choosing the root cause ("the first root cause, not the cascade"): the earliest root-cause
rule match of the highest priority (very specific diagnoses such as UNSUPPORTED_KV_DTYPE beat
a COMPILE_ERROR they show up inside); else the earliest generic exception (a "weak" rule such
as an NCCL watchdog timeout counts as generic: it usually follows another rank's death); else
a non-fatal warning rule; else the first cascade marker. Before READY the first root-cause or
exception line flips the state to CRASHED at once (the watcher needs a fast verdict); after
READY an exception only counts with a cascade marker or a fatal rule, because SGLang logs
per-request errors with tracebacks and keeps serving. A READY line after a generic exception
with no cascade marker means that exception was not fatal.

Patches (the glmserve_runtime log contract): ``glmserve runtime: patches armed: NAMES (pid N)``
names the expected patches; ``glmserve patch NAME active (sglang X, pid N)`` per worker ->
``patch_ranks_active`` (TP rank from the prefix, else a ``rank N`` inside the parentheses,
else the pid); ``patch_active`` is ``"k/N"`` with N = tp_size (``"0/8"`` when armed but none
active yet); ``glmserve patch NAME FAILED: why`` is CRASHED(PATCH_FAILED).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from glmserve.config.spec import SM100_ONLY_ATTENTION_BACKENDS

MAX_LINE_CHARS = 16_384  # longer lines are cut before matching (server_args lines are ~6K)
MAX_ROOT_CAUSE_CHARS = 600
# After READY an exception without a cascade marker within this many lines was survived.
_POST_READY_CANDIDATE_LINES = 200


class State(str, Enum):
    STARTING = "STARTING"
    LOADING_WEIGHTS = "LOADING_WEIGHTS"
    KV_ALLOCATED = "KV_ALLOCATED"
    CAPTURING_GRAPHS = "CAPTURING_GRAPHS"
    WARMUP = "WARMUP"
    READY = "READY"
    CRASHED = "CRASHED"
    STALLED = "STALLED"
    EXITED = "EXITED"


class Category(str, Enum):
    OOM = "OOM"
    ILLEGAL_MEMORY_ACCESS = "ILLEGAL_MEMORY_ACCESS"
    UNSUPPORTED_ARCH = "UNSUPPORTED_ARCH"
    UNSUPPORTED_KV_DTYPE = "UNSUPPORTED_KV_DTYPE"
    NCCL = "NCCL"
    WEIGHT_LOADING = "WEIGHT_LOADING"
    PORT_IN_USE = "PORT_IN_USE"
    BAD_ARGS = "BAD_ARGS"
    COMPILE_ERROR = "COMPILE_ERROR"
    PATCH_FAILED = "PATCH_FAILED"
    CRASH = "CRASH"


# Start-up order; the phase is the furthest one reached.
_ORDER = [
    State.STARTING,
    State.LOADING_WEIGHTS,
    State.KV_ALLOCATED,
    State.CAPTURING_GRAPHS,
    State.WARMUP,
    State.READY,
]
_RANK = {s: i for i, s in enumerate(_ORDER)}
TERMINAL_STATES = frozenset({State.CRASHED, State.STALLED, State.EXITED})

# Default seconds without progress before a phase counts as stalled (the README's "Stall
# budgets" table). Loading ~400 GB of GLM-5 weights from network storage and capturing graphs
# for many batch sizes on 8 ranks can take tens of minutes between log lines; warmup is one
# tiny request (SGLang itself gives up on it after 600 s), so it may not sit silent as long.
_STALL_BUDGET_S = {
    State.STARTING: 600.0,
    State.LOADING_WEIGHTS: 2400.0,
    State.KV_ALLOCATED: 900.0,
    State.CAPTURING_GRAPHS: 1800.0,
    State.WARMUP: 300.0,
}
# Names ``--stall-budget PHASE=SECONDS`` accepts besides the state names themselves.
STALL_PHASE_NAMES = {
    "starting": State.STARTING,
    "load": State.LOADING_WEIGHTS,
    "weights": State.LOADING_WEIGHTS,
    "kv": State.KV_ALLOCATED,
    "graphs": State.CAPTURING_GRAPHS,
    "warmup": State.WARMUP,
}


def phase_stall_budget(state: State | str) -> float:
    """Seconds without log progress after which ``state`` counts as stalled (inf if never)."""
    return _STALL_BUDGET_S.get(State(state), math.inf)


@dataclass(frozen=True)
class Evidence:
    """A line that would explain a crash that other facts (a dead process) prove."""

    line: int
    text: str
    category: Category
    hint: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "text": self.text,
            "category": self.category.value,
            "hint": self.hint,
        }


def stall_phase(name: str) -> State:
    """The start-up phase a ``--stall-budget`` name means (``load``, ``WARMUP``, ...)."""
    key = name.strip()
    if key.lower() in STALL_PHASE_NAMES:
        return STALL_PHASE_NAMES[key.lower()]
    try:
        state = State(key.upper())
    except ValueError:
        state = None
    if state is None or state not in _STALL_BUDGET_S:
        names = ", ".join(STALL_PHASE_NAMES)
        raise ValueError(f"unknown start-up phase {name!r} (one of {names})")
    return state


def stall_budget(
    phase: State | str,
    stall_timeout: float | None = None,
    per_phase: dict[State, float] | None = None,
) -> tuple[float, str]:
    """(seconds, where that number came from) for ``phase``: a ``--stall-budget`` for that
    phase, else ``--stall-timeout`` (every phase), else the default table. The source is
    what a STALLED hint names, so the user sees which budget fired."""
    state = State(phase)
    if per_phase and state in per_phase:
        name = next(k for k, v in STALL_PHASE_NAMES.items() if v is state)
        return per_phase[state], f"--stall-budget {name}={_secs(per_phase[state])}"
    if stall_timeout is not None and state in _STALL_BUDGET_S:
        return stall_timeout, f"--stall-timeout {_secs(stall_timeout)}"
    return phase_stall_budget(state), f"default for {state.value}"


def _secs(x: float) -> str:
    return f"{x:.0f}" if x >= 10 or x == int(x) else f"{x:.1f}"


# uvicorn's access log line as SGLang 0.5.9 formats it (srt/utils/common.py
# set_uvicorn_logging_configs: '[%(asctime)s] %(levelprefix)s %(client_addr)s -
# "%(request_line)s" %(status_code)s'): a request answered, which says nothing about start-up.
_ACCESS_LINE = re.compile(r'^(?:[A-Z]+:\s+)?\S+ - "[A-Z]+ \S+ HTTP/[\d.]+" \d{3}\b')
# Lines the server writes only because a request arrived (glmserve's own /health polls and
# identity probes): srt/entrypoints/http_server.py health_generate / get_model_info /
# get_server_info.
_PROBE_ECHO = re.compile(
    r"Health check failed\. Server couldn't get a response"
    r"|Endpoint '/get_(?:model|server)_info' is deprecated"
)


def is_progress_line(line: str) -> bool:
    """Does this log line show the server itself moving on? HTTP access lines and lines our
    probes cause never do: a server hung in warmup still answers ``/health`` with 503 and
    logs each answer, so counting them would hide the hang forever."""
    body = _split_prefix(_clean(line))[0].strip()
    if not body:
        return False
    return not (_ACCESS_LINE.match(body) or _PROBE_ECHO.search(body))


@dataclass
class Diagnosis:
    """One verdict on a log. ``category``/``line``/``root_cause`` are set only when CRASHED."""

    state: State = State.STARTING
    category: Category | None = None
    line: int | None = None
    root_cause: str | None = None
    hint: str | None = None
    last_progress_line: int | None = None
    last_progress: str | None = None
    phase: State = State.STARTING
    patch_ranks_active: set[int | str] = field(default_factory=set)
    patches: list[str] = field(default_factory=list)
    tp_size: int | None = None
    ready_line: int | None = None
    exit_code: int | None = None
    stalled_s: float | None = None
    server_args: dict[str, str] = field(default_factory=dict)
    # Whether any line was SGLang output (its log prefix, server_args, a crash report, a
    # start-up marker): `diagnose` refuses input without one instead of calling it STARTING.
    sglang_log: bool = False
    # Evidence that explains a crash only if the process dies (SGLang's soft watchdog, a
    # warning-level error): not a crash while the server lives; :meth:`exited` promotes it.
    warning: Evidence | None = None

    @property
    def patch_active(self) -> str | None:
        """``"k/N"``: ranks that logged a patch activation out of tp_size (``k/?`` if unknown)."""
        k = len(self.patch_ranks_active)
        if self.tp_size:
            return f"{k}/{self.tp_size}" if (k or self.patches) else None
        return f"{k}/?" if k else None

    @property
    def crashed(self) -> bool:
        return self.state is State.CRASHED

    def stalled(
        self, seconds: float, budget: float | None = None, source: str | None = None
    ) -> Diagnosis:
        """The verdict once the watcher saw no progress for ``seconds`` (crashes stay).
        ``budget``/``source``: the stall budget that fired and where it came from (see
        :func:`stall_budget`); the hint names both."""
        if self.state in (State.CRASHED, State.EXITED, State.READY):
            return dataclasses.replace(self)
        if budget is None:
            budget, source = stall_budget(self.phase)
        where = (
            f"; last progress at line {self.last_progress_line}: {self.last_progress}"
            if self.last_progress_line
            else ""
        )
        hint = (
            f"no log progress for {_secs(seconds)}s in phase {self.phase.value} (stall budget "
            f"{_secs(budget)}s, {source}){where}. Check GPU activity (nvidia-smi), "
            "dump the stacks with `py-spy dump --pid <scheduler pid>`; a rank stuck in NCCL "
            "init usually means a peer died (NCCL_DEBUG=INFO shows which)."
        )
        return dataclasses.replace(
            self, state=State.STALLED, category=None, hint=hint, stalled_s=float(seconds)
        )

    def exited(self, rc: int | None) -> Diagnosis:
        """The verdict once the server process is gone with status ``rc`` (crashes stay).

        A death proves the crash that a :attr:`warning` (a soft watchdog timeout, an error
        logged at warning level) only suggested: that line becomes the root cause, unless the
        process ended cleanly (``rc == 0``)."""
        if self.state is State.CRASHED:
            return dataclasses.replace(self, exit_code=rc)
        w = self.warning
        if w is not None and rc != 0:
            return dataclasses.replace(
                self,
                state=State.CRASHED,
                category=w.category,
                line=w.line,
                root_cause=w.text,
                hint=w.hint,
                exit_code=rc,
            )
        if rc is not None and rc in (137, -9):
            why = "killed by SIGKILL (the host OOM killer? check `dmesg | tail`)"
        elif rc is not None and rc < 0:
            why = f"killed by signal {-rc}"
        elif rc is not None and rc > 128:
            why = f"killed by signal {rc - 128}"
        elif rc is None:  # not our child (ssh, setsid): its status cannot be read
            why = "exit status not known"
        else:
            why = f"exit status {rc}"
        hint = (
            f"the server process ended ({why}) in phase {self.phase.value} without an error "
            "line the log recognises; read the log tail (`glmserve logs RUN -n 100`)."
        )
        return dataclasses.replace(self, state=State.EXITED, category=None, hint=hint, exit_code=rc)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view (the ``glmserve diagnose --json`` contract)."""
        return {
            "state": self.state.value,
            "category": self.category.value if self.category else None,
            "line": self.line,
            "root_cause": self.root_cause,
            "hint": self.hint,
            "phase": self.phase.value,
            "last_progress_line": self.last_progress_line,
            "last_progress": self.last_progress,
            "ready_line": self.ready_line,
            "tp_size": self.tp_size,
            "patches": list(self.patches),
            "patch_ranks_active": sorted(self.patch_ranks_active, key=str),
            "patch_active": self.patch_active,
            "exit_code": self.exit_code,
            "stalled_s": self.stalled_s,
            "sglang_log": self.sglang_log,
            "warning": self.warning.to_dict() if self.warning else None,
        }


# ---------------------------------------------------------------------------------------------
# Facts and hint builders
# ---------------------------------------------------------------------------------------------


@dataclass
class Facts:
    """What a hint builder may use: server_args values and the phase the crash happened in."""

    args: dict[str, str]
    phase: State
    frame_ctx: Category | None = None

    def arg(self, name: str) -> str | None:
        v = self.args.get(name)
        return None if v in (None, "None", "") else v

    def float_arg(self, name: str) -> float | None:
        try:
            v = self.arg(name)
            return float(v) if v is not None else None
        except ValueError:
            return None


HintBuilder = Callable[[re.Match[str], Facts], str]


def _fixed(text: str) -> HintBuilder:
    return lambda _m, _f: text


_SIZE = r"(\d+(?:\.\d+)?\s*[KMGT]i?B)"


def _oom_hint(m: re.Match[str], f: Facts) -> str:
    line = m.string
    tried = re.search(r"Tried to allocate " + _SIZE, line)
    free = re.search(_SIZE + r" is free", line)
    what = "CUDA out of memory"
    if tried:
        what += f" (tried to allocate {tried.group(1)}"
        what += f", {free.group(1)} free)" if free else ")"
    in_capture = f.phase is State.CAPTURING_GRAPHS or "cuda graph" in line.lower()
    if f.phase is State.LOADING_WEIGHTS and not in_capture:
        return (
            f"{what} while loading weights: the weights do not fit. Check no other process "
            "holds the GPUs (nvidia-smi), raise --tp-size, or use a smaller/quantized checkpoint."
        )
    parts: list[str] = []
    mfs = f.float_arg("mem_fraction_static")
    if mfs is not None:
        parts.append(f"lower --mem-fraction-static from {mfs:g} to {max(mfs - 0.05, 0.3):.2f}")
    else:
        parts.append("set a lower --mem-fraction-static (e.g. 0.80)")
    mrr = f.arg("max_running_requests")
    if mrr and mrr.isdigit():
        parts.append(f"--max-running-requests from {mrr} to {max(int(mrr) // 2, 1)}")
    else:
        parts.append("cap --max-running-requests (e.g. 64)")
    if in_capture:
        # 0.5.2x split the flag per phase: --cuda-graph-max-bs-decode (cuda_graph_hook.py).
        key = "cuda_graph_max_bs" if f.arg("cuda_graph_max_bs") else "cuda_graph_max_bs_decode"
        bs, flag = f.arg(key), "--" + key.replace("_", "-")
        parts.append(
            f"{flag} from {bs} to {max(int(bs) // 2, 1)}"
            if bs and bs.isdigit()
            else "a smaller --cuda-graph-max-bs"
        )
    else:
        cps = f.arg("chunked_prefill_size")
        if cps and cps.lstrip("-").isdigit() and int(cps) > 0:
            parts.append(f"--chunked-prefill-size from {cps} to {max(int(cps) // 2, 512)}")
    return f"{what}: " + ", or ".join(parts) + "."


def _not_enough_memory_hint(m: re.Match[str], f: Facts) -> str:
    mfs = f.float_arg("mem_fraction_static")
    # Newer releases put the value and the minimum viable one in the message itself: "... under
    # --mem-fraction-static=0.88. Raise --mem-fraction-static above 0.912" (sglang 0.5.23
    # srt/mem_cache/kv_cache_configurator.py:3050-3057); 0.5.23's RuntimeError appends
    # "Current value: mem_fraction_static=0.9" (srt/model_executor/pool_configurator.py:96-98).
    on_line = re.search(r"mem[-_]fraction[-_]static=(\d*\.\d+)", m.string)
    if mfs is None and on_line:
        mfs = float(on_line.group(1))
    above = re.search(r"above (\d*\.\d+)", m.string)
    # A small step from a low fraction fails again (an audit: 0.5 -> 0.53, 0.6, 0.7 all died):
    # far below SGLang's usual 0.85-0.92 the step goes there; near it, 0.03 at a time.
    target = (max(mfs + 0.03, 0.88) if mfs < 0.85 else min(mfs + 0.03, 0.95)) if mfs else None
    if above:
        target = max(target or 0.0, math.ceil((float(above.group(1)) + 0.005) * 100) / 100)
    raise_to = (
        f"raise --mem-fraction-static from {mfs:g} to {target:.2f}"
        if mfs is not None and target is not None
        else "raise --mem-fraction-static (e.g. 0.90)"
    )
    pool = "the KV cache pool"
    if re.search(r"mamba|hybrid", m.string, re.I):
        pool = "the hybrid (mamba) state cache"
        raise_to = "lower --max-running-requests, or " + raise_to
    elif "SWA" in m.string:
        pool = "the SWA pool"
        raise_to = "lower --max-running-requests, or " + raise_to
    return (
        f"{pool} got no room after the weights: {raise_to}, or give each GPU less "
        "weight (higher --tp-size), or free the GPUs of other processes (nvidia-smi)."
    )


def _unbalanced_hint(_m: re.Match[str], _f: Facts) -> str:
    return (
        "GPUs have different free memory: another process holds memory on some of them; "
        "check nvidia-smi and stop leftovers (glmserve status / stop) before relaunching."
    )


def _arch_hint(m: re.Match[str], _f: Facts) -> str:
    line = m.string
    if re.search(r"TllmGen|trtllm|fmhaRunner", line, re.I):
        return (
            "trtllm-gen (TllmGen FMHA) kernels are SM100-only (B200/GB200); on SM120 (RTX PRO "
            "6000) use profile flashinfer_gtc (or another non-trtllm attention backend)."
        )
    return (
        "a kernel has no build for this GPU's architecture: use kernels/backends that support "
        "it (SM120 is not SM100), e.g. profile flashinfer_gtc on RTX PRO 6000."
    )


def _no_kernel_image_hint(m: re.Match[str], f: Facts) -> str:
    backend = f.arg("attention_backend") or f.arg("decode_attention_backend")
    if backend in SM100_ONLY_ATTENTION_BACKENDS:  # no rebuild helps: no SM120 kernel exists
        return (
            f"no kernel for this GPU in the {backend} attention backend: its decode kernel is "
            "built for SM100-class GPUs (B200/GB200) only, so no rebuild fixes it on SM120 "
            "(RTX PRO 6000); use profile flashinfer_gtc (or another non-SM100 backend)."
        )
    op = re.search(r"(\w+) failed with error code no kernel image", m.string)
    which = f" ({op.group(1)})" if op else ""
    return (
        f"build/arch mismatch{which}: a binary was compiled without this GPU's architecture. "
        "Install wheels built for it (sm_120 needs CUDA >= 12.8 builds of torch, sgl-kernel and "
        "flashinfer) or rebuild with TORCH_CUDA_ARCH_LIST=12.0 (FLASHINFER_CUDA_ARCH_LIST for "
        "flashinfer JIT); `python -c 'import torch;print(torch.cuda.get_arch_list())'` shows "
        "what torch has."
    )


def _ima_hint(_m: re.Match[str], _f: Facts) -> str:
    return (
        "a kernel read/wrote out of bounds: rerun with CUDA_LAUNCH_BLOCKING=1 to find the real "
        "kernel, then try --disable-cuda-graph and another attention backend "
        "(e.g. profile trtllm_mla vs flashinfer_gtc) to isolate it."
    )


def _nccl_hint(m: re.Match[str], _f: Facts) -> str:
    # torch's watchdog names the collective: "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, ...,
    # Timeout(ms)=600000) ran for 600001 milliseconds" (ProcessGroupNCCL.cpp, checkTimeout).
    work = re.search(r"SeqNum=(\d+), OpType=(\w+).*?Timeout\(ms\)=(\d+)", m.string)
    if work:
        seq, op, ms = int(work.group(1)), work.group(2), int(work.group(3))
        lead = f"collective {op} #{seq} hung past its {ms // 1000} s timeout: "
        if seq <= 8:  # one of the first collectives: the ranks never got to talk at all
            lead += (
                "it is among the first collectives, so the ranks never connected: check that "
                "every node was launched with the same --dist-init-addr/--nnodes, "
                "NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME and the firewall between nodes; "
            )
        else:
            lead += "usually another rank died or hung first (look for its error above); "
        lead += (
            "a slow start-up step on one rank (weight load, JIT) needs a larger --dist-timeout; "
        )
    elif re.search(r"timeout|timed out|[Ww]atchdog", m.string, re.I):
        lead = (
            "a collective failed or timed out (torch's process-group watchdog): usually another "
            "rank died or hung first (look for its error above); otherwise "
        )
    else:
        lead = "NCCL failed: "
    return lead + (
        "rerun with NCCL_DEBUG=INFO; on PCIe-only boxes try NCCL_P2P_LEVEL=PHB (or "
        "NCCL_P2P_DISABLE=1), NCCL_IB_DISABLE=1 without InfiniBand, NCCL_MIN_NCHANNELS=4; check "
        "--disable-custom-all-reduce and that no stale process holds the GPUs."
    )


def _weights_hint(m: re.Match[str], f: Facts) -> str:
    path = f.arg("model_path")
    where = f" ({path.strip(chr(39))})" if path else ""
    missing = re.search(r"does not appear to have a file named ([\w./-]+)", m.string)
    if missing:
        return (
            f"the model path{where} lacks {missing.group(1).rstrip('.')}: point --model-path at "
            "the directory holding config.json and the *.safetensors shards, or finish the "
            "download."
        )
    return (
        f"the checkpoint{where} could not be read: check the path, that every shard is fully "
        "downloaded (sizes vs model.safetensors.index.json), disk space, HF_TOKEN for gated "
        "repos and HF_HUB_OFFLINE for air-gapped hosts."
    )


def _bad_args_hint(m: re.Match[str], _f: Facts) -> str:
    msg = m.group("msg") if "msg" in m.groupdict() and m.group("msg") else m.string
    flag = re.search(r"(--?[A-Za-z][\w-]*)", msg)
    name = flag.group(1) if flag else "a flag"
    if "unrecognized arguments" in msg:
        return (
            f"{name} is not a flag of this SGLang release (removed or renamed; note dashes, "
            "not underscores): fix the profile, `glmserve check` validates against the host's "
            "release."
        )
    if "ambiguous option" in msg:
        return (
            f"{name} is an abbreviation that matches several flags of this release (often a "
            "flag renamed between releases): spell the full flag name."
        )
    if "invalid choice" in msg:
        choices = re.search(r"choose from ([^)]*)", msg)
        extra = f"; valid: {choices.group(1)}" if choices else ""
        return f"{name} got a value this release does not accept{extra}."
    if "required" in msg:
        return f"missing required argument {name}."
    return f"SGLang rejected {name}: fix it in the profile (`glmserve check` validates flags)."


def _usage_hint(_m: re.Match[str], _f: Facts) -> str:
    return (
        "SGLang printed its usage banner: the command line was rejected (the 'error:' line "
        "after it names the flag; often an underscore spelling or a flag this release lacks). "
        "Fix the profile; `glmserve check` validates flags against the host's release."
    )


def _port_hint(m: re.Match[str], f: Facts) -> str:
    line = m.string
    port = None
    for pat in (
        r"\(['\"][^'\"]*['\"],\s*(\d{2,5})[,)]",
        r"[\w\]]:(\d{2,5})\b",
        r"[Pp]ort(?: at)?\D{0,3}(\d{2,5})",
    ):
        p = re.search(pat, line)
        if p:
            port = p.group(1)
            break
    arg_port = f.arg("port")
    if port is None:
        port = arg_port
    if port is None:
        return (
            "a port SGLang binds is taken (--port, or the internal ports it derives from it): "
            "stop the old server (glmserve status / stop) or pick another --port."
        )
    nxt = int(port) + 10
    return (
        f"port {port} is already in use: find the holder with `ss -ltnp 'sport = :{port}'`, stop "
        f"it (glmserve stop RUN for an old run) or launch with --set server.port={nxt}"
        + (f" (server --port is {arg_port})" if arg_port and arg_port != port else "")
        + "."
    )


def _compile_hint(m: re.Match[str], _f: Facts) -> str:
    line = m.string
    if re.search(r"out of resource", line, re.I):
        return (
            "a Triton kernel config needs more shared memory/registers than this GPU has "
            "(SM120 has less shared memory than SM90/SM100): use another backend or kernel "
            "config for this GPU."
        )
    if re.search(r"unsupported toolchain|kernel image is invalid", line, re.I):
        return (
            "PTX built by a newer CUDA than the driver supports: update the NVIDIA driver or use "
            "wheels built for the installed driver's CUDA version."
        )
    return (
        "a JIT/kernel build failed (Triton/nvcc/ninja): read the compiler error above; check "
        "CUDA_HOME/nvcc version matches torch's CUDA, clear ~/.cache/flashinfer and "
        "~/.triton/cache, and set TORCH_CUDA_ARCH_LIST for this GPU."
    )


def _patch_hint(m: re.Match[str], _f: Facts) -> str:
    name = m.group("name")
    why = (m.group("why") or "").strip()
    return (
        f"runtime patch {name} refused to apply ({why}): it never runs unpatched. Use an SGLang "
        "release the patch supports, or a profile without it (e.g. trtllm_mla)."
    )


def _crash_hint(line: str, f: Facts) -> str:
    if re.search(r"Segmentation fault|Fatal Python error|core dumped", line):
        return (
            "a native crash (segfault/abort): rerun with CUDA_LAUNCH_BLOCKING=1 and "
            "--disable-cuda-graph to find the kernel; check torch/sgl-kernel/flashinfer versions "
            "match."
        )
    if re.search(r"undefined symbol|ImportError|ModuleNotFoundError", line):
        return (
            "a broken install: a module or symbol is missing (binary wheels built against another "
            "torch?). Reinstall sglang/sgl-kernel/flashinfer matching the installed torch."
        )
    if re.search(r"device-side assert", line):
        return (
            "a device-side assert (index out of range in a kernel): rerun with "
            "CUDA_LAUNCH_BLOCKING=1 to see which; often a tokenizer/vocab or backend mismatch."
        )
    if re.search(r"Response \[5\d\d\]|warmup", line):
        return (
            "the warmup request to the server's own HTTP port failed: an http_proxy/https_proxy "
            "in the environment often intercepts it (set no_proxy=127.0.0.1,localhost), or a "
            "scheduler died during warmup (look above)."
        )
    if re.search(r"^Killed\b|SIGKILL", line):
        return "the server was SIGKILLed (host OOM killer? check `dmesg | tail`)."
    return (
        f"no specific rule matched this exception (phase {f.phase.value}): read the traceback "
        "that ends at this line; rerun with --log-level debug (and CUDA_LAUNCH_BLOCKING=1 for "
        "CUDA errors) to narrow it down."
    )


def _cuda_runtime_hint(m: re.Match[str], _f: Facts) -> str:
    what = m.group("msg").strip().rstrip(".")[:120]
    if re.search(r"captur", what, re.I):
        return (
            f"a {m.group('api')} runtime error during CUDA graph capture ({what}): retry with "
            "--disable-cuda-graph to confirm, then update the driver/runtime (ROCm <= 7.2.0 has "
            "such a capture bug) or the kernel that allocates or syncs inside the capture."
        )
    return (
        f"a {m.group('api')} runtime error ({what}): it may be reported by a later call than "
        "the one that failed; rerun with CUDA_LAUNCH_BLOCKING=1 (AMD_SERIALIZE_KERNEL=3 on "
        "ROCm) and --disable-cuda-graph to find the kernel, and check the driver matches the "
        "torch/sgl-kernel build."
    )


def _host_oom_hint(_m: re.Match[str], _f: Facts) -> str:
    return (
        "host (CPU) memory ran out, not GPU memory: check free RAM and container limits "
        "(docker --memory/--shm-size, ulimit -v/-l), and lower host-side buffers "
        "(--hicache-size, --cpu-offload-gb, weight loader threads)."
    )


@dataclass(frozen=True)
class Rule:
    """One root-cause pattern. ``priority`` breaks ties between rules seen in the same crash
    (3 = a diagnosis that explains the others, 1 = a symptom such as a compile failure);
    ``weak`` rules are usually a consequence of another rank's failure; ``fatal=False`` rules
    (warnings) only explain a crash that other lines prove; ``needs_error`` rules are phrases
    that warnings use too, so they count as fatal only on an error/exception line;
    ``before_ready`` rules are fatal only during start-up: after READY the same line comes from
    a request the server survives, so they count as weak (a cascade must prove the crash)."""

    pattern: re.Pattern[str]
    category: Category
    hint: HintBuilder
    priority: int = 2
    weak: bool = False
    fatal: bool = True
    needs_error: bool = False
    before_ready: bool = False


def _r(
    regex: str,
    category: Category,
    hint: HintBuilder,
    priority: int = 2,
    *,
    weak: bool = False,
    fatal: bool = True,
    needs_error: bool = False,
    before_ready: bool = False,
    flags: int = 0,
) -> Rule:
    return Rule(
        re.compile(regex, flags), category, hint, priority, weak, fatal, needs_error, before_ready
    )


_I = re.IGNORECASE
C = Category

# argparse prints its usage banner right before "prog: error: ..."; an excerpt cut after the
# banner is still a rejected command line (weak: the error line, if present, wins). ``--help``
# prints the same banner followed by the option list (``_HELP``), which retracts it.
_USAGE_RULE = _r(r"^usage: [\w.\-]+(?: [\w.\-]+)? \[-h\]", C.BAD_ARGS, _usage_hint, weak=True)
# Lines only argparse's --help output has after the banner (3.10+ says "options:").
_HELP = re.compile(
    r"^-h, --help\s+show this help message and exit$|^(?:options|optional arguments):$"
)

# The rule table: one line per recognised failure. Order only matters within one line
# (the first matching rule names the line's category).
RULES: list[Rule] = [
    # Emitted by glmserve's own runtime patch (src/glmserve/runtime) in each worker.
    _r(r"glmserve patch (?P<name>[\w.-]+) FAILED:?(?P<why>.*)", C.PATCH_FAILED, _patch_hint, 3),
    # FlashInfer MLA kernels only take 16-bit KV (mla.cuh static_assert) - seen with FP8 KV.
    _r(
        r"static_assert\(sizeof\(DType\w*\)\s*==\s*2\)",
        C.UNSUPPORTED_KV_DTYPE,
        _fixed(
            "FlashInfer MLA needs 16-bit KV; use profile flashinfer_gtc or trtllm_mla "
            "(or --kv-cache-dtype bf16)."
        ),
        3,
    ),
    _r(
        r"(?:kv[_ -]?cache[_ -]?dtype|kv_data_type|dtype_kv)\W.{0,80}\b(?:not supported|unsupported"
        r"|is not implemented|only supports?|must be)"
        r"|(?:unsupported|not supported)\W.{0,40}kv[_ -]?cache[_ -]?dtype"
        r"|(?:fp8|float8\w*|e4m3|e5m2)[ _-]?kv[ _-]?cache.{0,60}(?:not supported|unsupported"
        r"|not implemented)",
        C.UNSUPPORTED_KV_DTYPE,
        _fixed(
            "this attention backend cannot read this KV cache dtype: use profile "
            "flashinfer_gtc or trtllm_mla, or --kv-cache-dtype bf16."
        ),
        3,
        flags=_I,
        needs_error=True,
    ),
    _r(
        r"TllmGen\w*.{0,200}Unsupported architecture|Unsupported architecture.{0,200}TllmGen",
        C.UNSUPPORTED_ARCH,
        _arch_hint,
        3,
    ),
    _r(r"no kernel image is available for execution", C.UNSUPPORTED_ARCH, _no_kernel_image_hint, 3),
    _r(
        r"Unsupported (?:CUDA |GPU )?arch(?:itecture)?\b|(?:sm_?\d+|compute capability \d+\.\d+)"
        r".{0,40}\bnot supported|only supports? (?:on )?(?:sm|SM|Hopper|Blackwell|Ampere|compute)"
        r"|only supported on (?:sm|SM|Hopper|Blackwell|Ampere)|FlashAttention only supports Ampere"
        r"|requires (?:sm|SM)_?\d+|not supported on (?:CUDA arch|this GPU|your GPU|this device)"
        r"|not supported (?:in|on|for) this (?:architecture|GPU|device)",
        C.UNSUPPORTED_ARCH,
        _arch_hint,
        3,
        needs_error=True,
    ),
    _r(
        r"with CUDA capability sm_\d+ is not compatible with the current PyTorch",
        C.UNSUPPORTED_ARCH,
        _no_kernel_image_hint,
        3,
        fatal=False,
    ),
    _r(
        r"Not enough memory\. Please try to increase --mem-fraction-static"
        r"|max_total_num_tokens\W+(?:is )?(?:negative|<= ?0)|KV cache pool .{0,40}too small"
        # 0.5.2x: "ValueError: Loaded weights leave no GPU memory for the KV cache under
        # --mem-fraction-static=0.88" (kv_cache_configurator.py:3050).
        r"|(?:leaves?|left|no|not enough|insufficient) (?:\w+ ){0,2}(?:GPU )?memory (?:\w+ )?for "
        r"(?:the )?KV[ _-]?cache"
        # Other pools sized from the same budget (0.5.23 kv_cache_configurator.py:3394,
        # :3152, pool_configurator.py:212, :1026): hybrid mamba state cache, SWA pool.
        r"|Not enough GPU memory for hybrid|state cache is too small to serve any requests"
        r"|pool \(\d+ tokens\) cannot hold even one request|leaves no room for the full KV pool",
        C.OOM,
        _not_enough_memory_hint,
    ),
    # A negative token budget: the memory left after the weights is below the reserve that
    # --mem-fraction-static keeps back, and SGLang only warns ("max_total_tokens=131072 is larger
    # than the profiled value -561981. Use the profiled value instead.", sglang 0.5.15
    # srt/model_executor/model_runner_kv_cache_mixin.py:1208-1209, 0.5.23
    # srt/mem_cache/kv_cache_configurator.py:3102-3103) or logs the budget itself
    # (max_total_num_tokens=-N), then fails later with a misleading error (sglang#7691: a GPU
    # memory access fault). A warning while the process lives (the fitted corpus's 7691 excerpt
    # ends there: still loading); priority 3, so it is the root cause of whatever crash follows.
    _r(
        r"is larger than the profiled value -\d|max_total_num_tokens=-\d",
        C.OOM,
        _not_enough_memory_hint,
        3,
        fatal=False,
    ),
    _r(r"memory capacity is unbalanced", C.OOM, _unbalanced_hint),
    _r(r"Cannot allocate memory", C.OOM, _host_oom_hint),
    _r(
        r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED"
        r"|cudaErrorMemoryAllocation|Memory pool.{0,30}allocation failed",
        C.OOM,
        _oom_hint,
    ),
    # "... out of memory" in SGLang's own RuntimeErrors (Prefill / alloc_req_slots / token pool):
    # only when the line is an error - warnings say "may run out of memory" too.
    _r(r"out of memory", C.OOM, _oom_hint, flags=_I, needs_error=True),
    _r(
        r"illegal memory access|an illegal instruction was encountered|misaligned address"
        r"|cudaErrorIllegalAddress|CUDA_ERROR_ILLEGAL_ADDRESS|unspecified launch failure"
        r"|Memory access fault by GPU",
        C.ILLEGAL_MEMORY_ACCESS,
        _ima_hint,
        flags=_I,
    ),
    _r(
        r"Address already in use|address already in use|\[Errno 98\]|EADDRINUSE",
        C.PORT_IN_USE,
        _port_hint,
    ),
    # SGLang's own port checks for the ports it derives from --port (0.5.23
    # srt/utils/network.py:82,95: "nccl_port at 30005 is not available", "... is used by a
    # process already"; server_args.py:886 logs "Port is already in use. dist_init_port=..."
    # first, without saying which: lower priority, so the line naming the port wins).
    _r(
        r"\b\w*port at \d+ is not available|\b\w*port is used by a process already",
        C.PORT_IN_USE,
        _port_hint,
    ),
    _r(r"^Port is already in use\.", C.PORT_IN_USE, _port_hint, 1),
    _r(
        r"[Pp]ort \d+ is (?:already )?(?:in use|used|not available)|Can not bind .{0,40}port",
        C.PORT_IN_USE,
        _port_hint,
        needs_error=True,
    ),
    _r(
        r"NCCL error|ncclUnhandledCudaError|ncclSystemError|ncclInternalError|ncclInvalidUsage"
        r"|ncclRemoteError|unhandled system error|unhandled cuda error|NCCL_ERROR|Failed to "
        r"initialize NCCL|ncclCommInitRank failed|setting up NCCL communicator"
        r"|peer access is not supported|cudaErrorPeerAccess|Gloo connectFullMesh failed",
        C.NCCL,
        _nccl_hint,
        flags=_I,
    ),
    # Gloo (the CPU-side process group) losing a peer: usually that peer died first.
    _r(r"gloo/transport/\w+/\w+\.cc:\d+\]", C.NCCL, _nccl_hint, weak=True),
    _r(
        r"Watchdog caught collective operation timeout|ProcessGroupNCCL.{0,80}(?:timeout|Timeout|"
        r"timed out)|NCCL communicator was aborted|DistBackendError|DistNetworkError|DistStoreError"
        r"|collective operation timeout"
        # torch's watchdog on any failed collective (torch/csrc/distributed/c10d/
        # ProcessGroupNCCL.cpp, Watchdog::runLoop: "<pg prefix> failure detected by watchdog at
        # work sequence id: N PG status: ..." - ProcessGroupNCCL.cpp:2168-2395 in the logs of
        # torch 2.6-2.9; before 2.6 "Exception (either an error or timeout) detected by watchdog
        # at work: N"), and the watchdog thread's exit (Watchdog::run: "Process group watchdog
        # thread terminated with exception: <what>"). When <what> is a CUDA error on the same
        # line, the rules above name it; alone, the line only says a collective's rank failed.
        r"|detected by watchdog at work|Process group watchdog thread terminated with exception"
        # Gloo's monitored barrier (ProcessGroupGloo.cpp:143): a peer failed to reach it.
        r"|successfully reached monitoredBarrier, but received errors",
        C.NCCL,
        _nccl_hint,
        weak=True,
    ),
    _r(
        r"NCCL WARN .{0,200}(?:fail|error|abort|timeout)", C.NCCL, _nccl_hint, fatal=False, flags=_I
    ),
    _r(
        r"does not appear to have a file named|SafetensorError|safetensors_rust|HeaderTooLarge"
        r"|Error while deserializing header|incomplete metadata|RepositoryNotFoundError"
        r"|GatedRepoError|EntryNotFoundError|LocalEntryNotFoundError|HFValidationError"
        r"|is not a local folder and is not a valid model identifier|Cannot find any model weights"
        r"|Can't load (?:the )?(?:config|tokenizer|weights)|couldn't connect to 'https://huggingface"
        r"|\bunexpected EOF\b.{0,40}safetensors|Failed to load weights|PytorchStreamReader failed"
        r"|weights? .{0,40}not found in (?:the )?checkpoint|does not recognize this architecture"
        r"|Model architectures? \[.{0,200}\] (?:are|is) not supported"
        r"|no file named .{0,200} found in directory",
        C.WEIGHT_LOADING,
        _weights_hint,
    ),
    _r(
        r"No such file or directory: .{0,300}\.(?:safetensors|bin|pt|json|model)\b"
        r"|huggingface\.co.{0,200}(?:Max retries|timed out|ConnectionError)",
        C.WEIGHT_LOADING,
        _weights_hint,
        needs_error=True,
    ),
    # A checkpoint tensor the model class has no parameter for (params_dict[name]): a
    # quantized/renamed checkpoint that this SGLang release's loader does not map. After READY
    # the same KeyError is a request's (get_weights_by_name logs it with a traceback and the
    # server keeps serving): fatal only during start-up.
    _r(
        r"^KeyError: '(?:[\w-]+\.)+(?:\w*weight\w*|\w*scale\w*|bias|qweight|qzeros|g_idx)'",
        C.WEIGHT_LOADING,
        _weights_hint,
        before_ready=True,
    ),
    _r(
        r"could finish the model loading, but there are other ranks",
        C.WEIGHT_LOADING,
        _fixed(
            "another TP rank failed or stalled while loading weights (often OOM or a slow "
            "disk/node): find that rank's first error above, check free GPU memory and the "
            "checkpoint path on every node."
        ),
        weak=True,
    ),
    _r(
        r"^(?P<prog>[\w.\-]+(?: [\w.\-]+)?): error: (?P<msg>.*)",
        C.BAD_ARGS,
        _bad_args_hint,
    ),
    _r(
        r"^error: (?P<msg>(?:unrecognized arguments|argument --|ambiguous option|the following "
        r"arguments are required).*)",
        C.BAD_ARGS,
        _bad_args_hint,
    ),
    _r(r"ServerArgs\.__init__\(\) got an unexpected keyword", C.BAD_ARGS, _bad_args_hint),
    _USAGE_RULE,
    _r(
        r"must be divisible by (?:the )?(?:tensor|tp|pipeline|pp|data|dp|expert|ep)\b",
        C.BAD_ARGS,
        _fixed(
            "the parallel sizes do not divide the model's dimensions: pick a --tp-size (and "
            "--dp/--ep/--pp) that divides the head/expert counts in the error."
        ),
        needs_error=True,
    ),
    # A per-rank partition of a weight that the quantization block (or the parallel layout) does
    # not divide: "ValueError: Weight output_partition_size = 192 is not divisible by weight
    # quantization block_n = 128" with --tp 16 (sglang#23602). A layout choice, not a crash.
    _r(
        r"\bis not divisible by\b|\bnot (?:evenly )?divisible by\b",
        C.BAD_ARGS,
        _fixed(
            "a weight or head count does not split evenly over this parallel layout: pick a "
            "--tp-size (and --dp/--ep/--pp) whose per-rank share divides the sizes in the error "
            "(with a quantized checkpoint, the per-rank partition must be a multiple of the "
            "quantization block)."
        ),
        needs_error=True,
    ),
    # SGLang's soft watchdog (--soft-watchdog-timeout) only dumps the stacks and logs this line;
    # the process keeps running (sglang 0.5.23 srt/utils/watchdog.py:153-163: SIGQUIT to the
    # parent only ``if not self.soft``). A crash only if the process dies (Diagnosis.exited).
    _r(
        r"[Ww]atchdog timeout \(self\.watchdog_timeout=[^,)]*, self\.soft=True\)",
        C.CRASH,
        _fixed(
            "SGLang's soft watchdog saw no scheduler progress for --soft-watchdog-timeout "
            "seconds and dumped the stacks (py-spy, above); the server keeps running. If it "
            "stays stuck, read that dump: a stuck kernel or collective (NCCL_DEBUG=INFO)."
        ),
        1,
        fatal=False,
    ),
    # SGLang's own hang detector kills the scheduler: a hang, reported as a crash.
    _r(
        r"[Ww]atchdog timeout \(self\.watchdog_timeout=",
        C.CRASH,
        _fixed(
            "a scheduler made no progress for --watchdog-timeout seconds and SGLang killed it: "
            "read the py-spy dump above (a stuck kernel or collective); NCCL_DEBUG=INFO and "
            "CUDA_LAUNCH_BLOCKING=1 narrow it down."
        ),
        1,
    ),
    _r(
        r"Value 'sm_\d+a?' is not defined for option|nvcc fatal\s*: Unsupported gpu architecture",
        C.COMPILE_ERROR,
        _fixed(
            "the CUDA toolkit (nvcc/ptxas) is too old for this GPU: sm_120 needs CUDA >= 12.8; "
            "point CUDA_HOME at a newer toolkit or use prebuilt kernels (flashinfer-cubin)."
        ),
        2,
    ),
    _r(
        r"CompilationError|triton\.compiler\.errors|nvcc fatal|ptxas (?:fatal|error)|PTXASError"
        r"|ninja: build stopped|Error building extension|error: command '[^']*nvcc' failed"
        r"|Ninja build failed|unsupported toolchain|device kernel image is invalid"
        r"|OutOfResources: out of resource|InductorError|BackendCompilerFailed"
        r"|fatal error: [\w./-]+\.(?:h|hpp|cuh): No such file"
        r"|CalledProcessError: Command '\[?'?[^']*(?:ninja|nvcc|ptxas|g\+\+|gcc|c\+\+|cmake)\b"
        r"|\.(?:cu|cuh|h|hpp|cpp|cc)\(\d+\): (?:error|fatal)"
        r"|JIT compil\w+ failed|failed to compile"
        # subprocess reporting a compiler/build tool's failure (Triton's gcc build of
        # cuda_utils, flashinfer/DeepGEMM ninja builds): the argv's first element names it.
        r"|Command '\[?'?[^' ]*\b(?:gcc|g\+\+|c\+\+|cc|clang|nvcc|ninja|ptxas|cmake|make)'"
        r"[^\n]{0,4000}?returned non-zero exit status",
        C.COMPILE_ERROR,
        _compile_hint,
        1,
    ),
    # A CUDA kernel's own assert (printed by the device before "device-side assert
    # triggered"): the first line of the failure, usually an index out of range.
    _r(
        r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion .{0,400}failed",
        C.CRASH,
        lambda m, f: _crash_hint("device-side assert", f),
        1,
    ),
    # The speculative workers check the flags that server_args auto-fills (sglang 0.5.18
    # srt/speculative/multi_layer_eagle_worker_v2.py:140-144 "multi-layer EAGLE requires
    # speculative_num_draft_tokens == speculative_num_steps + 1, got 8 and 5";
    # srt/speculative/base_spec_worker.py:120-123, the same for topk=1): a flag combination.
    _r(
        r"requires speculative_num_draft_tokens == speculative_num_steps \+ 1"
        r"(?:, got (?P<tokens>\d+) and (?P<steps>\d+))?",
        C.BAD_ARGS,
        lambda m, _f: (
            "the speculative flags do not fit this algorithm: set --speculative-num-draft-tokens "
            "to --speculative-num-steps + 1"
            + (f" (got {m.group('tokens')} and {m.group('steps')})" if m.group("tokens") else "")
            + ", with --speculative-eagle-topk 1, explicitly in the profile instead of relying "
            "on the auto-filled values."
        ),
    ),
    # torch's CUDA/HIP runtime errors ("CUDA error: <cudaGetErrorString>", raised by
    # c10_cuda_check_implementation, c10/cuda/CUDAException.cpp:43 in torch 2.5's logs; "HIP
    # error: ..." on ROCm builds). The rules above name the known ones (out of memory, illegal
    # memory access, no kernel image); any other is still a crash of the process that hit it.
    # After READY a request's error may be logged while the server lives: a cascade proves it.
    _r(
        r"^(?:[\w.:]+(?:Error|Exception): )?(?P<api>CUDA|HIP) error: (?P<msg>.+)",
        C.CRASH,
        _cuda_runtime_hint,
        1,
        before_ready=True,
    ),
]

# Cascade: the launcher, bash or a parent process reacting to a death reported elsewhere.
_CASCADE = re.compile(
    r"Received sigquit from a child|sigquit from a child|^Killed\b|\bKilled$|\d+ Killed\s"
    r"|scheduler is dead|died during initialization|Child process unexpectedly failed"
    r"|hit an exception:|Initialization failed\. Please see the error messages above"
    r"|exited with (?:exit )?code (?:-\d+|[1-9]\d*)|exitcode=(?:-\d+|[1-9]\d*)"
    r"|^Process [\w-]+(?::\d+)*:$"
    r"|^Exception in [\w ]+:$|^Exception in thread |SIGQUIT received",
    re.IGNORECASE,
)
# Log levels: newer SGLang prints "[ts] WARNING file.py:12: msg"; a warning never is the crash.
_SOFT_LEVEL = re.compile(r"(?:WARNING|WARN|INFO|DEBUG)\b|[WI]\d{4} \d|Ignore import error")
_ERROR_LEVEL = re.compile(r"^(?:ERROR|CRITICAL|FATAL)\b|\bERROR\b|\b[A-Z]\w*Error: |^error: ")
# SGLang's own failure reports that carry the message on the same line.
_REPORT = re.compile(r"Initialization failed\. warmup error:|Capture cuda graph failed:")
# A Python exception line ("RuntimeError: ...", "torch.OutOfMemoryError: ...", "c10::Error: ..").
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_]\w*(?:\.|::))*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault)"
    r"|Exception)(?::\s|:$|$)"
    r"|^Fatal Python error|^Segmentation fault|Aborted \(core dumped\)"
    r"|^terminate called after throwing"
)
# Traceback frames that say which subsystem a generic exception came from (deepest wins).
_FRAME_CTX: list[tuple[re.Pattern[str], Category]] = [
    (
        re.compile(
            r"weight_utils\.py|load_weights|weight_loader|safetensors|huggingface_hub|"
            r"hf_transformers_utils|configuration_utils\.py|configuration_auto\.py|"
            r"tokenization_auto\.py|snapshot_download|_prepare_weights"
        ),
        C.WEIGHT_LOADING,
    ),
    (re.compile(r"server_args\.py|argparse\.py"), C.BAD_ARGS),
    (
        re.compile(
            r"triton/compiler|cpp_extension\.py|flashinfer/jit|tvm_ffi|torch/_inductor|"
            r"jit_kernel|/jit/"
        ),
        C.COMPILE_ERROR,
    ),
    (
        re.compile(
            r"pynccl|initialize_model_parallel|init_distributed_environment|"
            r"init_model_parallel_group|distributed_c10d\.py.*(?:init_process_group|barrier)"
        ),
        C.NCCL,
    ),
]
# Also frames pasted with JSON-escaped quotes (File \"/path\", line N).
_FRAME = re.compile(r'^\s*File \\?"[^"]*", line \d+')
_TRACEBACK = re.compile(
    r"Traceback \(most recent call last\)|^During handling of the above"
    r"|^The above exception was the direct cause"
)

# Progress markers: (regex, state reached or None for "progress, same phase").
_PROGRESS: list[tuple[tuple[str, ...], re.Pattern[str], State | None]] = [
    # (lower-case words one of which must be in the line, regex, state reached or None for
    # "progress within the phase"). Ordered so the frequent serving lines are checked first.
    # Decode statistics are logged every --decode-log-interval (40) decode steps with
    # requests running: only a serving server prints them (warmup decodes a few tokens).
    # 0.5.2x with SGLANG_LOG_FORWARD_ITERS prints the forward iteration: "Decode batch [812],"
    # (sglang 0.5.23 srt/managers/scheduler_components/metrics_reporter.py:962-963).
    (
        ("decode batch",),
        re.compile(r"Decode batch(?: \[\d+\])?[.,] #running-req: [1-9]"),
        State.READY,
    ),
    (("prefill batch", "decode batch"), re.compile(r"Prefill batch|Decode batch"), None),
    (("ready to roll",), re.compile(r"The server is fired up and ready to roll"), State.READY),
    # A client request answered on the OpenAI routes: the server is serving (wait_for_server
    # polls GET /v1/models before ready, so only POSTs count).
    (("post /v1/",), re.compile(r'"POST /v1/\S+ HTTP/[\d.]+" 200'), State.READY),
    (
        ("uvicorn", "application startup", "model_info", "warm"),
        re.compile(
            r"Uvicorn running on|Application startup complete|Waiting for application "
            r"startup|GET /(?:get_)?model_info|\bwarm ?up\b",
            re.IGNORECASE,
        ),
        State.WARMUP,
    ),
    (
        ("capture", "capturing"),
        re.compile(r"Capture .{0,40}cuda graph|Capturing (?:batches|num tokens)", re.IGNORECASE),
        State.CAPTURING_GRAPHS,
    ),
    (
        ("kv cache", "memory pool", "max_total_num_tokens"),
        re.compile(r"KV Cache is allocated|Memory pool end|max_total_num_tokens="),
        State.KV_ALLOCATED,
    ),
    (
        ("load weight", "loading", "multi-thread"),
        re.compile(
            r"Load weight (?:begin|end)|Loading (?:safetensors|pt) checkpoint shards|"
            r"Multi-thread loading shards|Loading weights"
        ),
        State.LOADING_WEIGHTS,
    ),
    (
        ("init torch", "compiling", "flashinfer.jit"),
        re.compile(
            r"Init torch distributed (?:begin|ends)|Compiling num tokens|"
            r"flashinfer\.jit: (?:Loading|Finished)"
        ),
        None,
    ),
]

# Decorations in front of SGLang's own "[ts TPn] " prefix, stripped repeatedly:
_DECOR = re.compile(
    r"^(?:\s*>\s?)+"  # markdown quotes
    r"|^\s*\([\w.-]+ pid=\d+(?:, ip=[\d.]+)?\)\s?"  # Ray: "(SGLangEngine pid=23902) "
    r"|^\s*\[\d{4}-\d\d-\d\dT[\d:.]+Z?\]\s?"  # CI: "[2025-11-06T02:10:00.702Z] "
    r"|^\s*\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d)?\s+(?:std(?:out|err) [FP] )?"  # kubectl/CRI
    r"|^\s*\d{4}-\d\d-\d\d [\d:,.]+ \| \w+ \| [\w.]+ \| "  # "date | ERROR | stderr | "
    r"|^[\w.-]+\s+\| "  # docker compose "name  | "
    r"|^\s*(?:DEFAULT|DEBUG|INFO|NOTICE|WARNING|ERROR|CRITICAL|ALERT|EMERGENCY)\s+"
    r"\d{4}-\d\d-\d\dT[\d:.]+Z?\s+"  # Google Cloud Logging export: "ERROR 2025-04-07T19:..Z "
    r"|^\s*\d{4}-\d\d-\d\d [\d:,.]+ - [\w.]+ - [A-Z]+ - "  # Python logging "date - name - LEVEL - "
    r"|^\s*\[rank\d+\]:\s?"  # torchrun "[rank0]: "
    r"|^\s*\d\d-\d\d \d\d:\d\d:\d\d\.\d+\s+"  # console exports "04-20 13:32:25.784  "
)
# SGLang's "[ts TAGS] ": 0.3.x printed only the time; tags are TPn, DPn, PPn, EPn and newer
# ones such as ATTN_CP7; a paste may lose the opening bracket.
_PREFIX = re.compile(
    r"^\s*\[?(?P<ts>(?:\d{4}-\d\d-\d\d[ T])?\d\d:\d\d:\d\d(?:[.,]\d+)?)"
    r"(?P<tags>(?:\s+[A-Z][A-Z_]{1,11}\d+)*)\]\s?"
)
_TP_TAG = re.compile(r"\bTP(\d+)\b")
# "warmup" lines that are a kernel's warmup/JIT progress, not the server's warmup request.
_KERNEL_WARMUP = re.compile(r"DeepGEMM|deep_gemm|\bJIT\b|\bkernel|autotun|\d+%\|", re.IGNORECASE)
# Markers in which a process reports its own failure; they outrank the launcher's reaction
# (sigquit, Killed, "scheduler is dead") as a root cause when no error line is present.
_SELF_REPORT = re.compile(
    r"hit an exception:|^Exception in |^Process [\w-]+(?::\d+)*:$|Initialization failed\. warmup"
    r"|^Traceback \(most recent call last\)"
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_PATCH_ACTIVE = re.compile(r"glmserve patch (?P<name>[\w.-]+) active \((?P<inner>[^)]*)\)")
# glmserve_runtime, in every process: "glmserve runtime: patches armed: a, b (pid N)"
_PATCH_ARMED = re.compile(r"glmserve runtime: patches armed: (?P<names>[\w.,\s-]+?)\s*\(pid")
# Up to 0.5.9: "server_args=ServerArgs(model_path='m', tp_size=8, ...)" (a dataclass repr);
# 0.5.2x logs a dict: "server_args={'model_path': 'm', 'tp_size': 8, ...}" (sglang 0.5.23
# srt/entrypoints/engine.py:311, ``_server_args_for_logging`` = ``resolved_dict()``).
_SERVER_ARGS = re.compile(r"server_args=ServerArgs\(|ServerArgs\(model_path=|server_args=\{'")
_ARG_PAIR = re.compile(r"\b([a-z_][a-z0-9_]*)=('[^']*'|\"[^\"]*\"|[^,()\s]+)")
_DICT_PAIR = re.compile(r"'([a-z_][a-z0-9_]*)': ('[^']*'|\"[^\"]*\"|[^,(){}\[\]\s]+)")
# The server_args line of a big config is longer than MAX_LINE_CHARS (0.5.23: ~18K chars).
MAX_ARGS_LINE_CHARS = 65_536
_MAX_TOTAL = re.compile(r"max_total_num_tokens=(\d+).*?max_running_requests=(\d+)")


# Cheap prefilters (lower-case substrings; `any(k in line)` runs at C speed): a line that
# holds none of these cannot match a rule, cascade marker, exception or traceback line, so
# ordinary INFO lines skip the regexes. Extend this when adding a rule with new words.
_KEYWORDS = (
    "error", "exception", "fail", "fault", "fatal", "abort", "core dumped", "terminate called",
    "interrupt", "exit", "killed", "sigkill", "sigquit", "dead", "died", "process", "traceback",
    'file "', "during handling", "memory", "illegal", "misaligned", "launch failure", "nccl",
    "gloo", "peer access", "watchdog", "timeout", "timed out", "errno", "in use", "bind",
    "not available", "eaddrinuse", "unsupported", "not supported", "only support", "requires sm",
    "capability", "architecture", "kernel image", "static_assert", "not implemented", "must be",
    "too small", "negative", "divisible", "safetensor", "does not appear", "huggingface",
    "not found in", "profiled value", "max_total_num_tokens=-", "requires speculative",
    "could finish", "can't load", "cannot find", "local folder", "incomplete metadata",
    "unexpected eof", "unexpected keyword", "is not defined for option", "ninja", "nvcc",
    "ptxas", "compil", "out of resource", "toolchain", "glmserve patch", "usage:", 'file \\"',
)  # fmt: skip


def _has_any(low: str, keys: tuple[str, ...]) -> bool:
    # A plain loop, not any(<generator>): about twice as fast over the ~100 keywords.
    for k in keys:  # noqa: SIM110
        if k in low:
            return True
    return False


# feed_block's line shapes: ASCII lower-cased and digits folded to "0" in one C-speed
# translate, so "Decode batch, #running-req: 12, ..." lines of a serving log share one shape.
_FOLD = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZ123456789", b"abcdefghijklmnopqrstuvwxyz000000000"
)
_BORING, _PROGRESS_ONLY, _HOT = 0, 1, 2
_SHAPE_MAX_BYTES = 4096  # longer lines always take the full path (and are not cached)
_NARROW_AFTER = 64  # cache misses in one block before its keys are narrowed (_block_keys)
_MAX_FACTS = 4096  # server_args keys, patch names, patch ranks kept (a real log has ~300)
_MAX_SHAPE_BYTES = 4 << 20  # bounds the cache on input whose lines never repeat (random bytes)
_FOLD_STR = str.maketrans("123456789", "000000000")  # keys are folded like the shapes
_PROGRESS_KEYS = tuple(sorted({k.translate(_FOLD_STR) for ks, _p, _s in _PROGRESS for k in ks}))
_SHAPE_KEYWORDS = tuple(k.translate(_FOLD_STR) for k in _KEYWORDS)
# Lines the full path treats specially before the keyword check, plus the two non-ASCII
# characters whose str.lower() is ASCII (KELVIN SIGN -> "k", I WITH DOT ABOVE -> "i").
_HOT_MARKS = (
    "\r", "\x1b", "\x00", "serverargs(", "server_args=", "glmserve", "patches armed",
    "options:", "optional arguments:", "-h, --help", "max_total_num_tokens",
    "\xe2\x84\xaa", "\xc4\xb0",
)  # fmt: skip
# "token usage: 0.05" in every decode line is not argparse's "usage: prog [-h]" banner (that
# rule is anchored at the start of the message).
_WORD_USAGE = re.compile(r"\w usage:")


_ShapeKeys = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]
_ALL_SHAPE_KEYS: _ShapeKeys = (_HOT_MARKS, _SHAPE_KEYWORDS, _PROGRESS_KEYS)


def _shape_kind(shape: bytes, keys: _ShapeKeys = _ALL_SHAPE_KEYS) -> int:
    """_BORING (nothing to do), _PROGRESS_ONLY (at most a progress line) or _HOT (full path)
    for a folded line; conservative: when unsure, _HOT. ``keys`` may be narrowed to the ones
    present in the line's block (:func:`_block_keys`): an absent key cannot be in the line."""
    marks, keywords, progress = keys
    text = shape.decode("latin-1")  # byte for byte; the marks above are spelled that way
    if _has_any(text, marks):
        return _HOT
    if keywords:
        probe = _WORD_USAGE.sub("", text) if "usage:" in text else text
        if _has_any(probe, keywords):
            return _HOT
    return _PROGRESS_ONLY if _has_any(text, progress) else _BORING


def _block_keys(lines: list[bytes]) -> _ShapeKeys:
    """The marks and keywords that occur anywhere in a block (one pass per key over ~1 MiB):
    on input whose lines never repeat (request ids, random bytes) most keys are absent, and
    each line's check then costs a few comparisons instead of ~130."""
    text = b"\n".join(lines).translate(_FOLD).decode("latin-1")
    return (
        tuple(k for k in _HOT_MARKS if k in text),
        tuple(k for k in _SHAPE_KEYWORDS if k in text),
        tuple(k for k in _PROGRESS_KEYS if k in text),
    )


@dataclass
class _Candidate:
    line: int
    text: str
    category: Category
    hint: str
    priority: int
    dooms: bool = False  # a warning-only rule of priority 3: it explains any crash after it


def _clean(raw: str) -> str:
    if "\x1b" in raw:
        raw = _ANSI.sub("", raw)
    if "\x00" in raw:
        raw = raw.replace("\x00", "")
    return raw.rstrip("\n").rstrip("\r")


def _split_prefix(raw: str) -> tuple[str, str, bool]:
    """(body, rank tags, has_sglang_prefix) with quotes/Ray/CI decorations removed."""
    text = raw
    tags = ""
    prefixed = False
    for _ in range(6):
        m = _DECOR.match(text)
        if m and m.end() > 0:
            text = text[m.end() :]
            continue
        p = _PREFIX.match(text)
        if p:
            text = text[p.end() :]
            tags = tags or (p.group("tags") or "")
            prefixed = True
            continue
        break
    return text, tags, prefixed


class LogDiagnoser:
    """Incremental classifier: ``feed`` lines in order, read ``.diagnosis`` at any time."""

    def __init__(self) -> None:
        self.lines_seen = 0
        self._phase = State.STARTING
        self._ready_line: int | None = None
        self._last_progress_line: int | None = None
        self._last_progress: str | None = None
        self._args: dict[str, str] = {}
        self._tp_size: int | None = None
        self._patches: list[str] = []
        self._patch_ranks: set[int | str] = set()
        self._frame_ctx: Category | None = None
        self._after_frame = False  # the next non-blank line is a frame's source line
        self._strong: _Candidate | None = None  # best fatal rule match
        self._generic: _Candidate | None = None  # first exception / weak rule
        self._warning: _Candidate | None = None  # first non-fatal rule match
        self._marker: _Candidate | None = None  # first cascade marker (self-reports first)
        self._marker_is_report = False
        self._usage: _Candidate | None = None  # an argparse usage banner, until --help shows
        self._hard_marker = False  # a marker READY cannot undo (not just a logged traceback)
        self._crashed = False
        self._last_key: tuple[Any, ...] = (State.STARTING, None, None)
        self._evidence = False  # a line only SGLang (or a crashing Python) writes was seen
        self._shapes: dict[bytes, int] = {}  # feed_block's line-shape cache
        self._shape_bytes = 0

    # -- public -----------------------------------------------------------------------------

    def feed(self, line: str | bytes) -> Diagnosis | None:
        """Consume one log line; return the new diagnosis if the verdict changed, else None.

        "Changed" means a new state, or a crash verdict whose root cause was refined. A chunk
        with embedded newlines is split and counted as several lines; never raises on junk."""
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        elif not isinstance(line, str):
            line = str(line)
        if "\n" in line.rstrip("\n"):
            changed: Diagnosis | None = None
            for part in line.rstrip("\n").split("\n"):
                changed = self.feed(part) or changed
            return changed
        self.lines_seen += 1
        self._feed_one(line)
        key = self._key()
        if key != self._last_key:
            self._last_key = key
            return self.diagnosis
        return None

    def feed_block(self, lines: list[bytes]) -> None:
        """Consume complete lines (no ``\\n``) in bulk: the same verdict as :meth:`feed` on each,
        at a fraction of the cost for the lines that cannot change it.

        A long serving log is millions of "Decode batch"/access-log lines that differ only in
        their numbers. Each line is reduced to its *shape* (lower case, digits folded to 0:
        no rule keyword holds a digit) and the shape's verdict is cached: a line whose shape
        holds no keyword is skipped, and once READY, of the lines that are only progress just
        the block's last one is read (it is all ``last_progress`` keeps). Everything else, and
        every line until the start-up is over, goes through :meth:`feed`'s full path."""
        base = self.lines_seen
        shapes = self._shapes
        deferred: list[int] = []
        keys = _ALL_SHAPE_KEYS
        misses = 0  # shapes not in the cache; past _NARROW_AFTER the keys are narrowed
        for i, raw in enumerate(lines):
            if len(raw) > _SHAPE_MAX_BYTES:
                kind = _HOT
            else:
                shape = raw.translate(_FOLD)
                kind = shapes.get(shape, -1)
                if kind < 0:
                    misses += 1
                    if misses == _NARROW_AFTER:
                        keys = _block_keys(lines)
                    kind = _shape_kind(shape, keys)
                    if self._shape_bytes < _MAX_SHAPE_BYTES:
                        shapes[shape] = kind
                        self._shape_bytes += len(shape) + 100  # + the dict entry, roughly
            if kind == _BORING and not self._after_frame:
                if not self._evidence:  # only the SGLang prefix could matter on this line
                    self._evidence = _split_prefix(_clean(raw.decode("utf-8", "replace")))[2]
                continue
            if kind == _PROGRESS_ONLY and self._phase is State.READY and not self._after_frame:
                deferred.append(i)
                continue
            self.lines_seen = base + i + 1
            self._feed_one(raw.decode("utf-8", "replace"))
        for i in reversed(deferred):
            n = base + i + 1
            if self._last_progress_line is not None and n <= self._last_progress_line:
                break
            text = _clean(lines[i].decode("utf-8", "replace"))[:MAX_LINE_CHARS]
            self._progress(_split_prefix(text)[0], n)
            if self._last_progress_line == n:
                break
        self.lines_seen = base + len(lines)
        self._last_key = self._key()

    def _feed_one(self, line: str) -> None:
        """The full path for one line (``lines_seen`` already counts it)."""
        text = _clean(line)
        if len(text) > MAX_LINE_CHARS:
            keep = MAX_ARGS_LINE_CHARS if "server_args=" in text[:400] else MAX_LINE_CHARS
            text = text[:keep]
        if "\r" in text:
            for seg in text.split("\r"):
                if seg.strip():
                    self._consume(seg)
        else:
            self._consume(text)

    @property
    def diagnosis(self) -> Diagnosis:
        """The verdict so far (a fresh object; the diagnoser keeps no reference to it)."""
        best = self._root() if self._crashed else None
        d = Diagnosis(
            state=State.CRASHED if best else self._phase,
            phase=self._phase,
            last_progress_line=self._last_progress_line,
            last_progress=self._last_progress,
            patch_ranks_active=set(self._patch_ranks),
            patches=list(self._patches),
            tp_size=self._tp_size,
            ready_line=self._ready_line,
            server_args=dict(self._args),
            sglang_log=self._evidence,
        )
        if best:
            d.category, d.line, d.root_cause = best.category, best.line, best.text
            d.hint = best.hint
        elif self._warning is not None:
            w = self._warning
            d.warning = Evidence(w.line, w.text, w.category, w.hint)
        return d

    # -- internals --------------------------------------------------------------------------

    def _key(self) -> tuple[Any, ...]:
        best = self._root() if self._crashed else None
        if best:
            return (State.CRASHED, best.category, best.line)
        return (self._phase, None, None)

    def _facts(self) -> Facts:
        return Facts(args=self._args, phase=self._phase, frame_ctx=self._frame_ctx)

    def _root(self) -> _Candidate | None:
        warn = self._warning
        if warn is not None and warn.dooms:
            # A warning that dooms the start-up (a negative KV budget, a GPU this torch was not
            # built for) explains a later crash better than the crash's own lower-rank symptom;
            # a fatal rule's match on a WARNING-level line does not.
            strong = self._strong
            if strong is None or strong.priority < warn.priority:
                return warn
        return self._strong or self._generic or self._warning or self._marker

    def _consume(self, raw: str) -> None:
        body, tags, prefixed = _split_prefix(raw)
        stripped = body.strip()
        if not stripped:
            return
        n = self.lines_seen
        after_frame, self._after_frame = self._after_frame, False
        self._evidence = self._evidence or prefixed
        low = stripped.lower()
        if ("serverargs(" in low or "server_args={" in low) and _SERVER_ARGS.search(body):
            self._parse_server_args(body)
            return
        if "glmserve patch" in body:
            pa = _PATCH_ACTIVE.search(body)
            if pa:
                self._record_patch(pa, tags)
                return
        if "patches armed:" in body:
            armed = _PATCH_ARMED.search(body)
            if armed:
                for name in re.split(r"[,\s]+", armed.group("names")):
                    if name and name not in self._patches and len(self._patches) < _MAX_FACTS:
                        self._patches.append(name)
                return
        if self._usage is not None and _HELP.match(stripped):
            self._retract_usage()
            return
        if not _has_any(low, _KEYWORDS):
            if not after_frame or prefixed:  # a logger-prefixed line is never frame source
                self._progress(body, n)
            return
        if _FRAME.match(body):
            for pat, cat in _FRAME_CTX:
                if pat.search(body):
                    self._frame_ctx = cat
            self._after_frame = True
            return
        if after_frame and not prefixed and not _EXCEPTION.search(stripped):
            return  # the source line a traceback prints under a frame: code, not an error
        rule = self._match_rule(stripped)
        cascade = bool(_CASCADE.search(stripped)) and (
            rule is not None or not _REPORT.search(stripped) or bool(_TRACEBACK.search(stripped))
        )
        if rule is None and _TRACEBACK.search(stripped):
            if "Traceback" in stripped:
                self._frame_ctx = None
            # SGLang's own logger printing a traceback ("[ts TP0] Traceback ...") is a
            # process reporting its failure; before READY that means start-up failed.
            logged = prefixed and "Traceback" in stripped and self._phase is not State.READY
            hard = cascade or bool(_REPORT.search(stripped))
            if hard or logged:
                # A logged traceback alone is soft: SGLang also logs survivable failures with
                # one, so a later READY clears it (a real crash brings the sigquit cascade).
                self._add_marker(n, stripped, hard=hard)
            return
        if cascade:
            # A marker; a line flattened by a paste may also carry the error itself, so rules
            # still get to look at it.
            self._add_marker(n, stripped)
            if rule is None:
                return
        is_exc = bool(_EXCEPTION.search(stripped)) or bool(_REPORT.search(stripped))
        self._evidence = self._evidence or rule is not None or is_exc
        if rule is not None:
            rm, r = rule
            cand = _Candidate(
                n,
                stripped[:MAX_ROOT_CAUSE_CHARS],
                r.category,
                r.hint(rm, self._facts()),
                r.priority,
            )
            if is_exc:
                self._frame_ctx = None
            soft = bool(_SOFT_LEVEL.match(stripped)) and r.category is not C.PATCH_FAILED
            errorish = is_exc or bool(_ERROR_LEVEL.search(stripped))
            if not r.fatal or soft or (r.needs_error and not errorish):
                cand.dooms = not r.fatal and r.priority >= 3
                if self._stale(self._warning, n):
                    self._warning = cand
                self._maybe_crash(fatal=False)
            elif r.weak or (r.before_ready and self._phase is State.READY):
                if self._stale(self._generic, n):
                    self._generic = cand
                    if r is _USAGE_RULE:
                        self._usage = cand
                self._maybe_crash(fatal=False, exception=True)
            else:
                if self._strong is None or cand.priority > self._strong.priority:
                    self._strong = cand
                self._maybe_crash(fatal=True)
            return
        if is_exc:
            cat = self._frame_ctx or C.CRASH
            if self._stale(self._generic, n):
                self._generic = _Candidate(
                    n, stripped[:MAX_ROOT_CAUSE_CHARS], cat, self._ctx_hint(cat, stripped), 0
                )
            self._frame_ctx = None
            self._maybe_crash(fatal=False, exception=True)
            return
        self._progress(body, n)

    def _stale(self, cand: _Candidate | None, n: int) -> bool:
        """May a new candidate replace ``cand``? Only if there is none, or - after READY, with
        no crash yet - if it is an old per-request error that the server survived."""
        if cand is None:
            return True
        return (
            not self._crashed
            and self._phase is State.READY
            and n - cand.line > _POST_READY_CANDIDATE_LINES
        )

    def _ctx_hint(self, cat: Category, line: str) -> str:
        whole = re.match(r"(?P<msg>.*)", line)
        assert whole is not None
        facts = self._facts()
        if cat is C.WEIGHT_LOADING:
            return _weights_hint(whole, facts)
        if cat is C.BAD_ARGS:
            return (
                "SGLang's ServerArgs rejected the flag combination ("
                + line[:160]
                + "): fix the profile; `glmserve check` validates it."
            )
        if cat is C.COMPILE_ERROR:
            return _compile_hint(whole, facts)
        if cat is C.NCCL:
            return _nccl_hint(whole, facts)
        return _crash_hint(line, facts)

    def _match_rule(self, text: str) -> tuple[re.Match[str], Rule] | None:
        for r in RULES:
            m = r.pattern.search(text)
            if m:
                return m, r
        return None

    def _retract_usage(self) -> None:
        """The usage banner was ``--help`` output, not a rejected command line: no crash."""
        if self._generic is self._usage:
            self._generic = None
            if not (self._strong or self._warning or self._marker):
                self._crashed = False
        self._usage = None

    def _add_marker(self, n: int, text: str, *, hard: bool = True) -> None:
        self._evidence = True
        self._hard_marker = self._hard_marker or hard
        report = bool(_SELF_REPORT.search(text))
        if self._marker is None or (report and not self._marker_is_report):
            self._marker_is_report = report
            if "Killed" in text or "warmup" in text:
                hint = _crash_hint(text, self._facts())
            elif report:
                hint = (
                    "a process reported a failure but its exception line is not in the log "
                    "(cut off, or another rank's output interleaved): read the full log around "
                    "this line; --log-level debug and CUDA_LAUNCH_BLOCKING=1 narrow it down."
                )
            else:
                hint = (
                    "a child process died but the log holds no error line for it: read the "
                    "lines above; a silent SIGKILL is often the host OOM killer (dmesg)."
                )
            self._marker = _Candidate(n, text[:MAX_ROOT_CAUSE_CHARS], C.CRASH, hint, 0)
        self._crashed = True

    def _maybe_crash(self, *, fatal: bool, exception: bool = False) -> None:
        if self._crashed:
            return
        if self._phase is State.READY:
            # Per-request errors are logged with tracebacks while the server keeps serving:
            # after READY only a fatal rule or a cascade marker proves a crash.
            if fatal:
                self._crashed = True
            return
        if fatal or exception:
            self._crashed = True

    def _progress(self, body: str, n: int) -> None:
        low = body.lower()
        for keys, pat, state in _PROGRESS:
            if not _has_any(low, keys) or not pat.search(body):
                continue
            if state is State.WARMUP and _KERNEL_WARMUP.search(body):
                state = None
            # Uvicorn and "warmup" lines are any web server's words; the others are SGLang's.
            self._evidence = self._evidence or state is not State.WARMUP
            if state is not None and _RANK[state] > _RANK[self._phase]:
                self._phase = state
                if state is State.READY:
                    self._ready_line = n
                    self._on_ready()
            self._last_progress_line = n
            self._last_progress = body.strip()[:200]
            mt = _MAX_TOTAL.search(body) if "max_total_num_tokens" in low else None
            if mt:
                self._args.setdefault("max_running_requests_effective", mt.group(2))
            return

    def _on_ready(self) -> None:
        """READY proves that exceptions (and tracebacks SGLang merely logged) seen before it
        were not fatal - unless a cascade marker says a child died."""
        # uvicorn exits after a failed bind (server.py startup: logger.error(exc); await
        # lifespan.shutdown(); sys.exit(1)), but SGLang's lifespan first joins its warmup
        # thread, which polls --port and so may warm up whatever server holds it and log
        # "fired up and ready to roll" (srt/entrypoints/http_server.py lifespan,
        # _execute_server_warmup): that READY is another server's, never this one's.
        port_taken = self._strong is not None and self._strong.category is C.PORT_IN_USE
        if not self._hard_marker and not port_taken:
            self._crashed = False
            self._strong = self._generic = self._warning = self._marker = None
            self._marker_is_report = False

    def _parse_server_args(self, body: str) -> None:
        # Evidence only as SGLang logs it (the message starts with it), not quoted in prose.
        self._evidence = self._evidence or body.lstrip().startswith(("server_args=", "ServerArgs("))
        pairs = _DICT_PAIR if "server_args={" in body else _ARG_PAIR
        for k, v in pairs.findall(body):
            if k not in self._args and len(self._args) < _MAX_FACTS:
                self._args[k] = v.strip("'\"") if v[:1] in "'\"" else v
        for key in ("tp_size", "tensor_parallel_size"):
            v = self._args.get(key)
            if v and v.isdigit():
                self._tp_size = int(v)
                break

    def _record_patch(self, m: re.Match[str], tags: str) -> None:
        if len(self._patch_ranks) >= _MAX_FACTS:  # memory stays bounded on any input
            return
        name = m.group("name")
        if name not in self._patches and len(self._patches) < _MAX_FACTS:
            self._patches.append(name)
        tp = _TP_TAG.search(tags)
        inner = m.group("inner")
        if tp:
            self._patch_ranks.add(int(tp.group(1)))
            return
        r = re.search(r"\b(?:tp_)?rank[ =:]?(\d+)", inner)
        if r:
            self._patch_ranks.add(int(r.group(1)))
            return
        pid = re.search(r"\bpid[ =:]?(\d+)", inner)
        self._patch_ranks.add(f"pid{pid.group(1)}" if pid else f"line{self.lines_seen}")


def diagnose_lines(lines: Iterable[str]) -> Diagnosis:
    """Diagnose a whole log given as lines (without or with trailing newlines)."""
    d = LogDiagnoser()
    for line in lines:
        d.feed(line)
    return d.diagnosis


def diagnose_text(text: str) -> Diagnosis:
    """Diagnose a whole log. Lines are split on ``\\n`` only (``\\r`` is a tqdm redraw)."""
    return diagnose_stream([text.encode("utf-8", "surrogatepass")])


# A line longer than this is cut when read (only its first MAX_LINE_CHARS characters, or
# MAX_ARGS_LINE_CHARS of a server_args line, are ever matched), so memory stays bounded.
MAX_LINE_BYTES = 4 * MAX_ARGS_LINE_CHARS


def iter_line_blocks(
    chunks: Iterable[bytes], max_line: int = MAX_LINE_BYTES
) -> Iterator[list[bytes]]:
    """The complete lines of a byte stream, one block per chunk, without their ``\\n``.

    Holds at most one chunk plus ``max_line`` bytes: a line longer than ``max_line`` keeps its
    first ``max_line`` bytes and the rest is skipped up to its newline. A last line without a
    newline is still a line; a trailing newline does not start an empty one."""
    head = b""  # the start of a line whose newline has not been read yet
    cut = False  # head reached max_line: skip bytes until the newline
    for chunk in chunks:
        parts = chunk.split(b"\n")
        tail = parts.pop()
        if parts:
            parts[0] = head if cut else (head + parts[0])[:max_line]
            if max(map(len, parts)) > max_line:
                parts = [p[:max_line] for p in parts]
            yield parts
            head, cut = b"", False
        if not cut:
            head += tail
            if len(head) > max_line:
                head, cut = head[:max_line], True
    if head:
        yield [head]


def diagnose_stream(chunks: Iterable[bytes], evidence_within: int | None = None) -> Diagnosis:
    """Diagnose a log read as byte chunks (a file, stdin) in memory bounded by the chunk size,
    whatever the log's size (``glmserve diagnose`` of a file or stdin).

    With ``evidence_within``, stop reading once that many bytes have gone by without one SGLang
    line (``sglang_log`` stays False): a server prints its ``server_args`` line first, so input
    whose first megabytes hold none is no server log, and reading the rest (200 MB of random
    bytes takes ~24 s on a small box) only delays the refusal."""
    d = LogDiagnoser()

    def counted() -> Iterator[bytes]:
        """The chunks, until the limit passes without evidence (checked per chunk, not per
        line: junk may hold no newline at all)."""
        read, it = 0, iter(chunks)
        while evidence_within is None or read < evidence_within or d._evidence:
            chunk = next(it, None)
            if chunk is None:
                return
            read += len(chunk)
            yield chunk

    for block in iter_line_blocks(counted()):
        d.feed_block(block)
    return d.diagnosis
