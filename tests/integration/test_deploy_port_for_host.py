"""check / launch spell the flags for the SGLang release installed where they run.

The "host" is this machine through glmserve's local transport; its python sees the real
0.5.23 wheel first on ``sys.path`` (``tests/fixtures/sglang_releases.py``), so
``importlib.metadata`` reports 0.5.23 and ``check`` dumps that release's live argparse spec,
exactly as on a GPU box that upgraded SGLang.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from tests.fixtures.sglang_releases import sglang_source

from glmserve.config.profiles import load_profile, simulate
from glmserve.deploy.preflight import check_argspec, check_python, port_for_host
from glmserve.errors import FlagValidationError
from glmserve.remote.hosts import get_host
from glmserve.remote.transport import transport_for

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


@pytest.fixture(scope="module")
def python_with_0_5_23(tmp_path_factory) -> str:
    """A python whose ``sglang`` is the 0.5.23 wheel (metadata and package)."""
    source = sglang_source("0.5.23")
    wrapper = Path(tmp_path_factory.mktemp("py523")) / "python3"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={source} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def _spec(profile: str, python: str):  # type: ignore[no-untyped-def]
    return dataclasses.replace(load_profile(profile), python=python, venv=None)


def test_launch_spells_the_flags_for_the_hosts_release(python_with_0_5_23):
    said: list[str] = []
    t = transport_for(get_host("local"))
    ported = port_for_host(_spec("trtllm_mla", python_with_0_5_23), t, said.append)
    joined = " ".join(ported.argv)
    assert "--dsa-decode-backend trtllm --dsa-prefill-backend trtllm" in joined
    assert "--nsa-" not in joined and "--disable-cuda-graph" not in joined
    assert any(line.startswith("sglang 0.5.23 on the host: --nsa-decode-backend") for line in said)


def test_launch_refuses_a_choice_the_hosts_release_dropped(python_with_0_5_23):
    t = transport_for(get_host("local"))
    with pytest.raises(FlagValidationError) as info:
        port_for_host(_spec("cutlass_mla", python_with_0_5_23), t)
    assert "sglang 0.5.23 on the host" in str(info.value) and "cutlass_mla.yaml:" in str(info.value)


def test_the_simulator_keeps_the_flags_as_written(python_with_0_5_23):
    spec = simulate(_spec("trtllm_mla", python_with_0_5_23))
    assert port_for_host(spec, transport_for(get_host("local"))).argv == spec.argv


def test_check_validates_the_flags_as_the_hosts_release_spells_them(python_with_0_5_23):
    t = transport_for(get_host("local"))
    spec = _spec("trtllm_mla", python_with_0_5_23)
    _prow, srow, version = check_python(t, spec)
    assert version == "0.5.23", srow.detail
    row = check_argspec(t, spec, version)
    assert row.status in ("ok", "warn"), row.detail
    assert "argv valid for sglang 0.5.23" in row.detail
    assert "--nsa-decode-backend -> --dsa-decode-backend" in row.detail


def test_a_deployment_launch_refuses_before_anything_starts(
    python_with_0_5_23, tmp_path, monkeypatch
):
    """The launch path itself ports the flags (not only the helper): cutlass_mla, which 0.5.23
    dropped, is refused on that host, and no run is recorded or started."""
    from glmserve.deploy.deployment import Deployment
    from glmserve.deploy.plan import plan_spec
    from glmserve.store import RunStore

    monkeypatch.setenv("GLMSERVE_HOME", str(tmp_path / "home"))
    store = RunStore.open()
    p = plan_spec(_spec("cutlass_mla", python_with_0_5_23), get_host("local"))
    with pytest.raises(FlagValidationError, match=r"sglang 0\.5\.23 on the host"):
        Deployment.launch(p, store=store)
    assert store.list_runs() == []
