#!/usr/bin/env python3
"""The ``mla_fp8_decode`` patch's flashinfer path on a GPU, against real FlashInfer, without
SGLang's GPU build (issue 26: "not yet run on any GPU").

SGLang itself cannot be imported on the device machine (its import chain needs sgl_kernel and
the server's packages), so this runs the parts of SGLang 0.5.9's own
``flashinfer_mla_backend.py`` that the decode path uses, compiled from the released file (its
sha256 is checked by the patch), in a module of their own:

* ``FlashInferMLAAttnBackend.__init__`` (``skip_prefill=True``), ``init_forward_metadata``,
  ``init_cuda_graph_state``, ``init_forward_metadata_capture_cuda_graph``,
  ``init_forward_metadata_replay_cuda_graph`` and ``forward_decode``;
* ``FlashInferMLAIndicesUpdaterDecode``, ``DecodeMetadata`` and ``fast_mla_decode_plan``;
* ``create_flashinfer_kv_indices_triton`` from the release's ``attention/utils.py``.

Their sglang imports are replaced by what they are on one NVIDIA GPU at TP 1 (attention TP
size 1, not SM100, the workspace size of 0.5.9's default). FlashInfer is the real 0.6.3
``BatchMLAPagedAttentionWrapper``; the model runner, the KV pool and the forward batch are
stand-ins holding real CUDA tensors. The patch is applied with its own ``apply`` (rewrite
of ``forward_decode``, wrapped updater and ``__init__``), as the import hook does.

Checks, each against a float64 reference on the same FP8 values:

1. eager decode, patched: the kernel runs (FlashInfer's ``run`` does not), error < 2e-2;
2. the same batch unpatched (the release's ``forward_decode``): FlashInfer on the whole pool
   cast to BF16; its error, for comparison;
3. a wrapper planned outside the updater: the patched decode falls back to cast + FlashInfer;
4. SGLang's CUDA-graph path: capture ``forward_decode`` after the release's capture metadata,
   then replay twice after the release's replay metadata with new lengths and slots; and
   the same capture unpatched. Replay times (median, CUDA events) of both.

    python3 benchmarks/mla_fp8_flashinfer_path_gpu.py --release-file F --utils-file U --json out
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
import traceback
import types
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from glmserve.runtime.glmserve_runtime.kernels import mla_fp8_decode as mk
from glmserve.runtime.glmserve_runtime.patches import mla_fp8_flashinfer as fi

TARGET = "sglang.srt.layers.attention.flashinfer_mla_backend"
BACKEND_NAMES = {"DecodeMetadata", "FlashInferMLAAttnBackend",
                 "FlashInferMLAIndicesUpdaterDecode", "fast_mla_decode_plan"}  # fmt: skip
HEADS = 16
SCALE = 576**-0.5
WORKSPACE = 384 << 20  # SGLANG_FLASHINFER_WORKSPACE_SIZE's default in 0.5.9


def _select(path: Path, names: set[str]) -> types.CodeType:
    """The named top-level classes/functions of a file (and its __future__ import), compiled
    with the file's name and line numbers (Triton's jit reads the source from there)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    body = [n for n in tree.body
            if (isinstance(n, ast.ImportFrom) and n.module == "__future__")
            or (isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name in names)]  # fmt: skip
    found = {n.name for n in body if not isinstance(n, ast.ImportFrom)}
    if found != names:
        raise SystemExit(f"{path}: missing {sorted(names - found)}")
    return compile(ast.Module(body=body, type_ignores=[]), str(path), "exec", dont_inherit=True)


class _Env:
    def __init__(self, value) -> None:
        self.value = value

    def get(self):
        return self.value


class AttentionBackend:
    """Stand-in for sglang's abstract base (its __init__ does nothing either)."""


