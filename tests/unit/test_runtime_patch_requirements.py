"""One source of truth for the gather-cast patch's requirements (issue 10 #3).

``launch_requirement_failures`` in the patch module is what render/validate/check and the
simulator ask; the worker raises with the same reason strings. A profile extending
flashinfer_gtc with CUDA graphs on used to pass ``render --sglang-version 0.5.9`` while the
real patch raises in ``init_cuda_graph_state``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.fixtures.cli import run_glmserve

from glmserve.config.profiles import load_profile
from glmserve.errors import FlagValidationError
from glmserve.runtime.glmserve_runtime.patches import flashinfer_mla_gather_cast as gtc

GRAPHS_ON = (
    "extends: flashinfer_gtc\ndescription: gtc with graphs\nserver:\n  disable-cuda-graph: false\n"
)


def _profile(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gtc_graphs.yaml"
    path.write_text(text)
    return str(path)


def test_graphs_on_profile_is_refused_at_render_naming_the_key(tmp_path):
    proc = run_glmserve("render", "-p", _profile(tmp_path, GRAPHS_ON), "--sglang-version", "0.5.9")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr
    assert "server.disable-cuda-graph must be true for patch flashinfer_mla_gather_cast" in err
    assert f"glmserve patch flashinfer_mla_gather_cast FAILED: {gtc.CUDA_GRAPH_REASON}" in err


def test_shipped_gtc_profile_still_validates_on_supported_releases():
    assert load_profile("flashinfer_gtc", sglang_version="0.5.9").patches == [gtc.PATCH]


@pytest.mark.parametrize(
    ("override", "key", "reason"),
    [
        (
            "server.kv-cache-dtype=bf16",
            "server.kv-cache-dtype",
            gtc.kv_dtype_reason("torch.bfloat16"),
        ),
        ("server.dtype=float16", "server.dtype", gtc.model_dtype_reason("torch.float16")),
    ],
)
def test_dtype_requirements_are_validation_errors(override, key, reason):
    with pytest.raises(FlagValidationError) as info:
        load_profile("flashinfer_gtc", overrides=[override], sglang_version="0.5.9")
    assert f"{key} must be" in str(info.value)
    assert reason in str(info.value)


def test_requirement_list_matches_what_the_worker_checks():
    ok = {"disable_cuda_graph": True, "kv_cache_dtype": "fp8_e4m3", "dtype": "auto"}
    assert gtc.launch_requirement_failures(ok, "0.5.23", kv_row=(576, 512, 64)) == []
    bad = gtc.launch_requirement_failures(
        {"kv_cache_dtype": "fp8_e5m2"}, "0.5.7", kv_row=(640, 512, 64)
    )
    assert [(r.flag, r.phase) for r in bad] == [
        ("sglang", "import"),
        ("--kv-cache-dtype", "init"),
        ("--model-path", "init"),
        ("--disable-cuda-graph", "cuda_graph"),
    ]
    assert bad[0].reason == gtc.unsupported_version_reason("0.5.7")
    # any of the three ways SGLang turns graphs off satisfies the requirement
    for off in ({"cuda_graph_max_bs": 0}, {"cuda_graph_backend_decode": "disabled"}):
        assert not gtc.launch_requirement_failures({**off, "kv_cache_dtype": "fp8_e4m3"}, None)


def test_check_flags_row_fails_for_a_patch_requirement(tmp_path, monkeypatch):
    """``glmserve check`` validates against the host's live spec: same requirement list."""
    from glmserve.argspec import releases
    from glmserve.deploy import preflight

    monkeypatch.setenv("GLMSERVE_HOME", str(tmp_path / "home"))
    cache = tmp_path / "home" / "argspecs" / "sglang-0.5.9.json"
    cache.parent.mkdir(parents=True)
    cache.write_text("{}")  # the host's dump, cached: stands for the 0.5.9 spec below
    shipped = releases.load_argspec("0.5.9")
    monkeypatch.setattr(releases, "load_argspec", lambda path: shipped)
    spec = load_profile(_profile(tmp_path, GRAPHS_ON))
    row = preflight.check_argspec(None, spec, "0.5.9")  # type: ignore[arg-type]
    assert row.status == "fail"
    assert f"FAILED: {gtc.CUDA_GRAPH_REASON}" in row.detail
    ok = preflight.check_argspec(None, load_profile("flashinfer_gtc"), "0.5.9")  # type: ignore[arg-type]
    assert ok.status != "fail", ok.detail


def test_check_simulate_fails_for_a_patch_requirement(tmp_path):
    """Review: ``check --simulate`` skipped the flags row, so it said ok (exit 0) for a
    profile whose simulated workers then die with PATCH_FAILED at ``launch --simulate``."""
    proc = run_glmserve("check", "-p", _profile(tmp_path, GRAPHS_ON), "--simulate")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "server.disable-cuda-graph" in proc.stdout, proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == "error: 1 blocking check(s): flags"
    ok = run_glmserve("check", "-p", "flashinfer_gtc", "--simulate")
    assert ok.returncode == 0, ok.stdout + ok.stderr
