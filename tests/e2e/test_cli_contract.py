"""The installed ``glmserve`` executable: exit codes and one-line errors (no tracebacks)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

GLMSERVE = shutil.which("glmserve")
pytestmark = pytest.mark.skipif(GLMSERVE is None, reason="glmserve console script not installed")


def run(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([GLMSERVE, *args], capture_output=True, text=True, timeout=60, **kw)


def test_help_lists_every_verb():
    res = run("--help")
    assert res.returncode == 0
    for verb in ("profiles", "render"):
        assert verb in res.stdout


def test_profiles_json():
    res = run("profiles", "--json")
    assert res.returncode == 0
    names = {row["name"] for row in json.loads(res.stdout)}
    assert {"glm5-nvfp4-tp8", "trtllm_mla", "cutlass_mla", "flashinfer_gtc"} <= names


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["render", "--profile", "nope"], "unknown profile 'nope'"),
        (["render", "--profile", "trtllm_mla", "--set", "bogus=1"], "unknown key 'bogus'"),
        (["render", "--profile", "/nonexistent/x.yaml"], "profile file not found"),
    ],
)
def test_config_errors_exit_2_with_one_line(args, fragment):
    res = run(*args)
    assert res.returncode == 2
    assert fragment in res.stderr
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_yaml_error_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("server:\n  port: 1\n  host: [oops\n")
    res = run("render", "--profile", str(bad))
    assert res.returncode == 2
    assert f"{bad}:" in res.stderr and "YAML syntax error" in res.stderr
    assert "Traceback" not in res.stderr


def test_debug_shows_the_traceback():
    res = run("--debug", "render", "--profile", "nope")
    assert res.returncode == 2
    assert "Traceback" in res.stderr


def test_render_argv_matches_json_argv():
    argv = run("render", "-p", "trtllm_mla", "--format", "argv")
    js = run("render", "-p", "trtllm_mla", "--json")
    assert argv.returncode == js.returncode == 0
    import shlex

    assert shlex.split(argv.stdout) == json.loads(js.stdout)["argv"]
