"""Validate a LaunchSpec's argv against one SGLang release and word the findings in profile
terms (file:line and key), so a user fixes the YAML, not the rendered argv."""

from __future__ import annotations

from typing import Any

from glmserve.config.flags import Flags
from glmserve.config.spec import LaunchSpec
from glmserve.errors import FlagValidationError


def locate(spec: LaunchSpec, finding: Any) -> str:
    """``file:line (key server.x)`` for a finding, falling back to the profile name."""
    index = getattr(finding, "index", None)
    flag = spec.flags.flag_at(index) or getattr(finding, "flag", None)
    origin = spec.origins.get(flag or "")
    if origin is None:
        return f"profile {spec.profile}"
    where = f"{origin.file}:{origin.line}" if origin.line else origin.file
    return f"{where} ({origin.key})"


def format_finding(spec: LaunchSpec, finding: Any) -> str:
    """``file:line (key): message``; the caller prefixes the severity (error/warning)."""
    text = f"{locate(spec, finding)}: {finding.message}"
    if getattr(finding, "suggestion", None):
        text += f" ({finding.suggestion})"
    return text


def version_in_range(version: str, spec_range: str | None) -> bool:
    if not spec_range:
        return True
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version) in SpecifierSet(spec_range)
    except InvalidVersion:
        return True


def validate_spec(spec: LaunchSpec, sglang_version: str) -> list[str]:
    """Raise FlagValidationError (exit 2) listing every error; return warning lines."""
    from glmserve.argspec.emulator import validate_argv
    from glmserve.argspec.releases import load_release_spec

    argspec = load_release_spec(sglang_version)
    report = validate_argv(list(spec.argv), argspec, patches=spec.patches, strict=True)
    warnings = [format_finding(spec, f) for f in report.warnings]
    version = getattr(argspec, "version", sglang_version)
    patch_errors = patch_requirement_errors(spec, str(version))
    if not version_in_range(str(version), spec.sglang_range):
        refusal = backend_refusal(spec, str(version))
        if refusal:
            patch_errors = [*patch_errors, refusal]
        else:
            warnings.append(
                f"profile {spec.profile}: targets sglang {spec.sglang_range}, "
                f"validating against {version}"
            )
    if report.errors or patch_errors:
        lines = [format_finding(spec, f) for f in report.errors] + patch_errors
        head = f"{len(lines)} flag error(s) for sglang {version}: " + lines[0]
        msg = head if len(lines) == 1 else head + "\n" + "\n".join(lines[1:])
        raise FlagValidationError(msg, findings=report.errors)
    return warnings


def spec_backends(spec: LaunchSpec) -> dict[str, str]:
    """``role -> attention backend`` a launch asks for (only the roles it names)."""
    from glmserve.argspec.backend_table import roles_of

    given = spec.flags
    flags = {
        dest: given.get("--" + dest.replace("_", "-"))
        for dest in ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
    }
    named = {d: v for d, v in flags.items() if isinstance(v, str)}
    return {role: backend for role, (backend, _flag) in roles_of(named).items()}


def spec_kv_dtype(spec: LaunchSpec) -> str:
    """The KV dtype the launch resolves to (``auto`` is FP8 for FP8/FP4 checkpoints)."""
    from glmserve.argspec.backend_facts import resolve_kv_dtype

    kv = spec.flags.get("--kv-cache-dtype")
    quant = spec.flags.get("--quantization")
    fp8_ckpt = isinstance(quant, str) and quant.startswith(("modelopt", "fp8"))
    return resolve_kv_dtype(kv if isinstance(kv, str) else None, fp8_ckpt)


def backend_refusal(spec: LaunchSpec, version: str) -> str | None:
    """Why ``spec`` is refused for ``version`` outside its ``sglang:`` range: the backend
    facts table says its attention backends do not run there on the GPU the profiles
    target (SM120), each reason with its log line and source. None: not refused (a range
    the facts do not explain stays a warning)."""
    from glmserve.argspec.backend_facts import TARGET_ARCH, verdict

    backends = spec_backends(spec)
    if not backends:
        return None
    found = verdict(backends, TARGET_ARCH, version, spec_kv_dtype(spec))
    if not any(row is not None and row.outcome != "runs" for row in found.rows.values()):
        return None  # runs, or the table has no fact there: the range warning stays
    origin = spec.origins.get("--decode-attention-backend") or spec.origins.get(
        "--attention-backend"
    )
    where = f"{origin.file}:{origin.line}" if origin and origin.line else f"profile {spec.profile}"
    return (
        f"{where}: profile {spec.profile} targets sglang {spec.sglang_range}; on sglang "
        f"{version} " + "; ".join(found.reasons())
    )


_PATCH_ARG_FLAGS = {  # SGLang flag -> dest, the args the patch's requirements read
    "--disable-cuda-graph": "disable_cuda_graph",
    "--cuda-graph-max-bs": "cuda_graph_max_bs",
    "--cuda-graph-backend-decode": "cuda_graph_backend_decode",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--dtype": "dtype",
}


def patch_args(argv: list[str]) -> dict[str, Any]:
    """The few server args the runtime patch's requirements read, from a rendered argv."""
    out: dict[str, Any] = {}
    for item in Flags.parse(argv).items:
        dest = _PATCH_ARG_FLAGS.get(item.name or "")
        if dest is None:
            continue
        if dest == "disable_cuda_graph":
            out[dest] = item.values[0].lower() not in ("false", "0") if item.inline else True
            continue
        value = item.values[0] if item.values else ""
        out[dest] = int(value) if dest == "cuda_graph_max_bs" and value.isdigit() else value
    return out


def patch_requirement_errors(spec: LaunchSpec, version: str) -> list[str]:
    """One error line per requirement of a runtime patch this launch breaks, naming the
    profile key to change and the exact refusal the workers would log. The requirements
    come from the patch module itself (the same code the worker runs), so a profile that
    passes here is not refused by the patch for these reasons on the GPU host."""
    from glmserve.runtime.glmserve_runtime.patches import flashinfer_mla_gather_cast as gtc
    from glmserve.runtime.glmserve_runtime.patches import mla_fp8_decode as mla

    out = []
    for patch in (gtc, mla):
        if patch.PATCH not in spec.patches:
            continue
        for req in patch.launch_requirement_failures(patch_args(list(spec.argv)), version):
            origin = spec.origins.get(req.flag)
            if req.flag == "sglang":
                where, key = f"profile {spec.profile}", "--sglang-version / sglang"
            elif origin is not None:
                where = f"{origin.file}:{origin.line}" if origin.line else origin.file
                key = origin.key
            else:
                where, key = f"profile {spec.profile}", "server." + req.flag.lstrip("-")
            out.append(
                f"{where}: {key} must be {req.want} for patch {patch.PATCH}; its workers "
                f"would refuse to start: glmserve patch {patch.PATCH} FAILED: {req.reason}"
            )
    return out
