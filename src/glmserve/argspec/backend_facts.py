"""Attention-backend facts argparse cannot check: what SGLang does at startup with a
backend's page size and KV-cache dtype, and where (GPU architecture, release, role) its
kernels run, start, refuse or crash. A table lookup on the flags that parsed, no hardware
probing; the emulator adds these as warnings. The per-release, per-architecture rows and
their citations are data in ``backend_table.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from glmserve.argspec.backend_table import ARCHS, ROWS, BackendRow, roles_of
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
        note="",  # architecture facts per role and release: backend_table.ROWS
        kv_dtypes=(
            ("0.5.8", ("fp8_e4m3", "fp4_e2m1", "bf16", "auto")),
            ("0.5.22", ("fp8_e4m3", "bf16", "auto")),
        ),
    ),
    # server_args.py: "Cutlass MLA only supports a page_size of 128, change page_size to 128."
    "cutlass_mla": BackendFact(
        page_sizes=(128,),
        forced_page_size=128,
        note="",  # architecture facts per role and release: backend_table.ROWS
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
ARCH_NAMES = {"sm90": "SM90 (H100/H200)", "sm100": "SM100 (B200/GB200)",
              "sm120": "SM120 (RTX PRO 6000)"}  # fmt: skip
# The GPU the shipped profiles are written for (8x RTX PRO 6000, see glm5-nvfp4-tp8.yaml):
# what a render is refused for when the table says the profile's backends cannot run there.
TARGET_ARCH = "sm120"


def normalize_arch(text: str) -> str | None:
    """``sm120``, ``sm_120``, ``12.0`` or ``120`` -> ``sm120`` (None when not one of ARCHS)."""
    raw = text.strip().lower().replace("sm_", "sm")
    if raw.replace(".", "").isdigit() and "." in raw:  # compute capability, e.g. 12.0
        major, _, minor = raw.partition(".")
        raw = f"sm{major}{minor}"
    elif raw.isdigit():
        raw = "sm" + raw
    return raw if raw in ARCHS else None


def resolve_kv_dtype(kv: str | None, fp8_checkpoint: bool = True) -> str:
    """The KV dtype a launch ends up with: ``auto`` is FP8 for the NVFP4/FP8 checkpoints
    the profiles serve (the seeds' box), bf16 spellings are one."""
    if kv in (None, "", "auto"):
        return "fp8_e4m3" if fp8_checkpoint else "bfloat16"
    if kv in ("bf16", "bfloat16", "float16", "fp16"):
        return "bfloat16"
    return kv


def lookup(
    backend: str, role: str, arch: str, version: str, kv_dtype: str = "fp8_e4m3"
) -> BackendRow | None:
    """The first table row for ``backend`` serving ``role`` on ``arch`` under ``version``
    with ``kv_dtype``; None when the table knows nothing of it."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        ver = Version(version)
    except InvalidVersion:
        return None
    for row in ROWS:
        if row.backend != backend or row.role != role or arch not in row.archs:
            continue
        if row.kv_dtypes is not None and kv_dtype not in row.kv_dtypes:
            continue
        if ver in SpecifierSet(row.releases):
            return row
    return None


@dataclass(frozen=True)
class Verdict:
    """Whether a launch's attention backends can run on one GPU architecture and release."""

    arch: str
    version: str
    runs: bool  # every role's row says "runs"
    rows: dict[str, BackendRow | None]  # role -> row (None: not in the table)

    def reasons(self) -> list[str]:
        """One phrase per role that does not (known to) run, with its log line and source."""
        out = []
        for role, row in self.rows.items():
            if row is None:
                out.append(f"{role}: no fact for sglang {self.version} on {self.arch}")
            elif row.outcome != "runs":
                out.append(describe(row, role, self.arch, self.version))
        return out


def describe(row: BackendRow, role: str, arch: str, version: str) -> str:
    """``decode trtllm_mla on SM120, sglang 0.5.23: crashes at the first decode (log) [src]``."""
    what = {
        "refused": "refused at start-up",
        "crash": f"crashes at the first {role}",
        "unverified": "not verified",
        "runs": "runs",
    }[row.outcome]
    text = f"{role} {row.backend} on {ARCH_NAMES.get(arch, arch)}, sglang {version}: {what}"
    if row.log_line:
        text += f" ({row.log_line})"
    elif row.note:
        text += f" ({row.note})"
    own = next((src for src in row.sources if f"sglang {version} " in src), row.sources[0])
    return text + f" [{own}]"


def verdict(
    backends: dict[str, str], arch: str, version: str, kv_dtype: str = "fp8_e4m3"
) -> Verdict:
    """``backends``: role -> backend. Unknown backends (no row at all for any arch) are not
    judged: the table covers the MLA backends the profiles use."""
    rows: dict[str, BackendRow | None] = {}
    for role, backend in backends.items():
        if not any(r.backend == backend for r in ROWS):
            continue
        rows[role] = lookup(backend, role, arch, version, kv_dtype)
    runs = all(r is not None and r.outcome == "runs" for r in rows.values())
    return Verdict(arch, version, runs, rows)


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
    out.extend(_arch_warnings(values, spec.version, kv_dtype))
    roles = roles_of({d: v[0] for d, (v, _i) in backends.items()})
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
            and roles.get("decode", ("", ""))[1] == flag  # the cast is decode's
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


def _arch_warnings(
    values: dict[str, tuple[list[str], int]], version: str, kv: str
) -> list[FlagIssue]:
    """One warning per role whose backend does not run on some architecture under this
    release (from backend_table.ROWS), naming where it does run."""
    flags = {d: v[0][0] for d, v in values.items() if d.endswith("attention_backend") and v[0]}
    kv_dtype = resolve_kv_dtype(kv, _fp8_checkpoint(values))
    out = []
    for role, (backend, flag) in roles_of(flags).items():
        if not any(r.backend == backend for r in ROWS):
            continue
        index = values[flag[2:].replace("-", "_")][1]
        bad, good = [], []
        for arch in ARCHS:
            row = lookup(backend, role, arch, version, kv_dtype)
            if row is None:
                continue
            if row.outcome == "runs":
                good.append(ARCH_NAMES[arch].split()[0])
            else:
                bad.append(describe(row, role, arch, version))
        if bad:
            where = f"; runs on {', '.join(good)}" if good else ""
            out.append(FlagIssue("warning", flag, f"{flag} {backend}: " + "; ".join(bad) + where,
                                 None, index))  # fmt: skip
    return out


def _fp8_checkpoint(values: dict[str, tuple[list[str], int]]) -> bool:
    """``auto`` KV dtype resolves to FP8 for ModelOpt FP4/FP8 checkpoints (GLM-5-NVFP4)."""
    quant = values.get("quantization")
    return bool(quant and quant[0] and quant[0][0].startswith(("modelopt", "fp8")))
