"""The backend facts table (argspec/backend_table.py): well-formed and cited, what
validation warns from it per role, what render refuses, what the simulator starts."""

from __future__ import annotations

import pytest

from glmserve.argspec.backend_facts import lookup, verdict
from glmserve.argspec.backend_table import ARCHS, OUTCOMES, ROWS
from glmserve.argspec.emulator import validate_argv
from glmserve.argspec.portable import for_release
from glmserve.argspec.releases import load_release_spec
from glmserve.config.profiles import load_profile
from glmserve.errors import FlagValidationError
from glmserve.simulator import faults, options

M = ["--model", "x", "--quantization", "modelopt_fp4"]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.backend}-{r.role}-{r.releases}")
def test_rows_are_well_formed_and_cited(row):
    from packaging.specifiers import SpecifierSet

    SpecifierSet(row.releases)  # parses
    assert row.role in ("prefill", "decode") and set(row.archs) <= set(ARCHS)
    assert row.outcome in OUTCOMES and row.sources and all(s.strip() for s in row.sources)
    for src in row.sources:  # a release file and line, or an issue/PR, or a committed result
        assert ":" in src or src.startswith(("the seeds'", "benchmarks/results/")), src
    if row.outcome in ("refused", "crash"):
        assert row.log_line and row.crash_kind


@pytest.mark.parametrize(
    "row", [r for r in ROWS if r.crash_kind], ids=lambda r: f"{r.backend}-{r.role}-{r.crash_kind}"
)
def test_the_simulator_prints_each_failure_line_the_table_names(row):
    if row.crash_kind in faults.SERVER_ARGS_REFUSALS:
        text = faults.server_args_refusal(row.crash_kind, "0.5.9")
    else:
        crash = faults.scheduler_crash(row.crash_kind, "warmup", "sm120", row.backend, 8)
        text = crash.traceback
    # the template's line and the table's may differ only in the install path
    tail = row.log_line.split("fmhaRunner.cuh", 1)[-1]
    assert tail in text, (row.crash_kind, row.log_line)


def test_rows_cover_every_arch_for_the_profiles_backends():
    for backend in ("flashinfer", "triton", "trtllm_mla"):
        for role in ("prefill", "decode"):
            for arch in ARCHS:
                for version in ("0.5.9", "0.5.23"):
                    assert lookup(backend, role, arch, version) is not None, (
                        backend, role, arch, version,
                    )  # fmt: skip


def test_trtllm_mla_decode_facts_per_release_and_arch():
    assert lookup("trtllm_mla", "decode", "sm120", "0.5.9").outcome == "runs"
    assert lookup("trtllm_mla", "decode", "sm120", "0.5.9", "bfloat16").outcome == "crash"
    assert lookup("trtllm_mla", "decode", "sm120", "0.5.15").outcome == "runs"
    assert lookup("trtllm_mla", "decode", "sm120", "0.5.15", "bfloat16").outcome == "runs"
    assert lookup("trtllm_mla", "decode", "sm120", "0.5.16").outcome == "unverified"
    assert lookup("trtllm_mla", "decode", "sm120", "0.5.19").outcome == "crash"
    assert lookup("trtllm_mla", "decode", "sm120", "0.5.20").outcome == "unverified"
    assert lookup("trtllm_mla", "decode", "sm120", "0.5.23").outcome == "crash"
    assert lookup("trtllm_mla", "prefill", "sm120", "0.5.9").outcome == "crash"
    assert lookup("trtllm_mla", "decode", "sm90", "0.5.9").outcome == "refused"
    assert lookup("trtllm_mla", "decode", "sm100", "0.5.23").outcome == "runs"
    hybrid = {"prefill": "flashinfer", "decode": "trtllm_mla"}
    assert verdict(hybrid, "sm120", "0.5.9").runs
    assert not verdict(hybrid, "sm120", "0.5.23").runs
    assert not verdict({"prefill": "trtllm_mla", "decode": "trtllm_mla"}, "sm120", "0.5.9").runs


def _warnings(argv: list[str], version: str) -> list[str]:
    report = validate_argv([*M, *argv], load_release_spec(version))
    assert report.ok
    return [w.message for w in report.warnings]


def test_decode_only_trtllm_mla_is_not_called_sm100_only():
    """The old note said SM100-only for any trtllm_mla flag; decode runs on SM120 (XQA)."""
    found = _warnings(["--prefill-attention-backend", "flashinfer",
                       "--decode-attention-backend", "trtllm_mla"], "0.5.9")  # fmt: skip
    text = " ".join(found)
    assert "SM120" not in text.split("runs on")[0]  # no SM120 failure named
    assert "runs on SM100, SM120" in text
    assert "SM100-class" not in text and "not built for it" not in text
    # on 0.5.23 the decode path crashes on SM120: the warning says so, with the log line
    newer = " ".join(_warnings(["--prefill-attention-backend", "flashinfer",
                                "--decode-attention-backend", "trtllm_mla"], "0.5.23"))  # fmt: skip
    assert "multi_ctas_kv_counter_buffer is only supported by the trtllm-gen backend" in newer
    assert "trtllm_mla_backend.py:280-286" in newer  # its own release's source


def test_full_trtllm_mla_warns_prefill_crash_on_sm120():
    text = " ".join(_warnings(["--attention-backend", "trtllm_mla"], "0.5.9"))
    assert "prefill trtllm_mla on SM120" in text and "TllmGenFmhaRunner" in text


