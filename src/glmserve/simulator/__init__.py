"""A stand-in for ``python -m sglang.launch_server`` that needs no GPU.

Matched against sglang 0.5.9 (PyPI wheel ``sglang-0.5.9-py3-none-any.whl``): argv (the
modelled flags' option strings, types and choices), log lines (``model_runner.py``,
``memory_pool.py``, ``scheduler.py``, ``scheduler_metrics_mixin.py``, ``http_server.py``,
``engine.py``), HTTP and SSE shapes (``http_server.py``, ``tokenizer_manager.py``,
``openai/serving_*.py``), metric names (``metrics/collector.py``) and profiler file names
(``scheduler_profiler_mixin.py``).

Run it as ``python -m glmserve.simulator <sglang flags> [--sim-* options]`` or
``glmserve simulate ...``. Timing comes from ``costmodel`` (formula in its docstring and in
``--sim-help``); faults from ``faults``; ground truth at ``GET /sim/trace`` and the effective
model at ``GET /sim/config``.
"""

from __future__ import annotations

import asyncio
import re
import sys

from glmserve.errors import SimUsageError
from glmserve.simulator import costmodel
from glmserve.simulator.options import CRASH_KINDS, PHASES


def _plain(doc: str) -> str:
    """A reStructuredText docstring as terminal text: a literal block's ``::`` ends in one
    colon and ````name```` loses its double backticks (the docstring stays valid RST)."""
    return doc.replace("::\n", ":\n").replace("``", "`")


SIM_HELP = f"""\
usage: glmserve simulate --model-path MODEL [sglang flags...] [--sim-* options]
       python -m glmserve.simulator --model-path MODEL [sglang flags...] [--sim-* options]

glmserve simulate: SGLang 0.5.9-compatible server simulator (no GPU needed).

Examples:
  glmserve simulate --model-path lukealonso/GLM-5-NVFP4 --tp-size 8 --port 30000
  glmserve simulate --model-path glm-5 --attention-backend trtllm_mla  # warmup dies
  glmserve simulate --model-path glm-5 \\
    --sim-crash-at after-ready:30 --sim-crash-kind oom
  GLMSERVE_PATCHES=flashinfer_mla_gather_cast \\
    glmserve simulate --model-path glm-5 --sim-speed 10
  curl localhost:30000/sim/config  # effective cost model, single-stream step terms

Every sglang.launch_server flag is accepted; these are modelled: --model-path/--model,
--served-model-name, --host, --port (30000), --tp-size/--tp, --max-running-requests,
--max-total-tokens, --mem-fraction-static, --attention-backend, --kv-cache-dtype,
--disable-cuda-graph (or --cuda-graph-max-bs 0, or the newer
--cuda-graph-backend-decode disabled), --cuda-graph-max-bs, --chunked-prefill-size,
--num-continuous-decode-steps (accepted and ignored, as SGLang 0.5.9 does), --enable-metrics,
--context-length, --max-prefill-tokens, --decode-log-interval,
--skip-server-warmup, --stream-output, --nnodes, --node-rank, --dist-init-addr,
--max-queued-requests (a request that finds the waiting queue full is aborted: "The request
queue is full.", status 503). Others are listed once in the log. With --nnodes N > 1 and
--node-rank > 0 only this node's scheduler ranks start (TP ranks node_rank*tp/N ...) and no
HTTP port is bound (SGLang answers a dummy /health there; the simulator binds nothing so
several nodes can share one machine).

Simulator options:
  --sim-speed X               run X times faster than real time (steps and phases)
  --sim-tokens-per-chunk K    SGLang's --stream-interval: the first token alone, then K per
                              SSE chunk (default 1)
  --sim-load-seconds S, --sim-kv-seconds S, --sim-graphs-seconds S, --sim-warmup-seconds S
  --sim-gpu-arch sm120|sm100|sm90   (trtllm_mla, cutlass_mla crash at warmup unless sm100)
  --sim-sglang-version V      version reported and logged (0.5.9)
  --sim-crash-at PHASE        {"|".join(PHASES)}|after-ready:SECONDS (wall seconds)
  --sim-crash-kind KIND       {" | ".join(CRASH_KINDS)}
  --sim-hang-at PHASE         stop logging at PHASE, never become ready
  --sim-worker-death-after S  S wall seconds after ready a worker dies: the process stays
                              up, in-flight requests stall, /health turns 503
  --sim-fault-node-rank R     the fault options above apply only on --node-rank R (a
                              multi-node group where one node fails); other nodes start
  --sim-send-threads N        threads that write SSE chunks (default 0: the event loop)
  --sim-output-fault F        F is KIND[=D][@BACKEND[/KV]]: garble[=P] | drift[=NATS] the
                              greedy text (textmodel.py) when the backend/KV dtype match
  --sim-run-variation SD      each run (busy period after 0.1 s idle) exp(|N(0,SD)|) slower
  --sim-step-jitter SD        each step's duration times exp(|N(0,SD)|) (both >= 1: never
                              faster than the cost model)
  --sim-variation-seed N      the same variation sequence on every server with that seed
  --sim-abort-after-tokens N  abort each request once it has N tokens, as SGLang's
                              /abort_request does (finish_reason {{"type": "abort", ...}},
                              then [DONE]); --sim-abort-every K: only every K-th request
  --sim-config FILE.yaml      cost-model overrides (field: value)
  --sim-<field> VALUE         one cost-model field, e.g. --sim-bandwidth-gbps 1500
                              ({", ".join(costmodel.CostModel.field_names())})
  --sim-help                  this text

Endpoints: SGLang's /health /health_generate /model_info /server_info /v1/models /generate
/v1/completions /v1/chat/completions /start_profile /stop_profile /flush_cache /metrics,
plus GET /sim/trace[?rid=ID&since_step=N&requests=0] (per-token generation and emission
times on the server's perf_counter clock, step log) and GET /sim/config (effective model).

Env: GLMSERVE_PATCHES=flashinfer_mla_gather_cast drops the whole-pool cast term (each rank
logs the patch activation line); SGLANG_HEALTH_CHECK_TIMEOUT (20) and
SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION behave as in SGLang.

Exit status, as SGLang's launcher ends: 137 for a crash (a scheduler reports "Scheduler hit
an exception", the launcher SIGKILLs its tree); 1 when the port is in use (uvicorn's bind
error) or a scheduler dies silently during init (nccl_timeout: "Rank N scheduler is dead",
EOFError); 2 for bad arguments (argparse). nccl_timeout at warmup/after-ready kills a worker
without the launcher noticing: warmup times out after 600 s (scaled) and the launcher
SIGKILLs itself; after start-up the process stays up and /health turns 503.

Cost model:

{_plain(costmodel.__doc__ or "")}"""


