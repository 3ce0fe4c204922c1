"""The root-cause rule table: one entry per recognised failure (regex, category, hint,
priority, flags). Each entry cites the SGLang/torch source or the thread that prints it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from glmserve.diagnose.hints import (
    HintBuilder,
    _arch_hint,
    _bad_args_hint,
    _compile_hint,
    _crash_hint,
    _cuda_runtime_hint,
    _fixed,
    _host_oom_hint,
    _ima_hint,
    _launch_hint,
    _native_check_hint,
    _nccl_hint,
    _no_kernel_image_hint,
    _not_enough_memory_hint,
    _oom_hint,
    _patch_hint,
    _port_hint,
    _unbalanced_hint,
    _usage_hint,
    _weights_hint,
)
from glmserve.diagnose.model import Category


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

# What each slurmstepd "*** JOB n ON node CANCELLED AT t DUE TO X ***" reason means for the
# server (patterns._SLURM_CANCEL; Slurm src/slurmd/slurmstepd/req.c). The lifecycle names the
# same ends TIME_LIMIT / PREEMPTED / NODE_FAIL from ``scontrol show job``'s JobState.
_SLURM_ENDS = {
    "TIME LIMIT": (
        "TIME_LIMIT",
        "the job reached its time limit: raise slurm.time in hosts.yaml (or shorten the run).",
    ),
    "PREEMPTION": (
        "PREEMPTED",
        "a higher-priority job preempted it: relaunch, or use a qos/partition without "
        "preemption.",
    ),
    "NODE FAILURE": (
        "NODE_FAIL",
        "a node of the job failed or was set DOWN (slurmctld's log says why): relaunch on "
        "other nodes.",
    ),
    "JOB REQUEUE": ("REQUEUED", "the job was requeued; it runs again from the start."),
}


def slurm_end_hint(m: re.Match[str]) -> tuple[str, str]:
    """``(end, hint)`` for a slurmstepd cancellation line: why the scheduler killed the server.
    Not a crash of SGLang: the server was killed from outside, so the verdict is EXITED."""
    why = m.group("why")
    entity = f"Slurm {m.group('entity').lower()} {m.group('id')}"
    if why in _SLURM_ENDS:
        end, what = _SLURM_ENDS[why]
        return end, f"{entity} was cancelled by the scheduler ({end}): {what}"
    if why:
        return "CANCELLED", f"{entity} was cancelled by the scheduler (due to {why.lower()})."
    return (
        "CANCELLED",
        f"{entity} was cancelled (scancel or `glmserve stop`), not a crash of the server: "
        "`scontrol show job` / `sacct -j` say by whom.",
    )

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
    # bash's own error in the launch script ("launch.sh: line 6: /v/bin/activate: No such file
    # or directory", "launch.sh: line 10: exec: pythn3: not found"): under `set -euo pipefail`
    # the script exits there, so SGLang never started (issue 20 #9). bash prints
    # "<script>: line N: <what>: <why>" (error.c, internal_error/file_error).
    _r(
        r"^(?:[\w.~/+-]*\.(?:sh|bash)|(?:/usr)?(?:/bin/)?(?:ba)?sh): line \d+: "
        r"(?P<what>.+?): (?P<why>No such file or directory|(?:command )?not found"
        r"|Permission denied|Is a directory|cannot execute(?:: .+| binary file.*)?"
        r"|Exec format error|bad interpreter.*|unbound variable|syntax error.*)$",
        C.LAUNCH_FAILED,
        _launch_hint,
        3,
        before_ready=True,
    ),
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
    # NCCL's own warnings (src/misc/socket.cc, transport/*.cc): "NCCL WARN Cuda failure ...",
    # "socketPollConnect: Connect to 10.0.0.4<56849> returned 113(No route to host)" (sglang
    # issue 3820), "socketProgress: Connection closed by remote peer" (nccl-tests issue 166).
    _r(
        r"NCCL WARN .{0,200}(?:fail|error|abort|timeout|refused|closed by|reset by|no route"
        r"|unreachable|truncated|returned \d+\()",
        C.NCCL,
        _nccl_hint,
        fatal=False,
        flags=_I,
    ),
    # torch's ProcessGroupNCCL broadcastUniqueNCCLID (torch 2.5 ProcessGroupNCCL.cpp): a rank
    # waited in the store for rank 0's NCCL id: "... got error: <store timeout>. This may
    # indicate a possible application crash on rank 0 or a network set up issue." (weak: it
    # usually follows another rank's death; sglang issue 9867 logs it after a slow warmup).
    _r(
        r"This may indicate a possible application crash on rank 0 or a network set up issue",
        C.NCCL,
        _nccl_hint,
        weak=True,
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
        # DeepGEMM's JIT (csrc/jit/compiler.hpp: DG_HOST_ASSERT(false and "NVCC compilation
        # failed"), as deepseek-ai/DeepGEMM#173 and sglang#9340 show it)
        r"|NVCC compilation failed"
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
    # A kernel library's own failure report, printed by its C++/CUDA check macros (not by
    # torch or SGLang) with the source file and line: the flash-attention family's CHECK_CUDA,
    # fprintf(stderr, "CUDA error (%s:%d): %s", __FILE__, __LINE__, ...) then exit(1) (NATTEN
    # csrc/include/natten/cuda/flash_fmha/flash_kernel/cuda_check.h; FlashMLA logs it so in
    # sglang#25620); DeepGEMM/DeepEP's DG_/EP_DEVICE_ASSERT and DG_HOST_ASSERT, printf(
    # "Assertion failed: %s:%d, condition: %s", ...) then a trap or throw (sglang#29993);
    # DeepGEMM's DG_CUDA_DRIVER_CHECK / DG_CUDA_RUNTIME_CHECK and DGException ("CUDA driver
    # error (file:line): code (NAME, msg)", "Assertion error (file:line): cond"); FlashInfer's
    # FLASHINFER_ERROR ("Error in function 'f' at file:line: msg"). The check exits or traps
    # the process, so the line is the crash even with no SGLang line around it. The rules
    # above still name a known failure on such a line (illegal address, no kernel image,
    # unsupported architecture, out of memory); this one names the library and the file.
    _r(
        r"(?P<kind>CUDA (?:driver |runtime )?error \(|Assertion error \(|Assertion failed: "
        r"|Error in function '\w+' at )"
        r"(?P<file>[^\s():,]+\.(?:cu|cuh|cpp|cc|cxx|c|h|hpp|hxx))"
        r":(?P<line>\d+)(?:, condition:|\)?:?)\s*(?P<msg>.*)",
        C.CRASH,
        _native_check_hint,
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
