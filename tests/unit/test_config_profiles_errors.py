"""Hostile and careless profile input through the real CLI entry point.

Every bad profile, profile name or ``--set`` must end as exit 2 with one line on stderr that
names the file:line (or the flag/key), never a traceback; whatever a profile holds, the
rendered launch script passes it to the server as data (checked by running the script).
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from glmserve.cli import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    captured = capsys.readouterr()
    return int(rc), captured.out, captured.err


def one_line_error(err: str) -> str:
    """The single `error: ...` line the CLI printed (and nothing else)."""
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0]


@pytest.fixture
def profdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An isolated configs/profiles/ the test writes (bytes or text) into."""
    d = tmp_path / "configs" / "profiles"
    d.mkdir(parents=True)
    monkeypatch.setenv("GLMSERVE_CONFIGS", str(tmp_path / "configs"))

    def write(name: str, content: str | bytes) -> Path:
        p = d / f"{name}.yaml"
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        return p

    return write


# Billion laughs: 9 levels of 9 aliases = 9^9 (387M) leaves once anything walks the data.
# Under `sim:` (whose values used to be rendered unchecked) it would have been expanded.
BOMB = "sim:\n" + "".join(
    f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" if i else "  l0: &l0 [lol]\n"
    for i in range(10)
)


@pytest.mark.parametrize(
    "content, where, fragment",
    [
        ("server:\n  port: 1\n  port: 2\n", 3, "duplicate key 'port' (first at line 2)"),
        ("description: a\nserver: {}\ndescription: b\n", 3, "duplicate key 'description'"),
        (b"description: ok\nserver:\n  model-path: caf\xe9\n", 3, "not UTF-8"),
        ("server:\n\tport: 1\n", 2, "YAML syntax error"),
        ("server: " + "[" * 500 + "]" * 500 + "\n", 1, "nested more than 64 levels"),
        ("server: " + "{a: " * 400 + "1" + "}" * 400 + "\n", 1, "nested more than 64 levels"),
        ("- a\n- b\n", 1, "must be a mapping"),
        ("just text\n", 1, "must be a mapping"),
        ("server:\n  enable-metrics: yes\n", 2, "'yes' is read by YAML as the boolean true"),
        ("env:\n  MODE: off\n", 2, "'off' is read by YAML as the boolean false"),
        ("server:\n  x: 010\n", 2, "octal"),
        ("sglang: 0.5\n", 1, "'sglang' must be a str, got float"),
        ("server:\n  x: 2024-01-01\n", 2, "server.x: YAML read datetime.date"),
        ("server:\n  x: !!binary aGk=\n", 2, "server.x: YAML read b'hi' as bytes"),
        ("server:\n  x: !!set {a, b}\n", 2, "as set"),
        ("server:\n  x: {when: 2024-01-01}\n", 2, "plain JSON data"),
        ("server:\n  x: [[1]]\n", 2, "list values must hold scalars"),
        ("sim:\n  x: [[1]]\n", 2, "sim.x: list values must hold scalars"),
        ("env:\n  'A B': 1\n", 2, "invalid environment variable name 'A B'"),
        ("env:\n  'X;rm -rf /': 1\n", 2, "invalid environment variable name"),
        ("env:\n  '$(id)': 1\n", 2, "invalid environment variable name"),
        ("env:\n  1: x\n", 2, "invalid environment variable name 1"),
        ("env:\n  A: [1]\n", 2, "env values must be scalars"),
        ("server:\n  'a b': 1\n", 2, "flag names without '--'"),
        ("server:\n  'a=b': 1\n", 2, "flag names without '--'"),
        ("server:\n  '--port': 1\n", 2, "flag names without '--'"),
        ("server:\n  1: 1\n", 2, "flag names without '--'"),
        ("nodes: [1]\n", 1, "nodes lists host names"),
        ("nodes: ['-oProxyCommand=x']\n", 1, "nodes lists host names"),
        ("extends: ../../../../etc/passwd\n", 1, "extends takes a profile name, not a path"),
        ("extends: /etc/passwd\n", 1, "extends takes a profile name, not a path"),
        ("extends: 5\n", 1, "'extends' must be a str"),
        ("extends: evil\n", 1, "extends cycle: evil -> evil"),
        ('venv: "a\\nb"\n', 1, "one line of printable text"),
        ("? [a, b]\n: 1\n", 1, "a mapping key must be a plain value"),
        ("a: 1\n---\nb: 2\n", 2, "YAML syntax error: but found another document"),
        ("description: a\x00b\n", None, "YAML syntax error"),
        ("'[/red]': 1\n", 1, "unknown key '[/red]'"),
        (BOMB, None, "alias bomb"),
        ("server:\n  x: &a [1, *a]\n", None, "alias"),
    ],
)
def test_bad_profile_is_one_line_exit_2_naming_file_line(capsys, profdir, content, where, fragment):
    path = profdir("evil", content)
    start = time.monotonic()
    code, out, err = run(capsys, "render", "--profile", "evil")
    assert time.monotonic() - start < 10  # a bomb is refused, not expanded
    line = one_line_error(err)
    assert code == 2
    assert out == ""
    prefix = f"error: {path}:{where}: " if where else f"error: {path}"
    assert line.startswith(prefix), line
    assert fragment in line, line


