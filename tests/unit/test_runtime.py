"""The shipped runtime tree: what is uploaded, and how sitecustomize behaves at start-up.

Each behaviour runs in a fresh ``python`` whose PYTHONPATH starts with the runtime tree,
exactly as the rendered launch script starts SGLang (no glmserve installed on that path).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from glmserve.runtime import runtime_files, runtime_root
from glmserve.runtime.glmserve_runtime import parse_patch_names

ARMED = "glmserve runtime: patches armed: "


def _shipped_copy(tmp_path: Path) -> Path:
    """Write runtime_files() to a directory, as launch does into <run dir>/runtime."""
    root = tmp_path / "runtime"
    for rel, data in runtime_files().items():
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    return root


def _python(code: str, pythonpath: list[Path], env: dict[str, str] | None = None, cwd=None):
    full_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GLMSERVE_PATCHES")}
    full_env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        check=False,
    )


def test_runtime_files_ship_the_bootstrap_hook_patch_and_kernel():
    files = runtime_files()
    assert {
        "sitecustomize.py",
        "glmserve_runtime/__init__.py",
        "glmserve_runtime/patches/__init__.py",
        "glmserve_runtime/patches/flashinfer_mla_gather_cast.py",
        "glmserve_runtime/kernels/__init__.py",
        "glmserve_runtime/kernels/gather_cast.py",
    } <= set(files)
    assert not [p for p in files if "__pycache__" in p or not p.endswith(".py")]
    assert "__init__.py" not in files  # glmserve.runtime itself stays local
    for rel, data in files.items():
        assert (runtime_root() / rel).read_bytes() == data


def test_shipped_tree_imports_nothing_from_glmserve():
    """On the GPU host only the shipped files exist: no `glmserve` import may be needed."""
    for rel, data in runtime_files().items():
        text = data.decode()
        assert "import glmserve\n" not in text and "from glmserve" not in text, rel


def test_parse_patch_names():
    assert parse_patch_names(" a, b,,a ,") == ["a", "b"]
    assert parse_patch_names("") == []
    assert parse_patch_names(None) == []


def test_without_the_env_var_nothing_is_armed_but_the_shadowed_sitecustomize_runs(tmp_path):
    runtime = _shipped_copy(tmp_path)
    other = tmp_path / "venv_site"
    other.mkdir()
    (other / "sitecustomize.py").write_text(
        "import sys\nsys.stderr.write('venv sitecustomize ran\\n')\n"
    )
    proc = _python(
        "import sys; print(sorted(m for m in sys.modules if 'glmserve_runtime' in m))",
        [runtime, other],
    )
    assert proc.returncode == 0, proc.stderr
    assert "venv sitecustomize ran" in proc.stderr
    assert ARMED not in proc.stderr
    assert proc.stdout.strip() == "[]"  # the hook package was not even imported


def test_armed_line_chaining_and_hook_installed(tmp_path):
    runtime = _shipped_copy(tmp_path)
    other = tmp_path / "venv_site"
    other.mkdir()
    (other / "sitecustomize.py").write_text(
        "import sys\nsys.stderr.write('venv sitecustomize ran\\n')\n"
    )
    proc = _python(
        """
        import os, sys
        import glmserve_runtime
        print(any(isinstance(f, glmserve_runtime.PatchFinder) for f in sys.meta_path))
        print(os.getpid())
        """,
        [runtime, other],
        env={"GLMSERVE_PATCHES": "flashinfer_mla_gather_cast"},
    )
    assert proc.returncode == 0, proc.stderr
    hooked, pid = proc.stdout.split()
    assert hooked == "True"
    assert f"{ARMED}flashinfer_mla_gather_cast (pid {pid})" in proc.stderr.splitlines()
    assert "venv sitecustomize ran" in proc.stderr


def test_unknown_patch_name_kills_the_process_with_a_failed_line(tmp_path):
    runtime = _shipped_copy(tmp_path)
    proc = _python("print('should not run')", [runtime], env={"GLMSERVE_PATCHES": "nope"})
    assert proc.returncode == 3
    assert "should not run" not in proc.stdout
    assert proc.stderr.startswith("glmserve patch nope FAILED: unknown patch")


_DEMO_PATCH = """
TARGET = "demo_target"
def apply(module):
    if getattr(module, "BROKEN", False):
        from glmserve_runtime import fail
        raise fail("demo", "demo_target.BROKEN is set")
    module.patched = True
    return "9.9.9"
