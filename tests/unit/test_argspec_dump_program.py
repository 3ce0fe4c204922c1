"""The dump program (``dump_program.py``), run by a real interpreter against a fake
``sglang`` package: the same program the dump script and the lifecycle code run against real
releases."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from glmserve.argspec.emulator import validate_argv
from glmserve.argspec.host_dump import argspec_from_dump, dump_command, dump_program_source
from glmserve.argspec.model import parse_argspec
from glmserve.errors import ConfigError

FAKE_SERVER_ARGS = """
import argparse, json
import definitely_not_installed_pkg as missing          # stubbed by the snippet
from also_missing.sub import Thing                      # stubbed, attribute access

class Sub(Thing, frozen=True):                          # subclassing a stub with kwargs
    pass

@missing.decorator
def helper():
    return 1

def json_list_type(value):
    return json.loads(value)

class DeprecatedAction(argparse.Action):
    def __init__(self, option_strings, dest, nargs=0, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)
    def __call__(self, parser, namespace, values, option_string=None):
        pass

class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        print("noise on stdout must not corrupt the JSON")
        parser.add_argument("--model-path", "--model", type=str, required=True)
        parser.add_argument("--tp-size", type=int, default=1)
        parser.add_argument("--mem-fraction-static", type=float, default=None)
        parser.add_argument("--attention-backend", choices=["a", "b"], default=None)
        parser.add_argument("--cuda-graph-bs", type=int, nargs="+")
        parser.add_argument("--hooks", type=json_list_type)
        parser.add_argument("--extra", type=json.loads, default={"k": float("inf")})
        parser.add_argument("--flag", action="store_true", help="ratio %(default)s")
        parser.add_argument("--old", action=DeprecatedAction, help="deprecated now")
        parser.add_argument("--toggle", action=argparse.BooleanOptionalAction)
"""


@pytest.fixture
def fake_sglang(tmp_path: Path) -> Path:
    pkg = tmp_path / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "0.0.1"\n')
    (pkg / "srt" / "__init__.py").write_text("")
    (pkg / "srt" / "server_args.py").write_text(FAKE_SERVER_ARGS)
    return tmp_path


def run_snippet(path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", dump_program_source()],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(path), **env},
        check=False,
    )


def test_snippet_is_stdlib_only() -> None:
    """Module-level imports are stdlib; inside functions only sglang itself and pydantic_core
    (used only when pydantic meets a stubbed type, so pydantic is there) are imported."""
    tree = ast.parse(dump_program_source())
    top_level, nested = set(), set()
    for node in ast.walk(tree):
        names: set[str] = set()
        if isinstance(node, ast.Import):
            names = {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = {node.module.split(".")[0]}
        (top_level if node in tree.body else nested).update(names)
    assert top_level <= set(sys.stdlib_module_names)
    assert nested - set(sys.stdlib_module_names) == {"sglang", "pydantic_core"}


def test_program_sent_to_hosts_is_the_module_itself() -> None:
    """What a host runs is ``dump_program.py`` byte for byte (the module ruff and these tests
    see), and importing that module runs nothing: no dump, no process-wide warnings filter."""
    import importlib
    import warnings

    from glmserve.argspec import dump_program

    assert dump_program_source() == Path(dump_program.__file__).read_text(encoding="utf-8")
    filters = list(warnings.filters)
    importlib.reload(dump_program)
    assert warnings.filters == filters


def test_dump_script_runs_the_same_program() -> None:
    """``scripts/dump_argspec.py`` builds its command with ``dump_command`` and carries no
    program of its own."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "dump_argspec.py"
    text = script.read_text(encoding="utf-8")
    assert "dump_command(self.py)" in text
    assert "add_cli_args" not in text