def test_duplicate_key_error_names_both_lines(capsys, profdir):
    profdir("dup", "server:\n  tp-size: 8\n  model-path: m\n  tp-size: 4\n")
    code, _, err = run(capsys, "render", "-p", "dup")
    assert code == 2
    line = one_line_error(err)
    assert ":4: duplicate key 'tp-size' (first at line 2)" in line


def test_bom_crlf_and_quoted_yaml11_words_are_accepted(capsys, profdir):
    profdir(
        "ok",
        "\ufeffenv:\r\n  MODE: 'off'\r\nserver:\r\n  port: \"8000\"\r\n  x: 0.5\r\n"
        "  model-path: m\r\n",
    )
    code, out, err = run(capsys, "render", "-p", "ok", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["env"] == {"MODE": "off"}
    assert data["argv"] == ["--port", "8000", "--x", "0.5", "--model-path", "m"]


def test_huge_profile_is_refused_before_reading(capsys, profdir):
    path = profdir("huge", "description: x\n")
    with path.open("ab") as fh:
        fh.truncate(64 << 20)  # sparse 64 MiB: reading it would be the bug
    code, _, err = run(capsys, "render", "-p", "huge")
    assert code == 2
    assert "the limit is" in one_line_error(err)


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("", "invalid profile name ''"),
        ("..", "invalid profile name '..'"),
        ("-x", "invalid profile name '-x'"),
        ("my profile", "invalid profile name 'my profile'"),
        ("a\nb", "invalid profile name 'a\\nb'"),
        ("no/such/dir/p.yaml", "profile file not found: no/such/dir/p.yaml"),
        ("/", "profile path is not a regular file: /"),
        ("/dev/zero", "profile path is not a regular file: /dev/zero"),
        ("ghost", "unknown profile 'ghost'; known profiles: base"),
        ("x\x00y", "contains a NUL byte"),
    ],
)
def test_bad_profile_names(capsys, profdir, name, fragment):
    profdir("base", "server: {}\n")
    code, _, err = run(capsys, "render", "--profile", name)
    assert code == 2
    assert fragment in one_line_error(err)


def test_profile_dir_given_as_path_is_not_read(capsys, tmp_path):
    code, _, err = run(capsys, "render", "--profile", str(tmp_path) + "/")
    assert code == 2
    assert "not a regular file" in one_line_error(err)


@pytest.mark.parametrize("kind", ["dir", "fifo", "broken-link"])
def test_a_listed_profile_that_is_no_file_says_why(capsys, profdir, kind):
    """``profiles/x.yaml`` a directory, FIFO or broken symlink: ``x`` is listed as a profile,
    so "unknown profile 'x'; known profiles: ..., x" contradicted itself (and a user one
    silently fell through to a shipped one of that name). Now: the path, and why."""
    p = profdir("other", "server: {}\n").with_name("x.yaml")
    if kind == "dir":
        p.mkdir()
    elif kind == "fifo":
        os.mkfifo(p)
    else:
        p.symlink_to(p.with_name("gone.yaml"))
    code, _, err = run(capsys, "render", "--profile", "x")
    assert code == 2
    line = one_line_error(err)
    assert str(p) in line and "unknown profile" not in line, line
    assert ("broken symlink" if kind == "broken-link" else "not a regular file") in line


def test_unicode_profile_name_resolves(capsys, profdir):
    profdir("ñame", "server: {port: 1, model-path: m}\n")
    code, out, _ = run(capsys, "render", "--profile", "ñame", "--format", "argv")
    assert (code, out) == (0, "--port 1 --model-path m\n")