def test_flashinfer_as_prefill_only_gets_no_whole_pool_cast_warning():
    hybrid = _warnings(["--prefill-attention-backend", "flashinfer",
                        "--decode-attention-backend", "triton"], "0.5.9")  # fmt: skip
    assert not any("casts the whole KV pool" in w for w in hybrid)
    assert any(
        "casts the whole KV pool" in w
        for w in _warnings(["--attention-backend", "flashinfer"], "0.5.9")
    )


def test_render_refuses_trtllm_mla_decode_where_the_facts_say_it_crashes():
    with pytest.raises(FlagValidationError) as info:
        for_release(load_profile("trtllm_mla_decode"), "0.5.23")
    msg = str(info.value)
    assert "trtllm_mla_decode.yaml:" in msg and "crashes at the first decode" in msg
    assert "multi_ctas_kv_counter_buffer" in msg
    assert for_release(load_profile("trtllm_mla_decode"), "0.5.9").version == "0.5.9"


def test_render_cli_refusal_is_one_error_exit_2(capsys):
    from glmserve.cli import main

    rc = main(["render", "--profile", "trtllm_mla_decode", "--sglang-version", "0.5.23"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert "decode trtllm_mla on SM120 (RTX PRO 6000), sglang 0.5.23: crashes" in err


def _parse(profile: str, arch: str, version: str = "0.5.9", extra: tuple[str, ...] = ()):
    spec = load_profile(profile)
    argv = [*spec.argv, *extra, "--sim-gpu-arch", arch, "--sim-sglang-version", version]
    return options.parse(argv, {"GLMSERVE_PATCHES": ",".join(spec.patches)})


@pytest.mark.parametrize(
    "profile, arch, version, kind, phase",
    [
        ("trtllm_mla_decode", "sm120", "0.5.9", None, None),
        ("trtllm_mla_decode", "sm120", "0.5.23", "xqa_multi_ctas_buffer", "warmup"),
        ("trtllm_mla_decode", "sm90", "0.5.9", "trtllm_mla_not_blackwell", "args"),
        ("trtllm_mla_decode", "sm100", "0.5.23", None, None),
        ("trtllm_mla", "sm120", "0.5.9", "tllm_unsupported_arch", "warmup"),
        ("trtllm_mla", "sm100", "0.5.9", None, None),
        ("triton", "sm120", "0.5.23", None, None),
        ("triton", "sm90", "0.5.9", None, None),
        ("flashinfer_gtc", "sm120", "0.5.9", None, None),
        ("cutlass_mla", "sm120", "0.5.9", "no_kernel_image", "warmup"),
    ],
)
def test_simulator_outcome_follows_the_facts(profile, arch, version, kind, phase):
    o = _parse(profile, arch, version)
    assert (o.crash_kind, o.crash_at) == (kind, phase)


def test_decode_crash_is_at_warmup_and_bf16_xqa_crashes():
    o = _parse("trtllm_mla_decode", "sm120", "0.5.23", ("--cuda-graph-max-bs", "8"))
    assert (o.crash_kind, o.crash_at) == ("xqa_multi_ctas_buffer", "warmup")  # graphs still off
    spec = load_profile("trtllm_mla_decode")
    argv = [a for a in spec.argv if a != "--disable-cuda-graph"]
    o = options.parse([*argv, "--sim-sglang-version", "0.5.23"], {})
    assert (o.crash_kind, o.crash_at) == ("xqa_multi_ctas_buffer", "warmup")
    bf16 = options.parse([*spec.argv, "--kv-cache-dtype", "bf16"], {})
    assert (bf16.crash_kind, bf16.crash_at) == ("xqa_mla_bf16", "warmup")


def test_an_injected_fault_wins_over_the_facts():
    o = _parse("trtllm_mla_decode", "sm90", "0.5.9", ("--sim-crash-kind", "oom"))
    assert o.crash_kind == "oom"


def test_every_shipped_release_has_a_trtllm_mla_decode_fact_on_sm120():
    from glmserve.argspec.releases import available_versions, version_key

    for v in available_versions():
        if version_key(v) >= version_key("0.5.9"):
            assert lookup("trtllm_mla", "decode", "sm120", v) is not None, v


def test_trtllm_mla_as_general_backend_with_flashinfer_prefill_runs_on_0_5_9():
    """``--attention-backend trtllm_mla --prefill-attention-backend flashinfer``: decode is
    trtllm_mla (XQA on SM120), prefill flashinfer. The old warmup check crashed any
    ``--attention-backend trtllm_mla`` off SM100 whatever served prefill."""
    argv = ["--model", "x", "--attention-backend", "trtllm_mla",
            "--prefill-attention-backend", "flashinfer"]  # fmt: skip
    o = options.parse(argv, {})
    assert (o.crash_kind, o.crash_at) == (None, None)
    assert faults.sm100_only_crash(o.shape.attention_backend, o.gpu_arch) is None


def test_out_of_range_without_a_fact_stays_a_warning():
    from glmserve.argspec.validation import backend_refusal

    spec = load_profile("trtllm_mla_decode")
    assert backend_refusal(spec, "0.5.15") is None  # the facts say decode runs there
    assert "not verified" in (backend_refusal(spec, "0.5.16") or "")
    cut = load_profile("cutlass_mla")  # no cutlass_mla row past 0.5.19: nothing to refuse on
    assert backend_refusal(cut, "0.5.20") is None