"""


@pytest.mark.parametrize("broken", [False, True])
def test_hook_patches_the_target_on_import_in_a_spawned_child(tmp_path, broken):
    """The hook, armed by sitecustomize, patches a module when a multiprocessing-spawn
    child (as SGLang starts its workers) imports it; a patch that refuses kills the import."""
    runtime = _shipped_copy(tmp_path)
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "demo_patch.py").write_text(_DEMO_PATCH)
    (mods / "demo_target.py").write_text(f"BROKEN = {broken}\npatched = False\n")
    # A tiny sitecustomize chained after ours registers the demo patch before arming.
    (mods / "sitecustomize.py").write_text(
        "import glmserve_runtime\n"
        "glmserve_runtime.KNOWN_PATCHES['demo'] = 'demo_patch'\n"
        "glmserve_runtime.arm('demo')\n"
    )
    driver = mods / "driver.py"
    driver.write_text(
        textwrap.dedent(
            """
            import multiprocessing as mp, os, sys

            def child(q):
                try:
                    import demo_target
                    q.put((os.getpid(), "ok", demo_target.patched))
                except Exception as exc:
                    q.put((os.getpid(), "error", f"{type(exc).__name__}: {exc}"))

            if __name__ == "__main__":
                ctx = mp.get_context("spawn")
                q = ctx.Queue()
                p = ctx.Process(target=child, args=(q,))
                p.start()
                print(*q.get(timeout=60))
                p.join(60)
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "GLMSERVE_PATCHES"}
    env["PYTHONPATH"] = os.pathsep.join([str(runtime), str(mods)])
    env["GLMSERVE_PATCHES"] = "flashinfer_mla_gather_cast"  # arms sitecustomize
    proc = subprocess.run(
        [sys.executable, str(driver)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    child_pid, status, detail = proc.stdout.strip().split(maxsplit=2)
    armed = [ln for ln in proc.stderr.splitlines() if ln.startswith(ARMED)]
    assert any(f"(pid {child_pid})" in ln for ln in armed), proc.stderr  # ran in the child
    assert len({ln.rsplit("(pid ", 1)[1] for ln in armed}) >= 2  # parent and child
    if broken:
        assert status == "error"
        assert "glmserve patch demo FAILED: demo_target.BROKEN is set" in detail
        assert "glmserve patch demo FAILED: demo_target.BROKEN is set" in proc.stderr
        assert "glmserve patch demo active" not in proc.stderr
    else:
        assert (status, detail) == ("ok", "True")
        assert f"glmserve patch demo active (sglang 9.9.9, pid {child_pid})" in proc.stderr


def test_sitecustomize_loads_in_a_python_dash_m_process(tmp_path):
    """Under ``python3 -m <module>`` (how the simulator and SGLang are started) the shipped
    sitecustomize runs before the module; without sglang it only logs that it is armed."""
    runtime = _shipped_copy(tmp_path)
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "fake_server.py").write_text("import sys, os\nprint('server up', os.getpid())\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(runtime), str(mods)])
    env["GLMSERVE_PATCHES"] = "flashinfer_mla_gather_cast"
    proc = subprocess.run(
        [sys.executable, "-u", "-m", "fake_server"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    pid = proc.stdout.split()[-1]
    assert proc.stderr.splitlines() == [f"{ARMED}flashinfer_mla_gather_cast (pid {pid})"]


def test_the_real_simulator_process_loads_the_shipped_sitecustomize(tmp_path):
    """``python3 -m glmserve.simulator`` (the launcher --simulate uses) with the shipped
    runtime first on PYTHONPATH logs the armed line; it imports no sglang, so nothing more."""
    pytest.importorskip("glmserve.simulator")
    runtime = _shipped_copy(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(runtime)
    env["GLMSERVE_PATCHES"] = "flashinfer_mla_gather_cast"
    proc = subprocess.run(
        [sys.executable, "-u", "-m", "glmserve.simulator", "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines and lines[0].startswith(f"{ARMED}flashinfer_mla_gather_cast (pid ")
    assert not [ln for ln in lines if "glmserve patch flashinfer_mla_gather_cast" in ln]


_TWO_TARGET_PATCH = """
TARGET = "demo_one"
TARGETS = ("demo_one", "demo_two")


def apply(module):
    module.patched = True
    return "9.9.9"
"""


def test_a_patch_with_several_targets_patches_each_module_once(tmp_path):
    """A patch may list ``TARGETS`` (mla_fp8_decode: the triton and the flashinfer MLA
    backends): the hook patches every listed module when it is imported, each once."""
    runtime = _shipped_copy(tmp_path)
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "demo_multi.py").write_text(_TWO_TARGET_PATCH)
    for name in ("demo_one", "demo_two"):
        (mods / f"{name}.py").write_text("patched = False\n")
    proc = _python(
        """
        import glmserve_runtime
        glmserve_runtime.KNOWN_PATCHES['multi'] = 'demo_multi'
        glmserve_runtime.arm('multi')
        import demo_one, demo_two
        print(demo_one.patched, demo_two.patched, glmserve_runtime.applied_patches())
        """,
        [runtime, mods],
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split(maxsplit=2) == ["True", "True", "{'multi': '9.9.9'}\n"]
    assert proc.stderr.count("glmserve patch multi active (sglang 9.9.9") == 2
