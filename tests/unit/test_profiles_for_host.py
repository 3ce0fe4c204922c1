"""``glmserve profiles --for-host``: which shipped profiles can run on a host's GPU and SGLang
release, and why not, from the backend facts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from glmserve.argspec.host_fit import compute_cap_arch, profile_fit
from glmserve.cli import main
from glmserve.config.profiles import load_profile


def _run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    got = capsys.readouterr()
    return int(rc or 0), got.out, got.err


def test_compute_cap_to_arch():
    assert compute_cap_arch("12.0\n12.0\n") == "sm120"
    assert compute_cap_arch("9.0\n") == "sm90"
    assert compute_cap_arch("9.0\n12.0\n") is None  # mixed GPUs: no single answer
    assert compute_cap_arch("") is None


def test_fit_per_profile_on_sm120():
    assert profile_fit(load_profile("trtllm_mla_decode"), "sm120", "0.5.9")["runs"] is True
    late = profile_fit(load_profile("trtllm_mla_decode"), "sm120", "0.5.23")
    assert late["runs"] is False
    assert any("multi_ctas_kv_counter_buffer" in r for r in late["reasons"])
    trt = profile_fit(load_profile("trtllm_mla"), "sm120", "0.5.9")
    assert trt["runs"] is False and any("TllmGenFmhaRunner" in r for r in trt["reasons"])
    assert profile_fit(load_profile("trtllm_mla"), "sm100", "0.5.9")["runs"] is True
    tri = profile_fit(load_profile("triton"), "sm120", "0.5.23")
    assert tri["runs"] is True and any("p.to(v.dtype)" in r for r in tri["reasons"])
    mid = profile_fit(load_profile("trtllm_mla_decode"), "sm120", "0.5.16")
    assert mid["runs"] is False and any("not verified" in r for r in mid["reasons"])


def test_for_host_reads_the_gpu_on_the_host(capsys, tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '12.0\\n12.0\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    rc, out, err = _run(capsys, "profiles", "--for-host", "local", "--sglang-version", "0.5.23",
                        "--json")  # fmt: skip
    assert rc == 0, err
    data = json.loads(out)
    assert (data["gpu_arch"], data["sglang"]) == ("sm120", "0.5.23")
    verdicts = {p["name"]: p["runs"] for p in data["profiles"]}
    assert verdicts["triton"] is True and verdicts["flashinfer_gtc"] is True
    assert verdicts["trtllm_mla"] is False and verdicts["trtllm_mla_decode"] is False


def test_for_host_without_a_gpu_is_one_line(capsys, tmp_path, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", f"{empty}{os.pathsep}/bin{os.pathsep}/usr/bin")
    if any((Path(d) / "nvidia-smi").exists() for d in ("/bin", "/usr/bin")):
        pytest.skip("this machine has nvidia-smi")
    rc, _out, err = _run(capsys, "profiles", "--for-host", "local", "--sglang-version", "0.5.9")
    assert rc == 2 and "Traceback" not in err
    assert "no GPU architecture from nvidia-smi" in err and "--gpu-arch" in err


def test_given_arch_and_release_need_no_host(capsys):
    rc, out, _err = _run(capsys, "profiles", "--gpu-arch", "9.0", "--sglang-version", "0.5.9")
    assert rc == 0 and "sm90, sglang 0.5.9" in out
    assert "refused at start-up" in out  # trtllm_mla(_decode): ServerArgs refuses on SM90
    rc, _out, err = _run(capsys, "profiles", "--gpu-arch", "sm7", "--sglang-version", "0.5.9")
    assert rc == 2 and "--gpu-arch 'sm7'" in err
    rc, _out, err = _run(capsys, "profiles", "--gpu-arch", "sm120")
    assert rc == 2 and "--sglang-version" in err
