"""Attention-backend facts argparse cannot check: what SGLang does at startup with a
backend's page size and KV-cache dtype, and where its kernels run. A table lookup on the
flags that parsed, no hardware probing; the emulator adds these as warnings.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from glmserve.argspec.model import ArgSpec, FlagIssue
from glmserve.argspec.releases import version_key


@dataclass(frozen=True)
class BackendFact:
    """What SGLang (server_args.py, 0.5.8-0.5.23) does with an attention backend at startup,
    and where its kernels run. ``page_sizes``: sizes it keeps; others are overridden.
    ``note``: an architecture fact worth a warning whenever the backend is picked."""

    page_sizes: tuple[int, ...] | None
    forced_page_size: int | None
    note: str
    # (first release, kv-cache dtypes accepted from then on), oldest first
    kv_dtypes: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def kv_dtypes_for(self, version: str) -> tuple[str, ...] | None:
        """The accepted kv-cache dtypes in ``version`` (None: no restriction known)."""
        accepted = None
        for since, dtypes in self.kv_dtypes:
            if version_key(version) >= version_key(since):
                accepted = dtypes
        return accepted


BACKEND_FACTS: dict[str, BackendFact] = {
    # server_args.py / arg_groups/overrides.py: "TensorRT-LLM MLA only supports page_size of 32
    # or 64, changing page_size ... to 64"; other kv-cache dtypes raise at startup (fp4_e2m1
    # accepted 0.5.8-0.5.20, gone in 0.5.22).
    "trtllm_mla": BackendFact(
        page_sizes=(32, 64),
        forced_page_size=64,
        note=(
            "trtllm_mla ships trtllm-gen kernels for SM100-class GPUs (Blackwell datacenter, "
            "sm_100); SGLang's Blackwell check also admits SM120 (RTX PRO 6000) but those "
            "kernels are not built for it"
        ),
        kv_dtypes=(
            ("0.5.8", ("fp8_e4m3", "fp4_e2m1", "bf16", "auto")),
            ("0.5.22", ("fp8_e4m3", "bf16", "auto")),
        ),
    ),
    # server_args.py: "Cutlass MLA only supports a page_size of 128, change page_size to 128."
    "cutlass_mla": BackendFact(
        page_sizes=(128,),
        forced_page_size=128,
        note="cutlass_mla is an SM100 (sm_100) CUTLASS kernel; it does not run on SM120",
    ),
    # 0.5.2x arg_groups/overrides.py: "CuteDSL MLA only supports page_size of 32 or 64".
    "cutedsl_mla": BackendFact(
        page_sizes=(32, 64),
        forced_page_size=64,
        note="",  # page size only: no architecture fact checked for it
    ),
    # server_args.py: "FlashMLA only supports a page_size of 64, change page_size to 64."
    "flashmla": BackendFact(
        page_sizes=(64,),
        forced_page_size=64,
        note="",
    ),
}

_FP8_KV = ("fp8_e4m3", "fp8_e5m2", "fp8")


GATHER_CAST_PATCH = "flashinfer_mla_gather_cast"


def backend_warnings(
    values: dict[str, tuple[list[str], int]], spec: ArgSpec, patches: Iterable[str] = ()
) -> list[FlagIssue]:
    """Warnings for known attention-backend pitfalls, given ``dest -> (values, argv index)``
    of the flags that parsed. Pure: a table lookup, no hardware probing."""
    active_patches = set(patches)
    out: list[FlagIssue] = []
    page = values.get("page_size")
    kv = values.get("kv_cache_dtype")
    kv_dtype = kv[0][0] if kv and kv[0] else "auto"
    backends = {
        dest: values[dest]
        for dest in ("attention_backend", "decode_attention_backend", "prefill_attention_backend")
        if dest in values and values[dest][0]
    }
    for dest, (vals, index) in backends.items():
        backend = vals[0]
        flag = "--" + dest.replace("_", "-")
        fact = BACKEND_FACTS.get(backend)
        if fact is not None:
            if fact.note:
                out.append(
                    FlagIssue("warning", flag, f"{flag} {backend}: {fact.note}", None, index)
                )
            if page and page[0] and fact.page_sizes:
                try:
                    size = int(page[0][0])
                except ValueError:
                    size = None
                if size is not None and size not in fact.page_sizes:
                    out.append(
                        FlagIssue(
                            "warning",
                            "--page-size",
                            f"--page-size {size} with {flag} {backend}: SGLang supports "
                            f"{'/'.join(map(str, fact.page_sizes))} and silently changes it "
                            f"to {fact.forced_page_size}",
                            f"--page-size {fact.forced_page_size}",
                            page[1],
                        )
                    )
            kv_ok = fact.kv_dtypes_for(spec.version)
            if kv_ok and kv_dtype not in kv_ok:
                out.append(
                    FlagIssue(
                        "warning",
                        "--kv-cache-dtype",
                        f"--kv-cache-dtype {kv_dtype} with {flag} {backend}: sglang "
                        f"{spec.version} refuses to start (supported: {', '.join(kv_ok)})",
                        f"--kv-cache-dtype {kv_ok[0]}",
                        kv[1] if kv else index,
                    )
                )
        if (
            backend == "flashinfer"
            and GATHER_CAST_PATCH not in active_patches
            and (kv_dtype.startswith(_FP8_KV) or (kv_dtype == "auto" and _fp8_checkpoint(values)))
        ):
            out.append(
                FlagIssue(
                    "warning",
                    flag,
                    f"{flag} flashinfer with an FP8 KV cache (--kv-cache-dtype {kv_dtype}): "
                    "flashinfer MLA casts the whole KV pool to BF16 in every layer on every "
                    "decode step (the MLA kernel only takes 16-bit KV)",
                    "use the flashinfer_gtc profile (gather-then-cast patch)",
                    index,
                )
            )
    return out


def _fp8_checkpoint(values: dict[str, tuple[list[str], int]]) -> bool:
    """``auto`` KV dtype resolves to FP8 for ModelOpt FP4/FP8 checkpoints (GLM-5-NVFP4)."""
    quant = values.get("quantization")
    return bool(quant and quant[0] and quant[0][0].startswith(("modelopt", "fp8")))
