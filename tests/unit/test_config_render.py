"""Rendered launch scripts: valid bash, and a real bash hands the program exactly the argv
and environment the profile meant, whatever hostile characters the values hold."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glmserve.config.profiles import load_profile, simulate
from glmserve.config.render import render_json, render_script
from glmserve.config.spec import LaunchSpec

HOSTILE = [
    "it's",
    'say "hi"',
    "$(touch /tmp/glmserve_pwned)",
    "`id`",
    "a; rm -rf /",
    "line1\nline2",
    "*",
    "~/x",
    "${HOME}",
    "ünï€ødé ✓",
    "--looks-like-a-flag",
    "back\\slash",
    "tab\there",
    "",
    "!bang",
    "a&&b||c|d>e<f",
]


@pytest.fixture(scope="module")
def argv_dumper(tmp_path_factory) -> Path:
    """A stand-in 'python3' that prints its argv and chosen env vars as JSON."""
    p = tmp_path_factory.mktemp("bin") / "dump-argv"
    p.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "print(json.dumps({'argv': sys.argv[1:], 'env': {k: v for k, v in os.environ.items()"
        " if k.startswith('T_') or k in ('GLMSERVE_PATCHES', 'PYTHONPATH')}}))\n"
    )
    p.chmod(0o755)
    return p


def run_script(script: str, tmp_path: Path) -> dict:
    path = tmp_path / "launch.sh"
    path.write_text(script)
    syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    res = subprocess.run(["bash", str(path)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_shipped_profiles_render_valid_bash(tmp_path, argv_dumper):
    for name in ("trtllm_mla", "cutlass_mla", "flashinfer_gtc", "triton", "trtllm_mla_decode"):
        spec = load_profile(name)
        spec.venv = None
        spec.python = str(argv_dumper)
        got = run_script(render_script(spec), tmp_path)
        assert got["argv"] == ["-u", "-m", "sglang.launch_server", *spec.argv]


def test_script_structure():
    text = render_script(load_profile("flashinfer_gtc"))
    lines = text.splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines
    assert "source /root/sglang-venv/bin/activate" in lines
    assert "export SAFETENSORS_FAST_GPU=1" in lines
    assert "export GLMSERVE_PATCHES=flashinfer_mla_gather_cast" in lines
    assert any(line.startswith("exec python3 -u -m sglang.launch_server") for line in lines)


def test_patched_profile_puts_runtime_dir_first_on_pythonpath(tmp_path, argv_dumper):
    spec = load_profile("flashinfer_gtc")
    spec.venv, spec.python = None, str(argv_dumper)
    got = run_script(render_script(spec), tmp_path)
    assert got["env"]["PYTHONPATH"] == str(tmp_path.resolve() / "runtime")
    assert got["env"]["GLMSERVE_PATCHES"] == "flashinfer_mla_gather_cast"


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_reach_the_program_verbatim(value, tmp_path, argv_dumper):
    spec = LaunchSpec(
        profile="x",
        argv=["--served-model-name", value, f"--{value[:3]}x", value],
        env={"T_VAL": value},
        python=str(argv_dumper),
    )
    got = run_script(render_script(spec), tmp_path)
    assert got["argv"][3:] == spec.argv
    assert got["env"]["T_VAL"] == value
    assert not Path("/tmp/glmserve_pwned").exists()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    values=st.lists(
        st.text(
            st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30
        ),
        min_size=1,
        max_size=4,
    )
)
def test_property_any_text_round_trips_through_bash(values, tmp_path, argv_dumper):
    argv = []
    for i, v in enumerate(values):
        argv += [f"--flag{i}", v]
    spec = LaunchSpec(profile="p", argv=argv, env={"T_0": values[0]}, python=str(argv_dumper))
    got = run_script(render_script(spec), tmp_path)
    assert got["argv"][3:] == argv
    assert got["env"]["T_0"] == values[0]


def test_venv_with_tilde_and_spaces_is_quoted(tmp_path, argv_dumper):
    venv = tmp_path / "my venv $x"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("export T_ACTIVATED=yes\n")
    spec = LaunchSpec(profile="p", argv=[], venv=str(venv), python=str(argv_dumper))
    assert run_script(render_script(spec), tmp_path)["env"]["T_ACTIVATED"] == "yes"
    home_venv = LaunchSpec(profile="p", argv=[], venv="~/my venv $x", python=str(argv_dumper))
    assert run_script(render_script(home_venv), tmp_path)["env"]["T_ACTIVATED"] == "yes"


def test_simulate_swaps_only_the_launcher():
    spec = load_profile("trtllm_mla", ["sim.crash-at=warmup"])
    sim = simulate(spec)
    assert sim.argv == spec.argv
    assert sim.command()[1:4] == ["-u", "-m", "glmserve.simulator"]
    assert sim.command()[-2:] == ["--sim-crash-at", "warmup"]
    assert "--sim-crash-at" not in spec.command()
    assert sim.venv is None


def test_render_json_has_argv_env_and_metadata():
    data = render_json(load_profile("flashinfer_gtc"))
    assert data["profile"] == "flashinfer_gtc"
    assert data["patches"] == ["flashinfer_mla_gather_cast"]
    assert data["command"][:4] == ["python3", "-u", "-m", "sglang.launch_server"]
    assert data["env"]["NCCL_IB_DISABLE"] == "1"
    json.dumps(data)


def test_argv_format_round_trips_with_shlex():
    spec = load_profile("trtllm_mla", ["server.served-model-name=a b'c"])
    assert shlex.split(shlex.join(spec.argv)) == spec.argv