def load_release(release_file: Path, utils_file: Path) -> types.ModuleType:
    import flashinfer
    import triton
    import triton.language as tl

    utils = types.ModuleType("sglang.srt.layers.attention.utils")
    utils.__dict__.update(torch=torch, triton=triton, tl=tl)
    exec(_select(utils_file, {"create_flashinfer_kv_indices_triton"}), vars(utils))
    mod = types.ModuleType(TARGET)
    mod.__file__ = str(release_file)
    sys.modules[TARGET] = mod  # dataclasses look the defining module up
    mod.__dict__.update(
        torch=torch, partial=partial, dataclass=__import__("dataclasses").dataclass,
        Optional=__import__("typing").Optional, Union=__import__("typing").Union,
        AttentionBackend=AttentionBackend,
        BatchMLAPagedAttentionWrapper=flashinfer.BatchMLAPagedAttentionWrapper,
        BatchPrefillWithRaggedKVCacheWrapper=flashinfer.BatchPrefillWithRaggedKVCacheWrapper,
        create_flashinfer_kv_indices_triton=utils.create_flashinfer_kv_indices_triton,
        envs=SimpleNamespace(SGLANG_FLASHINFER_WORKSPACE_SIZE=_Env(WORKSPACE)),
        get_attention_tp_size=lambda: 1, is_sm100_supported=lambda: False,
        global_workspace_buffer=None,
    )  # fmt: skip
    exec(_select(release_file, BACKEND_NAMES), vars(mod))
    return mod


class Pool:
    """The KV pool as forward_decode reads it (``get_key_buffer``): real FP8 CUDA rows."""

    def __init__(self, rows: int, seed: int) -> None:
        g = torch.Generator(device="cuda").manual_seed(seed)
        buf = torch.randn((rows, 1, 576), device="cuda", generator=g) * 0.7
        self.buf = buf.to(torch.float8_e4m3fn)

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.buf


DECODE = SimpleNamespace(is_decode_or_idle=lambda: True, is_decode=lambda: True)


def make_runner(pool: Pool, max_bs: int, max_ctx: int) -> SimpleNamespace:
    return SimpleNamespace(
        model_config=SimpleNamespace(
            context_len=max_ctx, num_attention_heads=HEADS, qk_nope_head_dim=128,
            qk_rope_head_dim=64, v_head_dim=512, kv_lora_rank=512, scaling=SCALE,
        ),
        device="cuda", page_size=1, dtype=torch.bfloat16, kv_cache_dtype=torch.float8_e4m3fn,
        req_to_token_pool=SimpleNamespace(
            size=max_bs, req_to_token=torch.zeros((max_bs, max_ctx), dtype=torch.int32,
                                                  device="cuda")),
        token_to_kv_pool=pool,
    )  # fmt: skip


