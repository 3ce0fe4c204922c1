"""Gather-then-cast on a GPU through the real SGLang backend and real FlashInfer (issue 13 #4).

Two fresh processes run the same script: one with ``GLMSERVE_PATCHES=flashinfer_mla_gather_cast``
(the shipped ``sitecustomize`` arms the hook, which patches the real
``sglang.srt.layers.attention.flashinfer_mla_backend`` on import) and one without. Each builds
the real ``FlashInferMLAAttnBackend`` over a real ``MLATokenToKVPool`` (FP8 e4m3, rows of
512 + 64 = 576), plans through the real decode indices updater (SGLang's Triton index kernel,
FlashInfer's real ``BatchMLAPagedAttentionWrapper.plan``) and runs the real ``forward_decode``
(FlashInfer's JIT-built MLA kernel). The parent compares the attention outputs bit for bit and
prints the per-layer timing table.

What is not SGLang's own here: the model runner is a namespace with the fields the backend
reads; ``get_global_server_args``/``get_attention_tp_size``/``is_sm100_supported`` return a
single-GPU, non-disaggregated configuration; and ``sgl_kernel`` (built for another torch,
not loadable here) is an import stub whose every function raises if called: nothing on this
path calls one, so a stub call would fail the run rather than change a result.

    python3 benchmarks/flashinfer_mla_gtc_gpu.py --sglang-root /tmp/sg-0.5.9 --out-dir OUT
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path
from types import SimpleNamespace

TARGET = "sglang.srt.layers.attention.flashinfer_mla_backend"
PATCH = "flashinfer_mla_gather_cast"
HEADS = 16  # GLM-5 / DeepSeek-V3 MLA: 128 heads over TP 8
BENCH_POOL = 495_000
BENCH_BATCHES = (1, 8, 64, 256)
BENCH_CONTEXTS = (2048, 8192, 32768)
CHECK_CASES = (  # (page size, per-request contexts) for the bit-identity check
    (1, [37, 1024, 4099, 300, 8000]),
    (64, [64, 1000, 4096, 129, 7777]),
)
CHECK_POOL = 40_000


class _Unavailable:
    """Stand-in for any sgl_kernel attribute: usable at import time, raises when called."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> _Unavailable:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"sgl_kernel stub called: {self._name} (not on the measured path)")


# Names the stub reports absent so that sglang takes its fallback import: with this one
# present, 0.5.9's fp8_kernel.py registers a fake for a torch op only the real library defines.
ABSENT = {"sgl_per_token_group_quant_8bit"}


def _stub_attr(module: str, attr: str) -> _Unavailable:
    if attr.startswith("__") or attr in ABSENT:  # as for a real absence (__file__, ...)
        raise AttributeError(attr)
    return _Unavailable(f"{module}.{attr}")


