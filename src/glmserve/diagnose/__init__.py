"""Classify an SGLang server log: start-up phase, or crash category + root-cause line + hint.

Pure (no I/O) and incremental: :class:`LogDiagnoser` takes one line at a time (the watcher
feeds lines as they arrive from the remote log) in O(1) per line, and ``diagnose_lines`` /
``diagnose_text`` run it over a whole log. STALLED and EXITED need facts a log does not hold
(time, PIDs): the watcher derives them with :meth:`Diagnosis.stalled` / :meth:`Diagnosis.exited`
and :func:`phase_stall_budget`.

The package, by concern: ``model`` (State, Category, Diagnosis, stall budgets), ``normalise``
(prefixes and decorations stripped), ``hints`` (hint builders), ``rules`` (the root-cause rule
table), ``patterns`` (cascade, exception, traceback, progress and keyword patterns), ``cache``
(feed_block's line shapes), ``diagnoser`` (:class:`LogDiagnoser`), ``stream`` (whole logs),
``progress`` (what counts as progress for stall budgets and ``last_progress``).

What is recognised (reference; the tables in ``rules``/``patterns`` are the implementation)
------------------------------------------------------------------------------------------
Line handling: ANSI escapes and NULs are dropped, ``\\r``-joined tqdm redraws are read segment
by segment, lines are capped at ``MAX_LINE_CHARS``, bytes are decoded with replacement. The
SGLang prefix ``[YYYY-mm-dd HH:MM:SS TPn]`` (also ``DPn``/``PPn``/``EPn``/``ATTN_CPn`` tags,
0.3.x's time-only ``[HH:MM:SS TPn]``, a lost opening bracket) is stripped for matching and for
``root_cause`` and gives the rank. Decorations in front of it are stripped too (``_DECOR``):
markdown ``> `` quotes, Ray ``(SGLangEngine pid=N)``, CI ``[...Z]`` and kubectl timestamps,
``date | ERROR | stderr |``, the level-first ``date LEVEL pid [ DPn TPn file:line]`` of a
custom logging config (treated as SGLang's prefix), docker-compose ``name  |``, Google Cloud
Logging ``ERROR 2025-..Z``, Python logging ``date - name - LEVEL -`` and torchrun ``[rank0]:``
prefixes.
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
  count as progress (``last_progress_line``) without changing the phase. Before READY
  ``last_progress_line`` follows the watcher's stall rules (``progress.moves_on``): another
  rank's copy of a line, retry chatter and HTTP access lines do not move it; a new phase does.

Crash evidence, three kinds:
  * Root-cause rules (``RULES``: regex, category, hint builder, priority, flags). Categories
    OOM, ILLEGAL_MEMORY_ACCESS, UNSUPPORTED_ARCH, UNSUPPORTED_KV_DTYPE, NCCL, WEIGHT_LOADING,
    PORT_IN_USE, BAD_ARGS, COMPILE_ERROR, PATCH_FAILED, LAUNCH_FAILED (bash's own
    ``launch.sh: line N: what: why`` before SGLang started). Highlights: ``CUDA out of memory`` /
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
    hint), Gloo ``gloo/transport/tcp/pair.cc`` (weak NCCL), a kernel library's own check or
    assert naming its source file (``CUDA error (f.cu:111): ...``, ``Assertion failed:
    f.cuh:131, condition: ...``, ``CUDA driver error (f.hpp:72): ...``, ``Error in function
    'run' at f.cu:276``: CRASH, the hint naming the library and file; SGLang evidence alone).
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
  * Bare tracebacks (issue 20): output that is only a traceback through SGLang's code (a
    ``sglang/srt/`` frame), without a logger prefix or a "hit an exception" line, perhaps without
    its ``Traceback`` header, is a self-report (soft, before READY only). While a report's
    exception line is missing, the outermost start-up stage among its frames names the category
    (``_STAGE_FRAMES``: init_torch_distributed -> NCCL, load_model/load_weights ->
    WEIGHT_LOADING, init_memory_pool -> OOM, cuda graph capture -> CRASH with a capture hint).
    An ``NCCL WARN`` line explains a later native death (terminate, abort, segfault).

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

from glmserve.diagnose.diagnoser import LogDiagnoser
from glmserve.diagnose.model import (
    MAX_LINE_CHARS,
    MAX_ROOT_CAUSE_CHARS,
    STALL_PHASE_NAMES,
    TERMINAL_STATES,
    Category,
    Diagnosis,
    Evidence,
    State,
    phase_stall_budget,
    stall_budget,
    stall_phase,
)
from glmserve.diagnose.normalise import is_progress_line
from glmserve.diagnose.patterns import MAX_ARGS_LINE_CHARS
from glmserve.diagnose.rules import RULES, Rule
from glmserve.diagnose.stream import (
    MAX_LINE_BYTES,
    diagnose_lines,
    diagnose_stream,
    diagnose_text,
    iter_line_blocks,
)

__all__ = [
    "MAX_ARGS_LINE_CHARS",
    "MAX_LINE_BYTES",
    "MAX_LINE_CHARS",
    "MAX_ROOT_CAUSE_CHARS",
    "RULES",
    "STALL_PHASE_NAMES",
    "TERMINAL_STATES",
    "Category",
    "Diagnosis",
    "Evidence",
    "LogDiagnoser",
    "Rule",
    "State",
    "diagnose_lines",
    "diagnose_stream",
    "diagnose_text",
    "is_progress_line",
    "iter_line_blocks",
    "phase_stall_budget",
    "stall_budget",
    "stall_phase",
]