def fill_requests(runner, lens: list[int], seed: int) -> SimpleNamespace:
    """Distinct random slots for each request (in req_to_token), and a decode batch."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    rows = runner.token_to_kv_pool.buf.shape[0]
    slots = torch.randperm(rows - 1, device="cuda", generator=g)[: sum(lens)] + 1
    table = runner.req_to_token_pool.req_to_token
    pos = 0
    for r, n in enumerate(lens):
        table[r, :n] = slots[pos : pos + n].to(torch.int32)
        pos += n
    seq_lens = torch.tensor(lens, dtype=torch.int64, device="cuda")
    indptr = torch.zeros(len(lens) + 1, dtype=torch.int32, device="cuda")
    indptr[1:] = torch.cumsum(seq_lens, 0)
    return SimpleNamespace(
        forward_mode=DECODE, req_pool_indices=torch.arange(len(lens), device="cuda"),
        seq_lens=seq_lens, seq_lens_cpu=seq_lens.cpu(), seq_lens_sum=sum(lens),
        token_to_kv_pool=runner.token_to_kv_pool, out_cache_loc=None, spec_info=None,
        ref_indptr=indptr, ref_slots=slots.to(torch.int32),
    )  # fmt: skip


def layer() -> SimpleNamespace:
    return SimpleNamespace(layer_id=0, tp_q_head_num=HEADS, tp_k_head_num=1, v_head_dim=512,
                           head_dim=576, logit_cap=0.0, scaling=SCALE)  # fmt: skip


def err(out: torch.Tensor, fb, q: torch.Tensor) -> float:
    ref = mk.reference(q.view(-1, HEADS, 576), fb.token_to_kv_pool.buf, fb.ref_indptr,
                       fb.ref_slots, SCALE)  # fmt: skip
    return mk.max_rel_err(out.view(-1, HEADS, 512), ref)


def count_runs(wrapper, counter: dict) -> None:
    """Count FlashInfer ``run`` calls on this wrapper (eager; not under capture)."""
    inner = wrapper.run

    def run(*a, **k):
        counter["runs"] = counter.get("runs", 0) + 1
        return inner(*a, **k)

    wrapper.run = run


def replay_us(graph: torch.cuda.CUDAGraph, iters: int = 50) -> float:
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(iters):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def graph_case(mod, runner, patched: bool, lens0, replays, res: dict, tag: str) -> None:
    """SGLang's decode CUDA-graph path for one batch size, with the release's metadata calls."""
    backend = mod.FlashInferMLAAttnBackend(runner, skip_prefill=True)
    bs = len(lens0)
    backend.init_cuda_graph_state(runner.req_to_token_pool.size, runner.req_to_token_pool.size)
    fb = fill_requests(runner, lens0, 100)
    backend.init_forward_metadata_capture_cuda_graph(
        bs, bs, fb.req_pool_indices, fb.seq_lens, None, DECODE, None)  # fmt: skip
    q = torch.empty((bs, HEADS * 576), dtype=torch.bfloat16, device="cuda")
    q.copy_(torch.randn(q.shape, device="cuda"))
    st = getattr(backend, "_glmserve_mla_fp8", None)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            backend.forward_decode(q, None, None, layer(), fb, save_kv_cache=False)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = backend.forward_decode(q, None, None, layer(), fb, save_kv_cache=False)
    entry: dict = {"batch": bs, "capture_lens": lens0, "replays": []}
    if st is not None:
        entry["fast_calls_incl_capture"] = st.fast_calls
        entry["fallback_calls"] = st.fallback_calls
    for i, lens in enumerate(replays):
        fb = fill_requests(runner, lens, 200 + i)
        backend.init_forward_metadata_replay_cuda_graph(
            bs, fb.req_pool_indices, fb.seq_lens, fb.seq_lens_sum, None, DECODE, None,
            fb.seq_lens_cpu)  # fmt: skip
        q.copy_(torch.randn(q.shape, device="cuda"))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        entry["replays"].append({"lens": lens, "max_rel_err": err(out, fb, q),
                                 "nan": bool(torch.isnan(out).any())})  # fmt: skip
    entry["replay_us"] = replay_us(graph)
    res[tag] = entry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release-file", type=Path, required=True,
                    help="0.5.9 flashinfer_mla_backend.py")  # fmt: skip
    ap.add_argument("--utils-file", type=Path, required=True,
                    help="0.5.9 sglang/srt/layers/attention/utils.py")  # fmt: skip
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()
    import flashinfer

    res: dict = {"flashinfer": flashinfer.__version__, "gpu": torch.cuda.get_device_name(0),
                 "torch": torch.__version__, "command": " ".join(sys.argv)}  # fmt: skip
    failures: list[str] = []

    def check(name: str, ok: bool, detail) -> None:
        res.setdefault("checks", []).append({"check": name, "ok": bool(ok), "detail": detail})
        print(("PASS " if ok else "FAIL ") + name + f": {detail}", flush=True)
        if not ok:
            failures.append(name)

    pool = Pool(200_000, 1)
    max_bs, max_ctx = 16, 12_000
    # unpatched first: the release's own code on real FlashInfer
    plain = load_release(args.release_file, args.utils_file)
    patched = load_release(args.release_file, args.utils_file)
    res["version"] = fi.apply(patched, "0.5.9")
    runner = make_runner(pool, max_bs, max_ctx)
    lens = [5, 130, 1, 77, 2048, 9000, 300, 4096]
    try:
        for tag, mod in (("unpatched", plain), ("patched", patched)):
            backend = mod.FlashInferMLAAttnBackend(runner, skip_prefill=True)
            counter: dict = {}
            count_runs(backend.decode_wrapper, counter)
            fb = fill_requests(runner, lens, 7)
            backend.init_forward_metadata(fb)
            torch.manual_seed(11)  # the same batch and query both ways
            q = torch.randn((len(lens), HEADS * 576), device="cuda").to(torch.bfloat16)
            out = backend.forward_decode(q, None, None, layer(), fb, save_kv_cache=False)
            torch.cuda.synchronize()
            st = getattr(backend, "_glmserve_mla_fp8", None)
            res[f"eager_{tag}"] = {
                "max_rel_err": err(out, fb, q), "flashinfer_runs": counter.get("runs", 0),
                "fast_calls": st.fast_calls if st else None,
            }  # fmt: skip
        e_p, e_u = res["eager_patched"], res["eager_unpatched"]
        check("eager patched decode runs the kernel, not FlashInfer",
              e_p["fast_calls"] == 1 and e_p["flashinfer_runs"] == 0, e_p)  # fmt: skip
        check("eager patched error < 2e-2", e_p["max_rel_err"] < 2e-2, e_p["max_rel_err"])
        check("unpatched runs FlashInfer (cast pool)", e_u["flashinfer_runs"] == 1, e_u)
        check("patched error <= 1.5x FlashInfer-on-BF16's",
              e_p["max_rel_err"] <= 1.5 * e_u["max_rel_err"] + 1e-3,
              (e_p["max_rel_err"], e_u["max_rel_err"]))  # fmt: skip
        # a wrapper planned outside the updater: the release's own path
        backend = patched.FlashInferMLAAttnBackend(runner, skip_prefill=True)
        fb = fill_requests(runner, lens, 8)
        other = flashinfer.BatchMLAPagedAttentionWrapper(backend.workspace_buffer, backend="auto")
        counter = {}
        count_runs(other, counter)
        qo = torch.arange(len(lens) + 1, dtype=torch.int32, device="cuda")
        other.plan(qo, fb.ref_indptr, fb.ref_slots, fb.seq_lens.to(torch.int32), HEADS, 512, 64,
                   1, False, SCALE, torch.bfloat16, torch.bfloat16)  # fmt: skip
        backend.forward_metadata = patched.DecodeMetadata(other)
        q = torch.randn((len(lens), HEADS * 576), device="cuda").to(torch.bfloat16)
        out = backend.forward_decode(q, None, None, layer(), fb, save_kv_cache=False)
        st = backend._glmserve_mla_fp8
        fbk = {"fallback_calls": st.fallback_calls, "fast_calls": st.fast_calls,
               "flashinfer_runs": counter.get("runs", 0),
               "max_rel_err": err(out, fb, q)}  # fmt: skip
        res["fallback_unrecorded_wrapper"] = fbk
        check("unrecorded wrapper falls back to cast + FlashInfer",
              fbk["fallback_calls"] == 1 and fbk["fast_calls"] == 0
              and fbk["flashinfer_runs"] == 1 and fbk["max_rel_err"] < 2e-2, fbk)  # fmt: skip
    except Exception:
        traceback.print_exc()
        failures.append("eager: exception")
    replays = [[3000, 5, 1, 9000, 64, 64, 700, 11000], [64, 64, 64, 64, 64, 64, 64, 64]]
    for tag, mod in (("graph_unpatched", plain), ("graph_patched", patched)):
        try:
            graph_case(mod, runner, tag == "graph_patched", [100, 2000, 1, 9000, 5, 77, 300, 4096],
                       replays, res, tag)  # fmt: skip
            g = res[tag]
            ok = all(r["max_rel_err"] < 2e-2 and not r["nan"] for r in g["replays"])
            check(f"{tag}: replays with new lengths and slots are right", ok, g)
        except Exception:
            traceback.print_exc()
            failures.append(f"{tag}: exception")
    if "graph_patched" in res:
        g = res["graph_patched"]
        captured = g.get("fallback_calls") == 0 and g.get("fast_calls_incl_capture", 0) >= 1
        check("graph_patched: the kernel was captured (no fallback)", captured, g)
    res["failures"] = failures
    args.json.write_text(json.dumps(res, indent=1, default=str))
    print(json.dumps({k: res[k] for k in res if k.startswith(("graph", "eager", "fallback"))},
                     indent=1, default=str))  # fmt: skip
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