# An option row: "  --sim-speed X" then two or more spaces, then its description.
_OPTION_ROW = re.compile(r"^(\s+--\S.*?\s{2,})\S")


def _join_option_rows(lines: list[str]) -> list[str]:
    """Lines with a description's continuation lines (those starting at the row's description
    column) joined onto their row, so the row re-wraps as one."""
    out: list[str] = []
    col = None
    for line in lines:
        lead = len(line) - len(line.lstrip())
        if col is not None and line.strip() and lead == col:
            out[-1] += " " + line.strip()
            continue
        row = _OPTION_ROW.match(line)
        col = len(row.group(1)) if row else None
        out.append(line)
    return out


def sim_help(width: int | None = None) -> str:
    """``SIM_HELP`` laid out for a terminal ``width`` columns wide (default: this one's).

    Written as one text (options, endpoints, the cost model's docstring), whose prose was
    wrapped at ~90 columns by hand: shown as written, 80 columns got ragged half-lines and
    lines past the edge. Here, as argparse's ``HelpFormatter`` does and
    ``RawDescriptionHelpFormatter`` does not, a prose paragraph is re-wrapped to the width;
    a block (an indented line, or a first line ending in ``:`` such as "Examples:") keeps its
    lines, and a block line too wide is broken at a space with a deeper hanging indent.
    """
    import shutil
    import textwrap

    width = width or shutil.get_terminal_size().columns
    out: list[str] = []
    for para in SIM_HELP.strip("\n").split("\n\n"):
        lines = para.split("\n")
        if lines[0].rstrip().endswith(":") or any(ln[:1].isspace() for ln in lines):
            for line in _join_option_rows(lines):
                row = _OPTION_ROW.match(line)
                col = len(row.group(1)) if row else len(line) - len(line.lstrip()) + 4
                if col > width // 2:  # a formula's trailing note: hang under its start
                    lead = len(line) - len(line.lstrip())
                    col = lead + 4 if lead else 0
                out += textwrap.wrap(
                    line, width, subsequent_indent=" " * col, break_on_hyphens=False
                ) or [""]
        else:
            out += textwrap.wrap(" ".join(lines), width, break_on_hyphens=False)
        out.append("")
    return "\n".join(out)


def check_args(argv: list[str]) -> int:
    """Parse ``argv`` as a launch would, start nothing: 0, or 2 with one line saying what
    is wrong (``glmserve check``/``launch --simulate`` call this on the host before
    launching, so a bad flag is a usage error there and not a crash after the start)."""
    import contextlib
    import io

    from glmserve.simulator import options

    buf = io.StringIO()
    try:
        with contextlib.redirect_stderr(buf):
            options.parse(list(argv))
    except SimUsageError as exc:
        print(f"error: {exc}")
        return 2
    except SystemExit as exc:  # argparse: usage, then "prog: error: ..."
        if not exc.code:
            return 0
        lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
        print(lines[-1].split(": ", 1)[-1] if lines else f"argument error ({exc.code})")
        return 2
    except Exception as exc:  # a value no check caught yet: still one line, not a traceback
        print(f"error: {type(exc).__name__}: {exc}".replace("\n", " "))
        return 2
    print("ok")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m glmserve.simulator``; returns the process exit status."""
    from glmserve.simulator import options
    from glmserve.simulator.server import SimServer

    args = list(sys.argv[1:] if argv is None else argv)
    if "--sim-help" in args:
        sys.stdout.write(sim_help())
        return 0
    try:
        opts = options.parse(args)
    except SimUsageError as exc:
        sys.stderr.write(f"glmserve simulate: error: {exc}\n")
        return 2
    try:
        return asyncio.run(SimServer(opts).run())
    except KeyboardInterrupt:
        return 0