@pytest.mark.parametrize(
    "item, fragment",
    [
        ("noequals", "--set 'noequals': expected KEY=VALUE"),
        ("=1", "empty key path"),
        ("server..port=1", "empty key path"),
        ("server.=1", "empty key path"),
        ("server.port.x=1", "one level below 'server'"),
        ("server.port=[[1]]", "list values must hold scalars"),
        ("server.x=" + "[" * 2000, "nested more than 64 levels"),
        ("server.x=2024-01-01", "YAML read datetime.date"),
        ("server.x={a: 2024-01-01}", "plain JSON data"),
        ("env.A B=1", "invalid environment variable name 'A B'"),
        ("env.X;rm=1", "invalid environment variable name 'X;rm'"),
        ("env.A=yes", "boolean true"),
        ("nodes=5", "'nodes' must be a list, got int"),
        ("venv=[1]", "'venv' must be a str, got list"),
        ("sglang=0.5", "'sglang' must be a str, got float"),
        ("description={a: 1}", "'description' must be a str"),
        ('python="a\\nb"', "one line of printable text"),
        ("extends=x", "unknown key 'extends'"),
    ],
)
def test_bad_set_is_one_line_exit_2(capsys, profdir, item, fragment):
    profdir("p", "server: {port: 1}\n")
    code, _, err = run(capsys, "render", "-p", "p", "--set", item)
    assert code == 2
    assert fragment in one_line_error(err)


def _stub_python(tmp_path: Path) -> Path:
    """An executable that records its argv and environment as JSON (stands in for python)."""
    stub = tmp_path / "stub python"
    stub.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "json.dump({'argv': sys.argv[1:], 'env': dict(os.environ)}, sys.stdout)\n"
    )
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    return stub


HOSTILE = [
    "$(touch PWNED)",
    "`touch PWNED`",
    "a'b\"c",
    "x; touch PWNED",
    "line1\nline2",
    "* ? [ ~",
    "${HOME}",
    "\\",
    "--evil",
    "-1",
]