class _SglKernelStub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.rsplit(".", 1)[-1] in ABSENT:  # `from sgl_kernel import X` tries a submodule
            return None
        if name == "sgl_kernel" or name.startswith("sgl_kernel."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__getattr__ = lambda attr: _stub_attr(spec.name, attr)
        return mod

    def exec_module(self, module):
        return None


def _import_backend():
    try:
        import sgl_kernel  # noqa: F401
    except Exception:
        for key in [k for k in sys.modules if k == "sgl_kernel" or k.startswith("sgl_kernel.")]:
            del sys.modules[key]
        sys.meta_path.insert(0, _SglKernelStub())
        import torch

        real_register_fake = torch.library.register_fake

        def register_fake(op, *args, **kwargs):
            # sglang registers fake (meta) impls for sgl_kernel's torch ops at import time;
            # those ops exist only in the real library, and nothing here traces them.
            if isinstance(op, str) and op.startswith("sgl_kernel::"):
                return (lambda fn: fn) if not args else None
            return real_register_fake(op, *args, **kwargs)

        torch.library.register_fake = register_fake
    import importlib

    return importlib.import_module(TARGET)


def _backend(mod, pool_rows: int, page: int, max_reqs: int, max_ctx: int):
    import torch
    from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool

    mod.get_global_server_args = lambda: SimpleNamespace(
        disaggregation_mode="null",
        disable_chunked_prefix_cache=True,
        flashinfer_mla_disable_ragged=False,
    )
    mod.get_attention_tp_size = lambda: 1
    mod.is_sm100_supported = lambda: False
    pool = MLATokenToKVPool(
        size=pool_rows,
        page_size=page,
        dtype=torch.float8_e4m3fn,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        layer_num=1,
        device="cuda",
        enable_memory_saver=False,
    )
    gen = torch.Generator().manual_seed(1234 + page)
    buf = pool.kv_buffer[0]
    vals = (torch.randn(buf.shape, generator=gen) * 0.7).to(torch.float8_e4m3fn)
    buf.copy_(vals.view(torch.uint8).to("cuda"))
    req_to_token = torch.zeros((max_reqs, max_ctx), dtype=torch.int32, device="cuda")
    runner = SimpleNamespace(
        model_config=SimpleNamespace(
            context_len=max_ctx,
            num_attention_heads=HEADS,
            qk_nope_head_dim=128,
            qk_rope_head_dim=64,
            v_head_dim=512,
            kv_lora_rank=512,
            scaling=576**-0.5,
        ),
        device="cuda",
        page_size=page,
        req_to_token_pool=SimpleNamespace(size=max_reqs, req_to_token=req_to_token),
        dtype=torch.bfloat16,
        kv_cache_dtype=torch.float8_e4m3fn,
        token_to_kv_pool=pool,
    )
    layer = SimpleNamespace(
        layer_id=0,
        tp_q_head_num=HEADS,
        tp_k_head_num=1,
        v_head_dim=512,
        head_dim=576,
        logit_cap=0.0,
        scaling=576**-0.5,
    )
    return mod.FlashInferMLAAttnBackend(runner), pool, req_to_token, layer


def _slots(n_tokens_per_req, pool_rows: int, page: int, gen):
    """Scattered slots, page-contiguous runs for page > 1 (slot 0 / page 0 is padding)."""
    import torch

    out = []
    n_pages = pool_rows // page
    need = sum(-(-n // page) for n in n_tokens_per_req)
    pages = torch.randperm(n_pages - 1, generator=gen)[:need] + 1
    k = 0
    for n in n_tokens_per_req:
        np_ = -(-n // page)
        toks = (pages[k : k + np_, None] * page + torch.arange(page)[None, :]).reshape(-1)[:n]
        out.append(toks.to(torch.int32))
        k += np_
    return out


def _plan_decode(mod, backend, req_to_token, seq_slots):
    import torch

    bs = len(seq_slots)
    lens = torch.tensor([len(s) for s in seq_slots], dtype=torch.int32, device="cuda")
    for r, s in enumerate(seq_slots):
        req_to_token[r, : len(s)] = s.to("cuda")
    req_pool_indices = torch.arange(bs, dtype=torch.int64, device="cuda")
    backend.indices_updater_decode.update(
        req_pool_indices,
        lens,
        int(lens.sum()),
        decode_wrapper=backend.decode_wrapper,
        init_metadata_replay=False,
        spec_info=None,
    )
    backend.forward_metadata = mod.DecodeMetadata(backend.decode_wrapper)


def _backend_forward_only(mod, pool_rows: int, page: int, max_reqs: int, max_ctx: int):
    """For releases whose backend constructor needs SGLang's runtime context (0.5.2x:
    ``get_buffer``/``get_parallel``, a ``kv_index_translator``, a ``KVLocPlan`` per batch):
    the release's own ``forward_decode`` (rewritten when patched) on a backend object that
    holds what that method reads, planned with the arguments its decode updater passes."""
    import torch

    if hasattr(mod, "get_parallel"):
        mod.get_parallel = lambda: SimpleNamespace(
            dcp_enabled=False, attn_tp_size=1, attn_dcp_size=1
        )
    gen = torch.Generator().manual_seed(1234 + page)
    vals = (torch.randn((pool_rows + page, 1, 576), generator=gen) * 0.7).to(torch.float8_e4m3fn)
    buf = vals.to("cuda")
    pool = SimpleNamespace(get_key_buffer=lambda layer_id: buf, size=pool_rows)
    cls = mod.FlashInferMLAAttnBackend
    backend = cls.__new__(cls)
    backend.token_to_kv_pool = pool
    workspace = torch.empty(384 << 20, dtype=torch.uint8, device="cuda")
    backend.decode_wrapper = mod.BatchMLAPagedAttentionWrapper(workspace, backend="auto")
    if getattr(cls, "_glmserve_patched", False):
        from glmserve_runtime.patches import flashinfer_mla_gather_cast as gtc

        runner = SimpleNamespace(
            kv_cache_dtype=torch.float8_e4m3fn,
            dtype=torch.bfloat16,
            device="cuda",
            page_size=page,
            model_config=SimpleNamespace(kv_lora_rank=512, qk_rope_head_dim=64),
            token_to_kv_pool=pool,
        )
        backend._glmserve_gtc = gtc.GatherState(runner)
    layer = SimpleNamespace(
        layer_id=0,
        tp_q_head_num=HEADS,
        tp_k_head_num=1,
        v_head_dim=512,
        head_dim=576,
        logit_cap=0.0,
        scaling=576**-0.5,
    )
    return backend, pool, None, layer


def _plan_forward_only(mod, backend, seq_slots):
    import contextlib

    import torch

    bs = len(seq_slots)
    lens = torch.tensor([len(s) for s in seq_slots], dtype=torch.int32, device="cuda")
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device="cuda")
    kv_indptr[1:] = torch.cumsum(lens, 0)
    args = (torch.arange(bs + 1, dtype=torch.int32, device="cuda"), kv_indptr,
            torch.cat(seq_slots).to("cuda"), lens, HEADS, 512, 64, 1, False, 576**-0.5,
            torch.bfloat16, torch.bfloat16)  # fmt: skip
    wrapper = backend.decode_wrapper
    state = getattr(backend, "_glmserve_gtc", None)
    ctx = contextlib.nullcontext()
    if state is not None:
        from glmserve_runtime.patches import flashinfer_mla_gather_cast as gtc

        ctx = gtc.intercept_plan(wrapper, state)
    with ctx:
        wrapper.plan(*args)
    backend.forward_metadata = mod.DecodeMetadata(wrapper)


def _decode(backend, pool, layer, q):
    fb = SimpleNamespace(
        token_to_kv_pool=pool,
        out_cache_loc=None,
        forward_mode=SimpleNamespace(is_decode=lambda: True),
    )
    return backend.forward_decode(q, None, None, layer, fb, save_kv_cache=False)


def child(args) -> None:
    import torch

    mod = _import_backend()
    patched = bool(getattr(mod.FlashInferMLAAttnBackend, "_glmserve_patched", False))
    result: dict = {"patched": patched, "pid": os.getpid(), "check": {}, "bench": []}
    make = _backend_forward_only if args.forward_only else _backend

    def plan(mod, backend, r2t, slots):
        if args.forward_only:
            return _plan_forward_only(mod, backend, slots)
        return _plan_decode(mod, backend, r2t, slots)

    for page, lens in CHECK_CASES:
        backend, pool, r2t, layer = make(mod, CHECK_POOL, page, 8, 8192)
        gen = torch.Generator().manual_seed(99 + page)
        slots = _slots(lens, CHECK_POOL, page, gen)
        plan(mod, backend, r2t, slots)
        q = torch.randn((len(lens), HEADS * 576), generator=gen).to(torch.bfloat16).to("cuda")
        out = _decode(backend, pool, layer, q)
        torch.cuda.synchronize()
        sel = getattr(backend.decode_wrapper, "_glmserve_selection", None)
        result["check"][page] = {
            "out": out.cpu(),
            "compact": None if sel is None else (bool(sel.compact), int(sel.nnz)),
            "finite": bool(torch.isfinite(out.float()).all()),
        }
        del backend, pool
        torch.cuda.empty_cache()
    if args.bench:
        backend, pool, r2t, layer = make(mod, BENCH_POOL, 1, 256, max(BENCH_CONTEXTS))
        for bs in BENCH_BATCHES:
            ctxs = [c for c in BENCH_CONTEXTS if bs * c <= BENCH_POOL]
            if bs * BENCH_CONTEXTS[0] > BENCH_POOL:
                ctxs = [BENCH_POOL // bs - 16]  # the fullest pool this batch can have
            for ctx in ctxs:
                gen = torch.Generator().manual_seed(bs * 100003 + ctx)
                slots = _slots([ctx] * bs, BENCH_POOL, 1, gen)
                plan(mod, backend, r2t, slots)
                q = torch.randn((bs, HEADS * 576), generator=gen).to(torch.bfloat16).to("cuda")
                for _ in range(3):
                    _decode(backend, pool, layer, q)
                times = []
                for _ in range(args.iters):
                    a = torch.cuda.Event(enable_timing=True)
                    b = torch.cuda.Event(enable_timing=True)
                    a.record()
                    _decode(backend, pool, layer, q)
                    b.record()
                    b.synchronize()
                    times.append(a.elapsed_time(b) * 1000.0)
                times.sort()
                result["bench"].append(
                    {
                        "bs": bs,
                        "ctx": ctx,
                        "rows": bs * ctx,
                        "median_us": times[len(times) // 2],
                        "min_us": times[0],
                        "max_us": times[-1],
                    }
                )
                print(f"  bs={bs} ctx={ctx} median {times[len(times) // 2]:.1f} us", flush=True)
    torch.save(result, args.out)


def parent(args) -> int:
    import torch

    repo = Path(__file__).resolve().parents[1]
    runtime = repo / "src" / "glmserve" / "runtime"
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    res = {}
    for mode in ("unpatched", "patched"):
        env = {k: v for k, v in os.environ.items() if k != "GLMSERVE_PATCHES"}
        env["PYTHONPATH"] = os.pathsep.join(
            [str(runtime), args.sglang_root, env.get("PYTHONPATH", "")]
        )
        if mode == "patched":
            env["GLMSERVE_PATCHES"] = PATCH
        out = out_dir / f"{args.tag}_{mode}.pt"
        cmd = [sys.executable, __file__, "--child", "--out", str(out), "--iters", str(args.iters)]
        cmd += ["--bench"] if args.bench else []
        cmd += ["--forward-only"] if args.forward_only else []
        t0 = time.time()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        log = out_dir / f"{args.tag}_{mode}.log"
        log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
        print(f"[{mode}] rc={proc.returncode} in {time.time() - t0:.0f}s; glmserve lines:")
        for line in proc.stderr.splitlines():
            if "glmserve" in line:
                print("   ", line)
        if proc.returncode != 0:
            print(proc.stderr[-3000:])
            return 1
        res[mode] = torch.load(out, weights_only=False)
    base, pat = res["unpatched"], res["patched"]
    summary: dict = {"sglang_root": args.sglang_root, "check": {}, "bench": []}
    ok = base["patched"] is False and pat["patched"] is True
    for page in base["check"]:
        a, b = base["check"][page], pat["check"][page]
        same = torch.equal(a["out"].view(torch.int16), b["out"].view(torch.int16))
        ok &= same and b["compact"] is not None and b["compact"][0] and a["finite"]
        summary["check"][page] = {"bit_identical": same, "patched_selection": b["compact"]}
        print(
            f"page size {page}: outputs bit-identical={same} (patched plan: compact, nnz = "
            f"{b['compact']}; finite={a['finite']})"
        )
    if args.bench:
        print("\n| batch | context | KV rows | unpatched us | patched us | saved us | speed-up |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for u, p in zip(base["bench"], pat["bench"], strict=True):
            row = {
                **{k: u[k] for k in ("bs", "ctx", "rows")},
                "unpatched_us": u["median_us"],
                "patched_us": p["median_us"],
            }
            summary["bench"].append(row)
            print(
                f"| {u['bs']} | {u['ctx']} | {u['rows']} | {u['median_us']:.1f} | "
                f"{p['median_us']:.1f} | {u['median_us'] - p['median_us']:.1f} | "
                f"{u['median_us'] / p['median_us']:.2f}x |"
            )
    (out_dir / f"{args.tag}_summary.json").write_text(json.dumps(summary, indent=1))
    print("RESULT", "OK" if ok else "MISMATCH")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--out-dir", default="out")
    ap.add_argument("--sglang-root", default="")
    ap.add_argument("--tag", default="run")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--forward-only", action="store_true")
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args()
    if args.child:
        child(args)
        return 0
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
