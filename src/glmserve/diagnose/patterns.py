"""The structural patterns around the rules: cascade markers, exception and traceback
lines, frame contexts, progress markers, server_args/patch lines and the keyword prefilter."""

from __future__ import annotations

import re

from glmserve.diagnose.model import Category, State

C = Category


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


# Several processes' faulthandler dumps written at once interleave piece by piece ('File "',
# the path, '", line ', the number, ' in ', the function) into lines no frame regex matches
# (sglang issue 38849: GLM 5.3 ranks segfaulting on MI300). SGLang's scheduler enables
# faulthandler (0.5.9 srt/managers/scheduler.py:3100), which dumps only on a fatal signal, so
# such a line is frames of dying processes. Plain substring tests: cheap on every line.
def _interleaved_frames(text: str) -> bool:
    """Is this line several SGLang frames mixed together (no rule or exception on it)?"""
    return text.count("sglang/srt/") >= 2 and "File " in text and ", line" in text


# A frame of SGLang's own code: output that is only such a traceback (no logger prefix, no
# "hit an exception" line, perhaps not even its "Traceback" header) is still a crash report.
# A paste may elide the path's head ('File ".../managers/tokenizer_manager.py"', sglang issue
# 27142): SGLang's srt subpackages still name the code.
_SGLANG_FRAME = re.compile(
    r"sglang/srt/|\.\.\./(?:managers|model_executor|model_loader|mem_cache|layers|distributed"
    r"|entrypoints|speculative|disaggregation)/\w+\.py"
)
# Start-up stages a traceback's frames name, outermost first: when a report is cut before its
# exception line, the first of these among its frames says which stage failed (sglang 0.5.9
# srt/model_executor/model_runner.py: initialize -> init_torch_distributed, load_model,
# init_memory_pool, init_device_graphs/init_cuda_graphs -> cuda_graph_runner capture).
_STAGE_FRAMES: list[tuple[re.Pattern[str], Category, str]] = [
    (
        re.compile(
            r"\bin (?:init_torch_distributed|initialize_model_parallel"
            r"|init_distributed_environment)$"
        ),
        C.NCCL,
        "distributed init (init_torch_distributed)",
    ),
    (
        re.compile(
            r"\bin (?:load_model|load_weights|load_weights_and_postprocess|get_model)$"
            r"|model_loader/|weight_utils\.py"
        ),
        C.WEIGHT_LOADING,
        "model loading (load_model)",
    ),
    (
        re.compile(r"\bin (?:init_memory_pool|profile_max_num_token)$"),
        C.OOM,
        "KV cache pool allocation (init_memory_pool)",
    ),
    (
        re.compile(
            r"\bin (?:init_cuda_graphs|init_device_graphs|capture|capture_one_batch_size)$"
            r"|cuda_graph_runner\.py"
        ),
        C.CRASH,
        "CUDA graph capture",
    ),
]
# A process dying natively: after an NCCL WARN chain this is how an NCCL failure kills it.
_NATIVE_DEATH = re.compile(
    r"^terminate called after throwing|^Fatal Python error|^Segmentation fault"
    r"|Aborted \(core dumped\)"
)

# slurmstepd's notice that the scheduler ended the job (Slurm src/slurmd/slurmstepd/req.c,
# _handle_signal_container: error("*** %s ON %s CANCELLED AT %s DUE TO TIME LIMIT ***"), "DUE
# TO PREEMPTION", "DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS", "DUE TO JOB REQUEUE",
# and "*** %s ON %s CANCELLED AT %s ***" for scancel; older releases omit "ON node"). It is
# logged as "slurmstepd[-node]: error: ..." into the job's output (server.log): the process was
# killed from outside, not an SGLang error (the ``prog: error:`` argparse rule must not see it).
_SLURM_CANCEL = re.compile(
    r"\*\*\* (?P<entity>JOB|STEP) (?P<id>[\w.+]+) (?:ON (?P<node>\S+) )?CANCELLED AT (?P<at>\S+)"
    r"(?: DUE TO (?P<why>[A-Z][A-Z ]*[A-Z]))?[^*]*\*\*\*"
)
# A native /generate request answered (uvicorn's access line).
_GENERATE_OK = re.compile(r'"POST /generate HTTP/[\d.]+" 200')
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
    # The native route: SGLang's warmup sends exactly one request (0.5.9
    # srt/entrypoints/http_server.py:1757 _execute_server_warmup, one requests.post to
    # /generate), so a second one answered is a client's: the server is serving (counted in
    # the diagnoser; sglang issue 18785 showed only these and prefill batches).
    (("post /generate",), _GENERATE_OK, None),
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
# "warmup" lines that are a kernel's warmup/JIT progress, not the server's warmup request;
# DeepGEMM's budget line names neither (sglang 0.5.9 srt/layers/deep_gemm_wrapper/
# compile_utils.py:174 "Required memory for warmup: {}GB, Available memory: {}GB").
_KERNEL_WARMUP = re.compile(
    r"DeepGEMM|deep_gemm|\bJIT\b|\bkernel|autotun|\d+%\||Required memory for warmup",
    re.IGNORECASE,
)
# Markers in which a process reports its own failure; they outrank the launcher's reaction
# (sigquit, Killed, "scheduler is dead") as a root cause when no error line is present.
_SELF_REPORT = re.compile(
    r"hit an exception:|^Exception in |^Process [\w-]+(?::\d+)*:$|Initialization failed\. warmup"
    r"|^Traceback \(most recent call last\)"
)
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
    ".sh: line ", "network set up",
)  # fmt: skip


def _has_any(low: str, keys: tuple[str, ...]) -> bool:
    # A plain loop, not any(<generator>): about twice as fast over the ~100 keywords.
    for k in keys:  # noqa: SIM110
        if k in low:
            return True
    return False
