"""Hint builders: what to change, worded from the matched line and the server_args facts."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from glmserve.config.spec import SM100_ONLY_ATTENTION_BACKENDS
from glmserve.diagnose.model import Category, State


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
    elif re.search(r"timeout|timed out|[Ww]atchdog|crash on rank 0", m.string, re.I):
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


# Path pieces that name the kernel library a native check came from (how its sources or
# build trees are laid out in SGLang's images and wheels): the hint names the library.
_NATIVE_LIBS = (
    (("flash-mla", "flash_mla", "flashmla"), "FlashMLA"),
    (("deep_gemm", "deepgemm", "deep-gemm"), "DeepGEMM"),
    (("deep_ep", "deepep", "deep-ep"), "DeepEP"),
    (("flashinfer", "trtllm", "tensorrt_llm"), "FlashInfer/TensorRT-LLM kernels"),
    (("sgl-kernel", "sgl_kernel"), "sgl-kernel"),
    (("cutlass",), "CUTLASS"),
    (("tilelang",), "TileLang"),
)


def native_library(path: str) -> str | None:
    """The kernel library a source path belongs to, when its directories say so."""
    low = path.lower()
    for keys, name in _NATIVE_LIBS:
        if any(k in low for k in keys):
            return name
    return None


def _native_check_hint(m: re.Match[str], _f: Facts) -> str:
    """A kernel library's own check failed: name the library, the file:line and what it said."""
    where = f"{m.group('file')}:{m.group('line')}"
    lib = native_library(m.group("file"))
    who = f"{lib} ({where})" if lib else f"a kernel library ({where})"
    said = (m.group("msg") or "").strip().rstrip(".")[:120]
    what = f": {said}" if said else ""
    if m.group("kind").startswith("Assertion"):
        return (
            f"an assertion inside {who} failed{what}; the process stops there (a device "
            "assert traps the GPU context, so later CUDA errors are its echo). A shape, dtype "
            "or checkpoint layout this build of the library does not handle: check the "
            "library version that this SGLang release pins, then try another backend "
            "(attention / MoE runner / FP8 GEMM) to route around the kernel."
        )
    check = "CUDA check" if m.group("kind").startswith("CUDA") else "error check"
    return (
        f"{who} stopped on its own {check}{what}, with no Python traceback (the library "
        "exits or aborts itself). The kernel rejected this GPU, shape or launch configuration: "
        "rerun with CUDA_LAUNCH_BLOCKING=1, check the library version that this SGLang release "
        "pins and the GPU arch it was built for, and try another backend to route around it."
    )


def _host_oom_hint(_m: re.Match[str], _f: Facts) -> str:
    return (
        "host (CPU) memory ran out, not GPU memory: check free RAM and container limits "
        "(docker --memory/--shm-size, ulimit -v/-l), and lower host-side buffers "
        "(--hicache-size, --cpu-offload-gb, weight loader threads)."
    )


def _launch_hint(m: re.Match[str], _f: Facts) -> str:
    """What bash could not do in the launch script (glmserve's ``launch.sh``: ``set -euo
    pipefail``, ``source <venv>/bin/activate``, ``exec <python> -m sglang...``), so SGLang
    never started: the fix is in the host's or profile's ``venv:``/``python:``."""
    what, why = m.group("what").strip(), m.group("why").strip()
    if what.endswith("/bin/activate"):
        lead = (
            f"the virtualenv {what[: -len('/bin/activate')]} does not exist on the host (no "
            "bin/activate): fix `venv:` in hosts.yaml or the profile"
        )
    elif what.startswith("exec: ") or re.match(
        r"(?:command )?not found|Permission denied|Is a "
        r"directory|cannot execute|Exec format",
        why,
    ):
        prog = what[len("exec: ") :] if what.startswith("exec: ") else what
        lead = (
            f"the launch script could not run {prog} ({why}): fix `python:` in hosts.yaml or "
            "the profile (a typo, or a path that is not an executable on the host)"
        )
    else:
        lead = f"the launch script failed before SGLang started ({what}: {why})"
    return (
        lead + "; `glmserve check --profile P --host H` checks the venv, python and SGLang on "
        "the host before a launch, and `--simulate` runs the same launch without SGLang or a GPU."
    )


def stage_hint(category: Category, stage: str, line: str, f: Facts) -> str:
    """A failure report cut before its exception line (or a traceback with no report line at
    all): its frames still say which start-up stage failed, and so what to look at."""
    whole = re.match(r"(?P<msg>.*)", line)
    assert whole is not None
    lead = f"a traceback without its exception line; its frames show it failed in {stage}: "
    if category is Category.NCCL:
        return lead + _nccl_hint(whole, f)
    if category is Category.WEIGHT_LOADING:
        return lead + _weights_hint(whole, f)
    if category is Category.OOM:
        return lead + "usually 'Not enough memory': " + _not_enough_memory_hint(whole, f)
    return lead + (
        "retry with --disable-cuda-graph to confirm, then a smaller --cuda-graph-max-bs or "
        "another attention backend; the full log holds the exception."
    )