def test_dump_of_fake_release(fake_sglang: Path) -> None:
    proc = run_snippet(fake_sglang, GLMSERVE_ARGSPEC_MADE_BY="test")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["sglang_version"] == "0.0.1"
    assert data["made_by"] == "test"
    assert data["stubbed_modules"] == ["also_missing", "definitely_not_installed_pkg"]
    acts = {a["dest"]: a for a in data["actions"]}
    assert "help" not in acts  # argparse's own -h is left out
    assert acts["model_path"]["option_strings"] == ["--model-path", "--model"]
    assert acts["model_path"]["required"] is True
    assert acts["tp_size"]["type"] == "int"
    assert acts["mem_fraction_static"]["type"] == "float"
    assert acts["attention_backend"]["choices"] == ["a", "b"]
    assert acts["cuda_graph_bs"]["nargs"] == "+"
    assert acts["hooks"]["type"] == "sglang.srt.server_args.json_list_type"
    assert acts["extra"]["type"] == "json.loads"
    assert acts["extra"]["default"] == {"k": "inf"}
    assert acts["flag"]["action"] == "_StoreTrueAction"
    assert acts["flag"]["help"] == "ratio False"
    assert acts["old"]["action"] == "DeprecatedAction"
    assert acts["toggle"]["option_strings"] == ["--toggle", "--no-toggle"]

    spec = parse_argspec(data, "fake")
    assert argspec_from_dump("import noise\n" + proc.stdout, "host").actions == spec.actions
    assert validate_argv(["--model", "m", "--no-toggle", "--cuda-graph-bs", "1", "2"], spec).ok
    assert not validate_argv(["--model", "m", "--hooks", "[1,"], spec).ok
    assert validate_argv(["--model", "m", "--old"], spec).warnings


def test_stubbing_can_be_forbidden(fake_sglang: Path) -> None:
    proc = run_snippet(fake_sglang, GLMSERVE_ARGSPEC_STUB="0")
    assert proc.returncode != 0
    assert "definitely_not_installed_pkg" in proc.stderr


def test_missing_sglang_fails_loudly() -> None:
    proc = subprocess.run(
        # -S: no site-packages, so no sglang
        [sys.executable, "-S", "-c", dump_program_source()],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    assert "No module named 'sglang'" in proc.stderr


def test_dump_command_runs_the_snippet(fake_sglang: Path) -> None:
    argv = dump_command(sys.executable)
    assert argv[1:] == ["-c", dump_program_source()]
    env = {**os.environ, "PYTHONPATH": str(fake_sglang)}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert argspec_from_dump(proc.stdout, "gpu1").version == "0.0.1"


def test_garbled_dump_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="gpu1: argspec dump is not JSON"):
        argspec_from_dump("Traceback (most recent call last):\n  boom", "gpu1")


def test_installed_package_missing_a_name_is_stubbed(tmp_path: Path) -> None:
    """0.4.x does ``from triton.runtime.cache import default_cache_dir``, a name newer triton
    dropped: the snippet stubs the whole package instead of failing the dump."""
    pkg = tmp_path / "sglang" / "srt"
    pkg.mkdir(parents=True)
    (tmp_path / "sglang" / "__init__.py").write_text('__version__ = "0.0.2"\n')
    (pkg / "__init__.py").write_text("")
    (pkg / "server_args.py").write_text(
        "from agedlib.runtime.cache import default_cache_dir\n"
        "class ServerArgs:\n"
        "    @staticmethod\n"
        "    def add_cli_args(parser):\n"
        "        parser.add_argument('--model-path')\n"
    )
    aged = tmp_path / "agedlib" / "runtime"
    aged.mkdir(parents=True)
    (tmp_path / "agedlib" / "__init__.py").write_text("")
    (aged / "__init__.py").write_text("")
    (aged / "cache.py").write_text("def get_cache_manager():\n    return None\n")
    proc = run_snippet(tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["stubbed_modules"] == ["agedlib"]
    assert [a["dest"] for a in data["actions"]] == ["model_path"]
    # A name missing from sglang itself is a broken release, not something to stub.
    (pkg / "server_args.py").write_text("from sglang import not_there\n")
    proc = run_snippet(tmp_path)
    assert proc.returncode != 0
    assert "cannot import name 'not_there'" in proc.stderr
