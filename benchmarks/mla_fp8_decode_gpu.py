#!/usr/bin/env python3
"""One MLA decode layer over an FP8 KV pool, every way at once (issue 26 #3, issue 23 #4).

Per (heads, batch, context): a plain copy of the same FP8 bytes (bandwidth reference);
whole-pool cast + FlashInfer MLA; gather-then-cast (the shipped patch's kernel) + FlashInfer;
SGLang's Triton decode kernel from the real ``decode_attention.py`` of 0.5.9 and 0.5.23 at
``num_kv_splits`` 8/16/32/64; the new FP8-native kernel. Max relative error of each against
a float64 reference on the same FP8 values; CUDA-graph device time at the small shapes.

Timing: the L2 (60 MB) is flushed by writing a 512 MB buffer before every call; CUDA events
around the call alone; median of ``--iters`` (>= 20) after warm-up. KV rows are random
distinct slots of a 495K-row pool (worst-case scatter).

SGLang's files are loaded from paths (not installed): the few helpers they import from
sglang (``is_hip`` & co, ``envs``, 0.5.23's ``score_mod``) are stubbed with the values they
take on an NVIDIA GPU, and the rest of each file is SGLang's code as released.

    python3 benchmarks/mla_fp8_decode_gpu.py --sglang-059 .gpu/sg059_decode_attention.py \\
        --sglang-0523 .gpu/sg0523_decode_attention.py --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import importlib.util
import json
import platform
import statistics
import subprocess
import sys
import traceback
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from glmserve.runtime.glmserve_runtime.kernels import gather_cast as gc
from glmserve.runtime.glmserve_runtime.kernels import mla_fp8_decode as mk

POOL = 495_000
SCALE = 576**-0.5
SHAPES = [(1, 2048), (1, 8192), (1, 32768), (8, 2048), (8, 8192), (8, 32768),
          (64, 2048), (64, 7680), (256, 1917)]  # fmt: skip
SPLITS = (8, 16, 32, 64)
GRAPH_SHAPES = {(1, 2048), (1, 8192), (1, 32768), (8, 2048), (8, 8192), (64, 2048),
                (2, 4096), (2, 16384), (4, 4096), (4, 16384)}  # fmt: skip


# ---------------------------------------------------------------------------------- timing
class Timer:
    def __init__(self, iters: int) -> None:
        self.iters = iters
        self.flush_buf = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")

    def flush(self) -> None:
        self.flush_buf.zero_()

    def eager(self, fn) -> float:
        """Median microseconds of ``fn()`` with a cold L2."""
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(self.iters):
            self.flush()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e3)
        return statistics.median(times)

    def graph(self, fn) -> float:
        """Median microseconds of one replay of a CUDA graph holding ``fn()`` (cold L2)."""
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        return self.eager(g.replay)


def copy_bandwidth() -> float:
    """Device-to-device copy, bytes read + written per second (2 GiB, L2 irrelevant)."""
    src = torch.randint(0, 255, (2 << 30,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = Timer(10).eager(lambda: dst.copy_(src))
    return 2 * (2 << 30) / (us * 1e-6)


# ----------------------------------------------------------------------- SGLang's kernels
def _stub(name: str, **attrs) -> types.ModuleType:
    mod = sys.modules.get(name) or types.ModuleType(name)
    mod.__path__ = getattr(mod, "__path__", [])
    for k, v in attrs.items():
        setattr(mod, k, v)
    sys.modules[name] = mod
    return mod


class _Env:
    def __init__(self, value) -> None:
        self.value = value

    def get(self):
        return self.value


class _Envs:
    def __getattr__(self, name):
        return _Env(False)


def load_sglang(path: Path, tag: str, score_mod: Path | None):
    """Exec SGLang's decode_attention.py with its sglang imports stubbed (NVIDIA values)."""
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    for name in ("sglang", "sglang.srt", "sglang.kernels", "sglang.kernels.ops",
                 "sglang.kernels.ops.attention", "sglang.srt.layers"):  # fmt: skip
        _stub(name)
    no = lambda *a: False  # noqa: E731
    _stub("sglang.srt.utils", is_hip=no, is_gfx95_supported=no, is_gfx1250_supported=no,
          get_device_core_count=lambda *a: sm_count)  # fmt: skip
    _stub("sglang.srt.environ", envs=_Envs())
    if score_mod is not None:
        spec = importlib.util.spec_from_file_location(
            "sglang.kernels.ops.attention.score_mod", score_mod
        )
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    spec = importlib.util.spec_from_file_location(f"_sglang_decode_{tag}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def sglang_call(mod, tag, q, pool, o, indptr, idx, splits):
    b, h = q.shape[0], q.shape[1]
    logits = torch.empty((b, h, splits, 512), dtype=torch.float32, device="cuda")
    lse = torch.empty((b, h, splits), dtype=torch.float32, device="cuda")
    nks = torch.full((b,), splits, dtype=torch.int32, device="cuda")
    v = pool[..., :512]
    if tag == "0.5.9":
        return lambda: mod.decode_attention_fwd(
            q, pool, v, o, indptr, idx, logits, lse, nks, splits, SCALE
        )
    return lambda: mod.decode_attention_fwd(
        q, pool, v, o, indptr, idx, logits, lse, nks, splits, SCALE, 1.0, 1.0, has_mla=True
    )


# ------------------------------------------------------------------------------ FlashInfer
def flashinfer_wrapper(flashinfer, indptr, idx, b, h):
    ws = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    w = flashinfer.mla.BatchMLAPagedAttentionWrapper(ws, backend="auto")
    qo = torch.arange(b + 1, dtype=torch.int32, device="cuda")
    lens = (indptr[1:] - indptr[:-1]).to(torch.int32)
    w.plan(qo, indptr, idx, lens, h, 512, 64, 1, False, SCALE, torch.bfloat16, torch.bfloat16)
    w._keep = ws
    return w


def xqa_probe(flashinfer) -> str:
    """Does FlashInfer run its XQA MLA decode on this GPU? (0.6.3 refuses off sm_120.)"""
    try:
        q = torch.zeros((1, 1, 128, 576), dtype=torch.float8_e4m3fn, device="cuda")
        kv = torch.zeros((64, 576), dtype=torch.float8_e4m3fn, device="cuda")
        out = torch.empty((1, 1, 128, 512), dtype=torch.bfloat16, device="cuda")
        # flashinfer/__init__.py re-exports the function ``xqa`` over the module's name,
        # so the module is fetched from sys.modules
        importlib.import_module("flashinfer.xqa").xqa_mla(
            q, kv, kv, torch.zeros((1, 1), dtype=torch.int32, device="cuda"),
            torch.ones((1, 1), dtype=torch.uint32, device="cuda"), out,
            torch.zeros(16 << 20, dtype=torch.uint8, device="cuda"),
            torch.zeros(1 << 20, dtype=torch.uint32, device="cuda"), 64,
        )  # fmt: skip
        return "ran"
    except Exception as e:
        return f"{type(e).__name__}: {e}"


# ------------------------------------------------------------------------------------ main
def run_shape(args, timer, pool, flat_pool, heads, b, ctx, sg, fi, sweep) -> dict:
    n = b * ctx
    g = torch.Generator(device="cuda").manual_seed(heads * 1000 + b)
    idx = torch.randperm(POOL, device="cuda", generator=g)[:n].to(torch.int32)
    indptr = torch.arange(0, n + 1, ctx, dtype=torch.int32, device="cuda")
    q = torch.randn((b, heads, 576), device="cuda", generator=g).to(torch.bfloat16)
    ref = mk.reference(q, pool, indptr, idx, SCALE)
    res: dict = {"heads": heads, "batch": b, "ctx": ctx, "rows": n, "fp8_bytes": n * 576}
    o = torch.empty((b, heads, 512), dtype=torch.bfloat16, device="cuda")

    def record(name, fn, graph=False):
        try:
            o.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            err = mk.max_rel_err(o, ref)
            entry = {"us": timer.eager(fn), "max_rel_err": err}
            if graph:
                entry["graph_us"] = timer.graph(fn)
            res[name] = entry
        except Exception as e:
            res[name] = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
            traceback.print_exc()

    dst = torch.empty(n * 576, dtype=torch.uint8, device="cuda")
    src = flat_pool[: n * 576]
    res["copy"] = {"us": timer.eager(lambda: dst.copy_(src))}
    is_graph = (b, ctx) in GRAPH_SHAPES
    # the new kernel (default config), then the sweep
    ws = mk.Workspace()
    over = json.loads(args.new_config) if args.new_config else None
    record("new", lambda: mk.mla_fp8_decode(q, pool, indptr, idx, SCALE, out=o, workspace=ws,
                                            config=over), graph=is_graph)  # fmt: skip
    res["new"]["config"] = {**mk.default_config(b, heads, q.device).__dict__, **(over or {})}
    for i, cfg in enumerate(sweep):
        record(f"new_cfg{i}", lambda cfg=cfg: mk.mla_fp8_decode(
            q, pool, indptr, idx, SCALE, out=o, workspace=ws, config=cfg),
            graph=is_graph and args.graph_sweep)  # fmt: skip
        res[f"new_cfg{i}"]["config"] = cfg
    for tag, mod in sg.items():
        for s in SPLITS:
            record(f"sglang_{tag}_s{s}", sglang_call(mod, tag, q, pool, o, indptr, idx, s))
        ok = [s for s in SPLITS if "us" in res.get(f"sglang_{tag}_s{s}", {})]
        if ok:
            best = min(ok, key=lambda s: res[f"sglang_{tag}_s{s}"]["us"])
            res[f"sglang_{tag}_best_splits"] = best
            if is_graph:
                try:
                    res[f"sglang_{tag}_s{best}"]["graph_us"] = timer.graph(
                        sglang_call(mod, tag, q, pool, o, indptr, idx, best)
                    )
                except Exception as e:
                    res[f"sglang_{tag}_graph_error"] = str(e)[:300]
    if fi is not None:
        qn, qr = q[..., :512], q[..., 512:]
        try:
            w_all = flashinfer_wrapper(fi, indptr, idx, b, heads)

            def whole():
                kv = pool.to(torch.bfloat16)
                w_all.run(qn, qr, kv[..., :512], kv[..., 512:], out=o)

            record("fi_whole_pool", whole)
            compact = torch.empty((n, 1, 576), dtype=torch.bfloat16, device="cuda")
            ident = torch.arange(n, dtype=torch.int32, device="cuda")
            w_cmp = flashinfer_wrapper(fi, indptr, ident, b, heads)
            fused = gc.FusedGatherCast()

            def gather():
                fused(pool, idx, compact, n)
                w_cmp.run(qn, qr, compact[..., :512], compact[..., 512:], out=o)

            record("fi_gather_cast", gather)
            del compact
        except Exception as e:
            res["fi_error"] = f"{type(e).__name__}: {e}"[:300]
            traceback.print_exc()
    return res


def sweep_configs(heads: int, b: int, which: str = "v1") -> list[dict]:
    base = mk.default_config(b, heads, torch.device("cuda"))
    if which == "v2":
        return sweep_v2(base)
    if which == "v3":
        return sweep_v3(base)
    if which == "v4":
        return sweep_v4(base)
    if which == "v5":
        return sweep_v5(base)
    if which == "v6":
        return sweep_v6(base)
    out = []
    for bn in (16, 32, 64):
        for warps in (4, 8):
            for prefetch in (True, False):
                out.append({"block_n": bn, "num_warps": warps, "prefetch": prefetch})
    for f in (0.25, 0.5, 2, 4):
        out.append({"max_splits": max(1, min(256, int(base.max_splits * f)))})
    for mc in (32, 64, 256, 512):
        out.append({"min_chunk": mc})
    return out


def sweep_v6(base) -> list[dict]:
    """Sixth sweep (run 4, last call): the shipped default (pipelined, rows a tile ahead)
    again (entry 0: the noise), run 3's shipped config (entry 1), the pipelined kernel
    without ``rows_ahead`` (entry 2: run 4's first candidate), with 64-token splits, and
    with 8 warps (one program an SM by registers, as the shipped one would run on sm_120,
    whose ~100 KB of shared memory an SM holds one 92 KB program)."""
    v5 = sweep_v5(base)
    p = {**v5[2], "rows_ahead": False}  # explicit: a missing key takes the default's
    return [{}, v5[1], p, {**v5[2], "min_chunk": 64}, {**v5[2], "num_warps": 8}]


def sweep_v5(base) -> list[dict]:
    """Fifth sweep (run 4, verification call): the new default (pipelined 4-warp stage 1,
    two programs per SM from batch 2) again (entry 0: the noise) beside run 3's shipped
    config (entry 1: FP16, 64 rows, 8 warps, hand prefetch, one program per SM from batch
    2) and variants of the pipelined kernel: token slots loaded by hand a tile ahead
    (``rows_ahead``: the FP8 rows get ``pipe - 1`` shared-memory buffers instead of one;
    entry 3 with ``pipe=4``, 110 KB of shared memory, fits sm_90 only), 16-row tiles,
    one program per SM, and the minimum split length."""
    old_splits = max(1, base.max_splits // 2) if base.pipe else base.max_splits
    old = {"pipe": 0, "fp16": True, "block_n": 64, "num_warps": 8, "prefetch": 1,
           "max_splits": old_splits, "min_chunk": 128}  # fmt: skip
    if not base.pipe:  # batch 1 / > 16 heads: the default is run 3's kernel already
        old = {**old, "block_n": base.block_n, "fp16": base.fp16}
    p = {"fp16": True, "pipe": 3, "block_n": 32, "num_warps": 4, "asm_cvt": 1,
         "max_splits": base.max_splits}  # fmt: skip
    a = {**p, "rows_ahead": True}
    return [
        {}, old,
        a, {**a, "pipe": 4}, {**a, "block_n": 16, "pipe": 5},
        {**p, "max_splits": old_splits},
        {**a, "min_chunk": 64}, {**p, "min_chunk": 256},
    ]  # fmt: skip


def sweep_v4(base) -> list[dict]:
    """Fourth sweep (run 4): the software-pipelined stage 1 (``pipe``: token slots and FP8
    rows as plain loads in a ``tl.range(num_stages=...)`` loop, which Triton issues as
    ``cp.async`` copies into shared memory) beside the shipped kernel (entry 0 is the
    default again: the run-to-run noise). ``asm_cvt``: FP8 -> FP16 by inline PTX for K and
    V (1) or V only (2); 0 lets Triton convert in the operand layout (byte-wise shared
    loads for V). Entry 6 (64 rows, 123 KB of shared memory) fits sm_90 only."""

    def clamp(x):
        return max(1, min(256, int(x)))

    p = {"fp16": True, "pipe": 3, "block_n": 32, "num_warps": 8, "asm_cvt": 1}
    return [
        {},
        p, {**p, "num_warps": 4}, {**p, "pipe": 2},
        {**p, "asm_cvt": 2}, {**p, "asm_cvt": 2, "num_warps": 4},
        {**p, "asm_cvt": 2, "pipe": 2, "block_n": 64},
        {**p, "asm_cvt": 2, "num_warps": 4, "block_n": 16},
        {**p, "asm_cvt": 0},
        {**p, "num_warps": 4, "max_splits": clamp(base.max_splits * 2)},
        {**p, "asm_cvt": 2, "num_warps": 4, "block_n": 16,
         "max_splits": clamp(base.max_splits * 2)},
        {**p, "asm_cvt": 2, "min_chunk": 64},
    ]  # fmt: skip


def sweep_v3(base) -> list[dict]:
    """Third sweep (run 3): run 2's default (BF16, 32 rows, 4 warps) and its chunk sizes
    beside the FP16 64-row 8-warp tiles of the new default, with their chunk sizes and
    split budgets (CUDA-graph time at the small shapes with --graph-sweep)."""

    def clamp(x):
        return max(1, min(256, int(x)))

    a = {"fp16": False, "block_n": 32, "num_warps": 4, "prefetch": 1, "min_chunk": 128}
    b = {"fp16": True, "block_n": 64, "num_warps": 8, "prefetch": 1}
    return [
        a, {**a, "min_chunk": 64}, {**a, "min_chunk": 32},
        {**b, "min_chunk": 64}, {**b, "min_chunk": 32},
        {**b, "max_splits": clamp(base.max_splits * 2)},
        {**b, "max_splits": clamp(base.max_splits // 2)},
        {**b, "fp16": False}, {**b, "block_n": 32},
        {**b, "merge_splits": 32},
        # two 8-warp programs an SM (run 2's ncu: 1-2 programs, 12.5% occupancy, issue
        # stalls on dependent instructions), paid for in register spills
        {**b, "block_n": 32, "maxnreg": 128}, {**b, "block_n": 32, "maxnreg": 128, "fp16": False},
        {**b, "block_n": 32, "num_warps": 4, "maxnreg": 128},
    ]  # fmt: skip


def sweep_v2(base) -> list[dict]:
    """Second sweep (after run 1, 2026-12-05): the previous default (8 warps) beside the new
    one (4 warps on sm_90), FP16 operands (one conversion instruction per two FP8 values
    instead of FP8 -> FP16 -> BF16), rows two tiles ahead, and the split budget and chunk
    size of the 4-warp tiles (CUDA-graph time at the small shapes with --graph-sweep)."""

    def clamp(x):
        return max(1, min(256, int(x)))

    out = [{"fp16": False, "block_n": 32, "num_warps": 8, "prefetch": 1}]  # run 1's default
    for bn, warps, pf in ((32, 8, 1), (32, 8, 2), (32, 4, 1), (32, 4, 2), (64, 8, 1),
                          (16, 4, 1), (16, 4, 2)):  # fmt: skip
        out.append({"fp16": True, "block_n": bn, "num_warps": warps, "prefetch": pf})
    for bn, warps, pf in ((32, 8, 2), (64, 8, 1), (32, 4, 2)):
        out.append({"fp16": False, "block_n": bn, "num_warps": warps, "prefetch": pf})
    c4 = {"fp16": False, "block_n": 32, "num_warps": 4, "prefetch": 1}
    for f in (2, 4):
        out.append({**c4, "max_splits": clamp(base.max_splits * f)})
    for mc in (32, 64):
        out.append({**c4, "min_chunk": mc})
    f4 = {**c4, "fp16": True}
    out.append({**f4, "min_chunk": 32})
    out.append({**f4, "max_splits": clamp(base.max_splits * 2)})
    return out


def env_info(args) -> dict:
    info = {
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(0),
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
        "capability": list(torch.cuda.get_device_capability(0)),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "uname": " ".join(platform.uname()),
        "command": " ".join(sys.argv),
    }
    import triton

    info["triton"] = triton.__version__
    for key, p in (("sglang_059_file", args.sglang_059), ("sglang_0523_file", args.sglang_0523)):
        if p:
            info[key] = {"path": str(p), "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
    with contextlib.suppress(Exception):
        info["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=20,
        ).stdout.strip()  # fmt: skip
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sglang-059", type=Path)
    ap.add_argument("--sglang-0523", type=Path)
    ap.add_argument("--sglang-0523-score-mod", type=Path)
    ap.add_argument("--heads", default="8,16")
    ap.add_argument("--shapes", default="", help="b:ctx,... (default: the issue's table)")
    ap.add_argument("--iters", type=int, default=25)
    ap.add_argument("--sweep", action="store_true", help="also time a grid of kernel configs")
    ap.add_argument("--sweep-set", choices=("v1", "v2", "v3", "v4", "v5", "v6"), default="v1",
                    help="v1: run 1's grid; v2: FP16/prefetch/warps; v3: run 3's; "
                    "v4-v6: run 4's pipelined stage 1")  # fmt: skip
    ap.add_argument("--graph-sweep", action="store_true",
                    help="CUDA-graph time for every swept config at the graph shapes")  # fmt: skip
    ap.add_argument("--new-config", default="",
                    help="JSON dict over the default config for the 'new' entry (profiling)")
    ap.add_argument("--no-sglang", action="store_true")
    ap.add_argument("--no-flashinfer", action="store_true")
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()
    if args.iters < 20:
        raise SystemExit("--iters must be at least 20")
    info = env_info(args)
    print(json.dumps(info, indent=1), flush=True)
    fi = None
    if not args.no_flashinfer:
        try:
            import flashinfer
            import flashinfer.mla
            import flashinfer.xqa

            fi = flashinfer
            info["flashinfer"] = flashinfer.__version__
            info["xqa_mla_on_this_gpu"] = xqa_probe(flashinfer)
            print("flashinfer", flashinfer.__version__, "xqa_mla:", info["xqa_mla_on_this_gpu"])
        except Exception as e:
            info["flashinfer_error"] = f"{type(e).__name__}: {e}"[:300]
            traceback.print_exc()
    sg = {}
    if args.no_sglang:
        args.sglang_059 = args.sglang_0523 = None
    if args.sglang_059:
        sg["0.5.9"] = load_sglang(args.sglang_059, "059", None)
    if args.sglang_0523:
        sg["0.5.23"] = load_sglang(args.sglang_0523, "0523", args.sglang_0523_score_mod)
    info["copy_bw_Bps"] = copy_bandwidth()
    print(f"copy bandwidth (read+write): {info['copy_bw_Bps'] / 1e9:.0f} GB/s", flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool = torch.randn((POOL, 1, 576), device="cuda", generator=gen) * 0.7
    pool = pool.to(torch.float8_e4m3fn)
    flat = pool.view(torch.uint8).view(-1)
    timer = Timer(args.iters)
    shapes = SHAPES
    if args.shapes:
        shapes = [tuple(int(x) for x in s.split(":")) for s in args.shapes.split(",")]
    rows = []
    for heads in (int(h) for h in args.heads.split(",")):
        for b, ctx in shapes:
            sweep = sweep_configs(heads, b, args.sweep_set) if args.sweep else []
            r = run_shape(args, timer, pool, flat, heads, b, ctx, sg, fi, sweep)
            rows.append(r)
            print(summary_line(r, info["copy_bw_Bps"]), flush=True)
            args.json.write_text(json.dumps({"env": info, "rows": rows}, indent=1))
    print(table(rows, info["copy_bw_Bps"]))


def _us(r, k):
    e = r.get(k, {})
    return e.get("us") if isinstance(e, dict) else None


def summary_line(r, bw) -> str:
    parts = [f"H={r['heads']} {r['batch']}x{r['ctx']}:"]
    for k, v in r.items():
        if isinstance(v, dict) and "us" in v:
            extra = f" g{v['graph_us']:.1f}" if "graph_us" in v else ""
            err = f" e{v['max_rel_err']:.4f}" if "max_rel_err" in v else ""
            parts.append(f"{k}={v['us']:.1f}{extra}{err}")
        elif isinstance(v, dict) and "error" in v:
            parts.append(f"{k}=ERR")
    return " ".join(parts)


def table(rows, bw) -> str:
    lines = ["| heads | batch x ctx | FP8 MB | read at copy BW us | copy us | new us (graph) | "
             "new % BW | SGLang 0.5.9 best (splits) | SGLang 0.5.23 best (splits) | "
             "whole-pool cast+FI | gather-cast+FI | err new | err 0.5.9 | err FI bf16 |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in rows:
        lines.append(_table_row(r, bw))
    return "\n".join(lines)


def _table_row(r: dict, bw: float) -> str:
    read_us = r["fp8_bytes"] / bw * 1e6
    new = r.get("new", {})
    g = f" ({new['graph_us']:.1f})" if "graph_us" in new else ""
    pct = f"{read_us / new['us']:.0%}" if "us" in new else "-"

    def best(tag):
        s = r.get(f"sglang_{tag}_best_splits")
        return f"{_us(r, f'sglang_{tag}_s{s}'):.1f} ({s})" if s else "-"

    def f(k):
        v = _us(r, k)
        return f"{v:.1f}" if v is not None else "-"

    def err(k):
        e = r.get(k, {})
        return f"{e['max_rel_err']:.4f}" if isinstance(e, dict) and "max_rel_err" in e else "-"

    s59 = r.get("sglang_0.5.9_best_splits")
    return (
        f"| {r['heads']} | {r['batch']} x {r['ctx']} | {r['fp8_bytes'] / 1e6:.0f} | "
        f"{read_us:.1f} | {f('copy')} | {new.get('us', float('nan')):.1f}{g} | {pct} | "
        f"{best('0.5.9')} | {best('0.5.23')} | {f('fi_whole_pool')} | {f('fi_gather_cast')} | "
        f"{err('new')} | {err(f'sglang_0.5.9_s{s59}') if s59 else '-'} | "
        f"{err('fi_gather_cast')} |"
    )


if __name__ == "__main__":
    main()