def test_rendered_script_passes_hostile_values_as_data(capsys, profdir, tmp_path):
    """Run the rendered script (python swapped for a recorder): every value arrives byte for
    byte, and nothing in it was executed by the shell."""
    stub = _stub_python(tmp_path)
    server = {"model-path": "m", **{f"flag{i}": v for i, v in enumerate(HOSTILE)}}
    env = {f"V{i}": v for i, v in enumerate(HOSTILE)}
    venv = tmp_path / "my venv 'q\" $(touch PWNED)"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("export ACTIVATED=yes\n")
    profdir(
        "hostile",
        json.dumps({"server": server, "env": env, "python": str(stub), "venv": str(venv)}),
    )
    code, script, err = run(capsys, "render", "-p", "hostile")
    assert code == 0, err
    code, argv_out, _ = run(capsys, "render", "-p", "hostile", "--format", "argv")
    assert code == 0
    launch = tmp_path / "launch.sh"
    launch.write_text(script)
    work = tmp_path / "cwd"
    work.mkdir()
    res = subprocess.run(
        ["bash", str(launch)], cwd=work, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    seen = json.loads(res.stdout)
    expected = ["--model-path", "m"]
    for i, v in enumerate(HOSTILE):
        expected += [f"--flag{i}={v}"] if v.startswith("-") else [f"--flag{i}", v]
    assert seen["argv"] == ["-u", "-m", "sglang.launch_server", *expected]
    assert shlex.split(argv_out) == expected
    for i, v in enumerate(HOSTILE):
        assert seen["env"][f"V{i}"] == v
    assert seen["env"]["ACTIVATED"] == "yes"
    assert not list(work.iterdir()) and not (tmp_path / "PWNED").exists()
    assert not os.path.exists("PWNED")


@pytest.mark.parametrize("value", ["abc", "-1", "70000", "{a: 1}", "true"])
def test_unusable_port_is_the_profiles_error_not_a_crash(profdir, value):
    """glmserve itself needs --port (where to connect): a bad one names its origin."""
    from glmserve.config.profiles import load_profile
    from glmserve.errors import ConfigError

    path = profdir("p", f"server:\n  model-path: m\n  port: {value}\n")
    spec = load_profile("p")
    with pytest.raises(ConfigError, match=rf"{path}:3 \(server.port\): --port must be an int"):
        _ = spec.port
    spec = load_profile("p", [f"server.port={value}"])
    with pytest.raises(ConfigError, match=r"<--set> \(server.port\)"):
        _ = spec.port


def test_profiles_listing_shows_markup_and_broken_profiles_as_text(capsys, profdir):
    profdir("m", 'description: "[/red] x [bold]y"\n')
    profdir("[bad] name", "server: {x: 1, x: 2}\n")
    profdir("dup", "server: {x: 1, x: 2}\n")
    code, out, err = run(capsys, "profiles")
    assert code == 0, err
    assert "[/red] x [bold]y" in out
    assert "invalid profile name '[bad] name'" in out
    code, out, _ = run(capsys, "profiles", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert "duplicate key 'x'" in rows["dup"]["description"]


def test_numbers_whose_yaml_value_reads_differently_keep_their_text(capsys, profdir):
    """YAML reads 2.20 as 2.2, 0x10 as 16 and 1_000 as 1000: the launch script must get the
    text the user wrote (a version, a mask), from a file and from --set alike, while plain
    numbers stay numbers."""
    profdir(
        "p",
        "server:\n  model-path: m\n  port: 8000\n  revision: 1.10\n"
        "env:\n  NCCL_VER: 2.20\n  MASK: 0x10\n  N: 1_000\n  THREADS: 8\n",
    )
    code, out, err = run(capsys, "render", "--profile", "p", "--format", "json",
                         "--set", "server.mem-fraction-static=0.80")  # fmt: skip
    assert code == 0, err
    data = json.loads(out)
    assert data["env"] == {"NCCL_VER": "2.20", "MASK": "0x10", "N": "1_000", "THREADS": "8"}
    argv = data["argv"]
    assert argv[argv.index("--revision") + 1] == "1.10"
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.80"
    assert argv[argv.index("--port") + 1] == "8000"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("", "profile is empty"),
        ("# only a comment\n", "profile is empty"),
        ("description: no model\nserver:\n  port: 1\n", "the profile names no model"),
        ("server:\n  model-path: ''\n", "the profile names no model"),
    ],
)
@pytest.mark.parametrize("verb", [["render"], ["render", "--format", "argv"], ["launch"]])
def test_a_profile_without_a_model_is_refused_naming_its_file(
    capsys, profdir, content, fragment, verb
):
    """An empty profile rendered an empty argv with exit 0, and launch would have started a
    server with no --model-path."""
    path = profdir("nomodel", content)
    code, out, err = run(capsys, *verb, "--profile", "nomodel")
    assert code == 2 and out == "", err
    line = one_line_error(err)
    assert line.startswith(f"error: {path}: {fragment}"), line


def test_a_comment_only_overlay_of_a_base_with_a_model_is_fine(capsys, profdir):
    """The rule is about the resolved profile: an overlay that only extends is not empty."""
    profdir("base", "server:\n  model-path: m\n  port: 1\n")
    profdir("overlay", "# the same as base\nextends: base\n")
    code, out, err = run(capsys, "render", "--profile", "overlay", "--format", "argv")
    assert (code, out) == (0, "--model-path m --port 1\n"), err
    profdir("empty", "")  # --set may give the model
    code, out, err = run(
        capsys, "render", "-p", "empty", "--set", "server.model-path=m", "--format", "argv"
    )
    assert (code, out) == (0, "--model-path m\n"), err


@pytest.mark.parametrize("value", ["nan", "inf", "'1e999'"])
def test_a_non_finite_float_flag_is_refused_naming_file_line_or_set(capsys, profdir, value):
    """argparse's float() takes nan/inf/1e999 and SGLang checks no range: render exited 0
    while the simulator refused the same flag."""
    path = profdir(
        "nanp", f"sglang: '>=0.5.9'\nserver:\n  model-path: m\n  mem-fraction-static: {value}\n"
    )
    code, out, err = run(capsys, "render", "-p", "nanp", "--format", "argv")
    assert code == 2 and out == "", err
    line = one_line_error(err)
    assert f"{path}:4 (server.mem-fraction-static)" in line and "not a finite number" in line
    profdir("okp", "sglang: '>=0.5.9'\nserver:\n  model-path: m\n")
    code, out, err = run(
        capsys, "render", "-p", "okp", "--set", f"server.mem-fraction-static={value}",
        "--format", "argv",
    )  # fmt: skip
    assert code == 2 and out == "", err
    line = one_line_error(err)
    assert "<--set> (server.mem-fraction-static)" in line and "not a finite number" in line
