"""Command line of the simulator: ``sglang.launch_server`` flags plus ``--sim-*`` options.

SGLang's flags are parsed with argparse the way SGLang 0.5.9 parses them (same option
strings, types and choices for the flags the simulator models), so a bad value fails with
argparse's usage + error text and exit status 2, as the real launcher does (``launch
--simulate`` logs it and ``diagnose`` reads it like a real server.log, so this is kept on
purpose). Flags it does not model are accepted (real profiles carry dozens) and listed once in
the log. The ``--sim-*`` options are glmserve's own: a bad one is one line naming it
(``SimUsageError``), not argparse's usage block.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from glmserve.errors import SimUsageError
from glmserve.simulator import costmodel
from glmserve.simulator.costmodel import CostModel, ServerShape
from glmserve.simulator.textmodel import parse_fault

MAX_PORT = 65535
PROG = "launch_server.py"  # what argparse prints for `python -m sglang.launch_server`

# sglang 0.5.9 server_args.ATTENTION_BACKEND_CHOICES
ATTENTION_BACKEND_CHOICES = [
    "triton",
    "torch_native",
    "flex_attention",
    "nsa",
    "cutlass_mla",
    "fa3",
    "fa4",
    "flashinfer",
    "flashmla",
    "trtllm_mla",
    "trtllm_mha",
    "dual_chunk_flash_attn",
    "aiter",
    "wave",
    "intel_amx",
    "ascend",
    "intel_xpu",
]
KV_CACHE_DTYPE_CHOICES = ["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"]

PHASES = ["load", "kv", "graphs", "warmup"]
CRASH_KINDS = [
    "oom",
    "kv_no_memory",
    "flashinfer_fp8_static_assert",
    "no_kernel_image",
    "tllm_unsupported_arch",
    "nccl_timeout",
    "illegal_memory_access",
    "port_in_use",
    "bad_args",
    "xqa_multi_ctas_buffer",
    "xqa_mla_bf16",
]
# Where each crash kind happens when --sim-crash-at is not given.
NATURAL_PHASE = {
    "oom": "kv",
    "kv_no_memory": "kv",
    "flashinfer_fp8_static_assert": "warmup",
    "no_kernel_image": "graphs",
    "tllm_unsupported_arch": "warmup",
    "nccl_timeout": "load",
    "illegal_memory_access": "warmup",
    "port_in_use": "serve",
    "bad_args": "args",
    "xqa_multi_ctas_buffer": "warmup",
    "xqa_mla_bf16": "warmup",
}
# What fails at each phase when only --sim-crash-at is given.
NATURAL_KIND = {
    "load": "oom",
    "kv": "oom",
    "graphs": "illegal_memory_access",
    "warmup": "illegal_memory_access",
    "after-ready": "illegal_memory_access",
}


def sglang_parser() -> argparse.ArgumentParser:
    """The subset of SGLang 0.5.9's ``ServerArgs.add_cli_args`` the simulator models."""
    p = argparse.ArgumentParser(
        prog=PROG, add_help=True, epilog="glmserve simulator: --sim-help lists the --sim-* options."
    )
    p.add_argument("--model-path", "--model", dest="model_path", type=str, required=True)
    p.add_argument("--tokenizer-path", type=str, default=None)
    p.add_argument("--served-model-name", type=str, default=None)
    p.add_argument("--host", type=str, default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument(
        "--tensor-parallel-size", "--tp-size", "--tp", dest="tp_size", type=int, default=1
    )
    p.add_argument("--max-running-requests", type=int, default=None)
    # sglang 0.5.9 server_args.py:3150-3155; over it a new request is aborted (engine.py)
    p.add_argument("--max-queued-requests", type=int, default=None)
    p.add_argument("--max-total-tokens", type=int, default=None)
    p.add_argument("--mem-fraction-static", type=float, default=None)
    p.add_argument("--attention-backend", type=str, choices=ATTENTION_BACKEND_CHOICES, default=None)
    p.add_argument(
        "--prefill-attention-backend", type=str, choices=ATTENTION_BACKEND_CHOICES, default=None
    )
    p.add_argument(
        "--decode-attention-backend", type=str, choices=ATTENTION_BACKEND_CHOICES, default=None
    )
    p.add_argument("--triton-attention-num-kv-splits", type=int, default=8)  # server_args.py:614
    p.add_argument("--kv-cache-dtype", type=str, choices=KV_CACHE_DTYPE_CHOICES, default="auto")
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--dtype", type=str, default="auto")
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--cuda-graph-max-bs", type=int, default=None)
    # newer releases (0.5.2x): --disable-cuda-graph deprecated for per-phase graph backends
    p.add_argument("--cuda-graph-backend-decode", type=str, default=None)
    p.add_argument("--num-continuous-decode-steps", type=int, default=1)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--context-length", type=int, default=None)
    p.add_argument("--chunked-prefill-size", type=int, default=None)
    p.add_argument("--max-prefill-tokens", type=int, default=16384)
    p.add_argument("--decode-log-interval", type=int, default=40)
    p.add_argument("--skip-server-warmup", action="store_true")
    p.add_argument("--stream-output", action="store_true")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--log-level", type=str, default="info")
    p.add_argument("--random-seed", type=int, default=None)
    # multi-node (sglang 0.5.9 server_args): node 0 serves HTTP, others run schedulers only
    p.add_argument("--dist-init-addr", "--nccl-init-addr", type=str, default=None)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    return p


class _SimArgumentParser(argparse.ArgumentParser):
    """argparse for the ``--sim-*`` options, whose errors are glmserve's, not SGLang's: argparse's
    message ("argument --sim-speed: invalid float value: 'abc'") as one SimUsageError line
    instead of a 40-line usage block on stderr and ``sys.exit(2)``."""

    def error(self, message: str) -> NoReturn:
        raise SimUsageError(message)


def sim_parser() -> argparse.ArgumentParser:
    """``--sim-*`` options: phases, faults, time scale, cost-model overrides."""
    p = _SimArgumentParser(prog="glmserve simulate", add_help=False)
    p.add_argument("--sim-help", action="store_true")
    p.add_argument("--sim-config", type=str, default=None)
    p.add_argument("--sim-speed", type=float, default=1.0)
    p.add_argument("--sim-tokens-per-chunk", type=int, default=1)
    p.add_argument("--sim-load-seconds", type=float, default=1.5)
    p.add_argument("--sim-kv-seconds", type=float, default=0.3)
    p.add_argument("--sim-graphs-seconds", type=float, default=1.0)
    p.add_argument("--sim-warmup-seconds", type=float, default=0.5)
    p.add_argument("--sim-gpu-arch", type=str, default="sm120", choices=["sm90", "sm100", "sm120"])
    p.add_argument("--sim-sglang-version", type=str, default="0.5.9")
    p.add_argument("--sim-crash-at", type=str, default=None)
    p.add_argument("--sim-crash-kind", type=str, default=None, choices=CRASH_KINDS)
    p.add_argument("--sim-hang-at", type=str, default=None, choices=[*PHASES, "serve"])
    p.add_argument("--sim-worker-death-after", type=float, default=None)
    p.add_argument("--sim-fault-node-rank", type=int, default=None)
    p.add_argument("--sim-send-threads", type=int, default=0)
    p.add_argument("--sim-abort-after-tokens", type=int, default=None)
    p.add_argument("--sim-abort-every", type=int, default=1)
    p.add_argument("--sim-trace-max-requests", type=int, default=20000)
    p.add_argument("--sim-trace-ids", action="store_true")
    p.add_argument("--sim-trace-max-steps", type=int, default=200000)
    p.add_argument("--sim-output-fault", type=str, default=None)  # simulator/textmodel.py
    p.add_argument("--sim-run-variation", type=float, default=0.0)  # simulator/variation.py
    p.add_argument("--sim-step-jitter", type=float, default=0.0)
    p.add_argument("--sim-variation-seed", type=int, default=None)
    for name in CostModel.field_names():
        p.add_argument("--sim-" + name.replace("_", "-"), dest="cm_" + name, default=None)
    return p


@dataclass
class SimOptions:
    """Everything the simulator needs, resolved once from argv + env + optional YAML."""

    server: argparse.Namespace
    unknown: list[str]
    model: CostModel
    shape: ServerShape
    speed: float = 1.0
    tokens_per_chunk: int = 1
    phase_seconds: dict[str, float] = field(default_factory=dict)
    gpu_arch: str = "sm120"
    sglang_version: str = "0.5.9"
    crash_at: str | None = None  # load|kv|graphs|warmup|after-ready|serve|args
    crash_after_s: float = 0.0  # for after-ready
    crash_kind: str | None = None
    hang_at: str | None = None
    worker_death_after: float | None = None
    # Fault: every ``abort_every``-th request is aborted once it has ``abort_after_tokens``
    # tokens, as SGLang's /abort_request ends a running request (engine.py)
    abort_after_tokens: int | None = None
    abort_every: int = 1
    trace_max_requests: int = 20000
    # --sim-trace-ids: /sim/trace keeps each token-id request's prompt ids as received and
    # its reply ids (ground truth for multi-turn tests: the reply appears in the next prompt)
    trace_ids: bool = False
    send_threads: int = 0
    trace_max_steps: int = 200000
    patches: tuple[str, ...] = ()
    output_fault: Any = None  # textmodel.OutputFault (--sim-output-fault)
    run_variation: float = 0.0  # variation.py: SD of log(each run's slow-down factor >= 1)
    step_jitter: float = 0.0  # variation.py: SD of log(each step's slow-down factor >= 1)
    variation_seed: int | None = None

    @property
    def served_model_name(self) -> str:
        return self.server.served_model_name or self.server.model_path

    @property
    def max_running_requests(self) -> int:
        v = self.server.max_running_requests
        return int(v) if v else 2048

    @property
    def pool_tokens(self) -> int:
        if self.server.max_total_tokens:
            return int(self.server.max_total_tokens)
        return costmodel.pool_tokens(self.model, self.shape)

    def server_args(self) -> dict[str, Any]:
        """ServerArgs as SGLang holds them once defaults are resolved: what the start-up line
        ``server_args=ServerArgs(...)`` and ``/server_info`` print."""
        s = vars(self.server).copy()
        s["served_model_name"] = self.served_model_name
        s["tokenizer_path"] = s.get("tokenizer_path") or s["model_path"]
        s["attention_backend"] = self.shape.attention_backend
        s["mem_fraction_static"] = self.shape.mem_fraction_static
        s["max_running_requests"] = self.max_running_requests
        s["context_length"] = s.get("context_length") or self.model.context_len
        return s


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Separate ``--sim-*`` options (and their values) from SGLang's flags."""
    sim_flags = {a for act in sim_parser()._actions for a in act.option_strings}
    sglang, sim = [], []
    i = 0
    while i < len(argv):
        tok = argv[i]
        name = tok.split("=", 1)[0]
        if name.startswith("--sim-"):
            if name not in sim_flags:
                raise SimUsageError(f"unknown simulator option {name} (see --sim-help)")
            sim.append(tok)
            takes_value = name not in ("--sim-help", "--sim-trace-ids")  # the two flags
            if takes_value and "=" not in tok:
                if i + 1 >= len(argv):
                    raise SimUsageError(f"{name} needs a value")
                sim.append(argv[i + 1])
                i += 1
        else:
            sglang.append(tok)
        i += 1
    return sglang, sim


def load_yaml_overrides(path: str) -> dict[str, Any]:
    """Cost-model overrides from a YAML mapping (``field: value``), read as every hand-written
    YAML of glmserve is (``config.yamlload``: a regular file of bounded size, SafeLoader,
    bounded nesting and aliases): a FIFO hung here, and ``[[[[...`` was exit 70."""
    from glmserve.config.yamlload import load_yaml, read_config_text
    from glmserve.errors import ConfigError

    try:
        text = read_config_text(Path(path), "cost-model file", missing="no such file")
        data = load_yaml(text, path, "invalid YAML")[0] or {}
    except ConfigError as exc:
        raise SimUsageError(f"--sim-config {exc}") from exc
    if not isinstance(data, dict):
        raise SimUsageError(f"--sim-config {path}: expected a mapping of cost-model fields")
    return data


def build_cost_model(sim: argparse.Namespace) -> CostModel:
    """Defaults, then ``--sim-config`` YAML, then ``--sim-<field>`` flags (last wins)."""
    model = CostModel()
    if sim.sim_config:
        for key, raw in load_yaml_overrides(sim.sim_config).items():
            name = str(key).replace("-", "_")
            try:
                setattr(model, name, costmodel.coerce_field(name, raw))
            except KeyError as exc:
                raise SimUsageError(
                    f"--sim-config {sim.sim_config}: unknown field {key!r} "
                    f"(valid: {', '.join(CostModel.field_names())})"
                ) from exc
            except (TypeError, ValueError) as exc:
                raise SimUsageError(f"--sim-config {sim.sim_config}: bad value for {key}") from exc
    for name in CostModel.field_names():
        raw = getattr(sim, "cm_" + name)
        if raw is None:
            continue
        try:
            setattr(model, name, costmodel.coerce_field(name, raw))
        except (TypeError, ValueError) as exc:
            flag = "--sim-" + name.replace("_", "-")
            why = f" ({exc})" if isinstance(exc, ValueError) and ":" in str(exc) else ""
            raise SimUsageError(f"{flag}: bad value {raw!r}{why}") from exc
    return model


def _graph_max_bs(server: argparse.Namespace) -> int:
    """``--cuda-graph-max-bs``, else SGLang 0.5.9's default for a 96 GB GPU: 512 at TP >= 4,
    256 below (server_args.py:976-985)."""
    if server.cuda_graph_max_bs:
        return int(server.cuda_graph_max_bs)
    return 512 if server.tp_size >= 4 else 256


def check_port(port: int) -> None:
    """Refuse a ``--port`` no socket can bind before the start-up runs: argparse takes any
    int, and ``bind()`` only fails with OverflowError after the whole simulated start-up.
    Port 0 (any free port) is refused too: nothing could reach the server on the port the
    log and the run record name."""
    if not 1 <= port <= MAX_PORT:
        raise SimUsageError(f"--port {port}: must be a TCP port between 1 and {MAX_PORT}")


def active_patches(env: dict[str, str] | None = None) -> tuple[str, ...]:
    raw = (env if env is not None else os.environ).get("GLMSERVE_PATCHES", "")
    return tuple(p for p in re.split(r"[,;:\s]+", raw) if p)


def _env_true(env: dict[str, str] | None, name: str) -> bool:
    """SGLang's get_bool_env_var: "true" or "1" (case-insensitive) is true."""
    raw = (env if env is not None else os.environ).get(name, "false")
    return raw.strip().lower() in ("true", "1")


def triton_max_kv_splits(version: str, flag: int, sm_count: int, context_len: int) -> int:
    """The most KV splits SGLang's Triton MLA decode may use. 0.5.9: the flag
    (triton_backend.py:111; still so in 0.5.10 and 0.5.11). From 0.5.12 (checked 0.5.12,
    0.5.15-0.5.19, 0.5.21, 0.5.23) MLA raises it to max(flag, min(next_pow2(SMs),
    next_pow2(ceil(context_len / 32)))) (0.5.23 triton_backend.py:83-90, 327-333)."""
    from glmserve.argspec.releases import version_key

    try:
        newer = version_key(version) >= version_key("0.5.12")
    except ValueError:
        newer = False
    if not newer or sm_count <= 0:
        return flag

    def pow2(n: int) -> int:
        return 1 << max(0, (max(1, n) - 1).bit_length())

    return max(flag, min(pow2(sm_count), pow2(-(-context_len // 32))))


def backend_outcome(
    shape: ServerShape, gpu_arch: str, version: str
) -> tuple[str | None, str | None]:
    """(crash kind, phase) the backend facts table gives this launch on ``gpu_arch`` under
    ``version`` (argspec/backend_table.py), or (None, None) when it runs or is not known.
    Refused at start-up: phase "args"; a role's first forward: warmup."""
    from glmserve.argspec.backend_facts import lookup

    roles = {"prefill": shape.prefill_backend or shape.attention_backend,
             "decode": shape.decode_attention}  # fmt: skip
    found = []
    for role, backend in roles.items():
        row = lookup(backend, role, gpu_arch, version, shape.kv_cache_dtype)
        if row is not None and row.outcome in ("refused", "crash") and row.crash_kind:
            found.append((role, row))
    if not found:
        return None, None
    refused = [row for _role, row in found if row.outcome == "refused"]
    if refused:
        return refused[0].crash_kind, "args"
    # the warmup request prefills first: a prefill crash comes before a decode one. With CUDA
    # graphs on, real SGLang meets a decode crash already at capture; the simulator keeps it
    # at warmup, where its templates carry the attention backend's frames.
    _role, row = sorted(found, key=lambda f: f[0] != "prefill")[0]
    return row.crash_kind, "warmup"


def _check_numbers(sim: argparse.Namespace, server: argparse.Namespace) -> None:
    """The numbers the simulator runs on are finite and in range: argparse's ``float``
    takes ``nan`` and ``inf``, which would start a server whose figures are nonsense (a NaN
    speed made an audit's bench report 68,498 tok/s) or that dies later for no stated reason."""
    # (flag, value, lowest, highest, whether the lowest itself is refused): one message per
    # flag, so `--sim-speed -1` does not say ">= 0" when 0 is refused too.
    checks: list[tuple[str, float | None, float, float, bool]] = [
        ("--sim-speed", sim.sim_speed, 0.0, math.inf, True),
        ("--sim-load-seconds", sim.sim_load_seconds, 0.0, math.inf, False),
        ("--sim-kv-seconds", sim.sim_kv_seconds, 0.0, math.inf, False),
        ("--sim-graphs-seconds", sim.sim_graphs_seconds, 0.0, math.inf, False),
        ("--sim-warmup-seconds", sim.sim_warmup_seconds, 0.0, math.inf, False),
        ("--sim-worker-death-after", sim.sim_worker_death_after, 0.0, math.inf, False),
        ("--sim-run-variation", sim.sim_run_variation, 0.0, 1.0, False),
        ("--sim-step-jitter", sim.sim_step_jitter, 0.0, 1.0, False),
    ]
    for flag, value, lo, hi, strict in checks:
        if value is not None and not (
            math.isfinite(value) and (value > lo if strict else value >= lo)
        ):
            bound = f"> {lo:g}" if strict else f">= {lo:g}"
            raise SimUsageError(f"{flag}: expected a finite number {bound}, got {value!r}")
        # a spread of SD 50 multiplied a step by exp(N(0, 50)): a server stalled for ages
        if value is not None and value > hi:
            raise SimUsageError(f"{flag}: expected a number within [{lo:g}, {hi:g}], got {value!r}")
    # SGLang takes any float here; a fraction past the GPU is modelled (CUDA OOM at start),
    # but NaN/inf/<= 0 would only surface as an unrelated error deep in pool sizing.
    mfs = server.mem_fraction_static
    if mfs is not None and not (math.isfinite(mfs) and mfs > 0):
        raise SimUsageError(f"--mem-fraction-static: expected a finite number > 0, got {mfs!r}")


def parse(argv: list[str], env: dict[str, str] | None = None) -> SimOptions:
    """argv -> SimOptions. SGLang flag errors exit 2 via argparse (as SGLang does);
    ``--sim-*`` errors and a ``--port`` no socket can bind raise SimUsageError."""
    sglang_argv, sim_argv = split_argv(argv)
    sim = sim_parser().parse_args(sim_argv)
    server, unknown = sglang_parser().parse_known_args(sglang_argv)
    check_port(server.port)
    model = build_cost_model(sim)
    patches = active_patches(env)
    cuda_graph = not (
        server.disable_cuda_graph
        or server.cuda_graph_max_bs == 0
        or (server.cuda_graph_backend_decode or "").lower() in ("disabled", "none")
    )
    if server.triton_attention_num_kv_splits < 1:
        raise SimUsageError(
            "--triton-attention-num-kv-splits: must be >= 1, got "
            f"{server.triton_attention_num_kv_splits}"
        )
    shape = ServerShape(
        attention_backend=costmodel.resolve_backend(
            server.attention_backend,
            server.prefill_attention_backend,
            server.decode_attention_backend,
            sim.sim_gpu_arch,
        ),
        decode_backend=server.decode_attention_backend,
        prefill_backend=server.prefill_attention_backend,
        max_kv_splits=triton_max_kv_splits(
            sim.sim_sglang_version,
            server.triton_attention_num_kv_splits,
            model.sm_count,
            server.context_length or model.context_len,
        ),
        static_kv_splits=_env_true(env, "SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS"),
        kv_cache_dtype=costmodel.resolve_kv_dtype(server.kv_cache_dtype),
        cuda_graph=cuda_graph,
        num_continuous_decode_steps=max(1, server.num_continuous_decode_steps),
        mem_fraction_static=server.mem_fraction_static or 0.92,
        patches=patches,
        cuda_graph_max_bs=_graph_max_bs(server),
        chunked_prefill_size=8192
        if server.chunked_prefill_size is None
        else server.chunked_prefill_size,
    )
    _check_numbers(sim, server)
    if sim.sim_tokens_per_chunk < 1:
        raise SimUsageError("--sim-tokens-per-chunk must be >= 1")
    if sim.sim_abort_after_tokens is not None and sim.sim_abort_after_tokens < 1:
        # SGLang's abort of a running request still runs one forward (scheduler.py:2833):
        # at least one token; a request aborted before any is --max-queued-requests' case
        raise SimUsageError("--sim-abort-after-tokens must be >= 1")
    if sim.sim_abort_every < 1:
        raise SimUsageError("--sim-abort-every must be >= 1")
    mq = server.max_queued_requests
    if mq is not None and mq < 1:
        # SGLang asserts it at start-up (0.5.9 managers/tp_worker.py:283-286)
        raise SimUsageError(
            f"--max-queued-requests {mq}: must be at least 1 for any work to be scheduled"
        )
    crash_at, crash_after = None, 0.0
    if sim.sim_crash_at:
        crash_at = sim.sim_crash_at
        if crash_at.startswith("after-ready"):
            _, _, secs = crash_at.partition(":")
            try:
                crash_after = float(secs) if secs else 0.0
            except ValueError as exc:
                raise SimUsageError(f"--sim-crash-at {crash_at}: want after-ready:SECONDS") from exc
            crash_at = "after-ready"
        elif crash_at not in PHASES:
            raise SimUsageError(
                f"--sim-crash-at {crash_at}: choose from {', '.join(PHASES)}, after-ready:SECONDS"
            )
    kind = sim.sim_crash_kind
    if not kind and not crash_at and costmodel.startup_oom(model, shape):
        # the flags ask for more than the modelled GPU holds: fail where SGLang would. No
        # KV pool left after the weights (--mem-fraction-static too low): its own refusal at
        # pool sizing; else CUDA OOM at graph capture or the warmup forward.
        if costmodel.pool_tokens(model, shape) <= 0:
            kind, crash_at = "kv_no_memory", "kv"
        else:
            kind, crash_at = "oom", ("graphs" if cuda_graph else "warmup")
    if crash_at and not kind:
        kind = NATURAL_KIND[crash_at]
    if kind and not crash_at:
        crash_at = NATURAL_PHASE[kind]
        if crash_at == "graphs" and not cuda_graph:
            crash_at = "warmup"  # no capture to fail in: the first forward fails instead
    for flag, phase in (("--sim-crash-at", sim.sim_crash_at), ("--sim-hang-at", sim.sim_hang_at)):
        if phase == "graphs" and not cuda_graph:
            raise SimUsageError(f"{flag} graphs: CUDA graphs are disabled, nothing is captured")
    hang_at, worker_death = sim.sim_hang_at, sim.sim_worker_death_after
    if sim.sim_fault_node_rank is not None and sim.sim_fault_node_rank != server.node_rank:
        # The faults target one node of a multi-node group; this node starts cleanly.
        crash_at, kind, hang_at, worker_death = None, None, None, None
    if not kind and not crash_at:
        # what the backend facts say this backend does on this GPU and release
        kind, crash_at = backend_outcome(shape, sim.sim_gpu_arch, sim.sim_sglang_version)
    phase_seconds = {
        "load": sim.sim_load_seconds,
        "kv": sim.sim_kv_seconds,
        "graphs": sim.sim_graphs_seconds,
        "warmup": sim.sim_warmup_seconds,
    }
    return SimOptions(
        server=server,
        unknown=unknown,
        model=model,
        shape=shape,
        speed=sim.sim_speed,
        tokens_per_chunk=sim.sim_tokens_per_chunk,
        phase_seconds=phase_seconds,
        gpu_arch=sim.sim_gpu_arch,
        sglang_version=sim.sim_sglang_version,
        crash_at=crash_at,
        crash_after_s=crash_after,
        crash_kind=kind,
        hang_at=hang_at,
        worker_death_after=worker_death,
        abort_after_tokens=sim.sim_abort_after_tokens,
        abort_every=sim.sim_abort_every,
        trace_max_requests=sim.sim_trace_max_requests,
        trace_ids=sim.sim_trace_ids,
        send_threads=max(0, sim.sim_send_threads),
        trace_max_steps=sim.sim_trace_max_steps,
        patches=patches,
        output_fault=parse_fault(sim.sim_output_fault),
        run_variation=sim.sim_run_variation,
        step_jitter=sim.sim_step_jitter,
        variation_seed=sim.sim_variation_seed,
    )
