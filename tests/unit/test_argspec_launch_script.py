"""launch_script reads launch scripts the way bash splits them; checked against real bash
(a fake ``python3`` on PATH records the argv bash hands it) and against explicit goldens."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from glmserve.argspec.launch_script import extract_launch_argv, find_launch
from glmserve.errors import ConfigError

SCRIPTS = Path(__file__).parent.parent / "data" / "scripts"

SEED_ARGV = [
    "--model", "lukealonso/GLM-5-NVFP4",
    "--served-model-name", "glm-5",
    "--reasoning-parser", "glm45",
    "--tool-call-parser", "glm47",
    "--trust-remote-code",
    "--tp-size", "8",
    "--mem-fraction-static", "0.92",
    "--max-running-requests", "2048",
    "--kv-cache-dtype", "auto",
    "--quantization", "modelopt_fp4",
    "--attention-backend", "trtllm_mla",
    "--fp8-gemm-backend", "cutlass",
    "--nsa-decode-backend", "trtllm",
    "--nsa-prefill-backend", "trtllm",
    "--moe-runner-backend", "flashinfer_cutlass",
    "--disable-cuda-graph",
    "--disable-radix-cache",
    "--num-continuous-decode-steps", "16",
    "--host", "0.0.0.0", "--port", "8000",
]  # fmt: skip


def parse(name: str):
    return find_launch((SCRIPTS / name).read_text(encoding="utf-8"), name)


def test_reference_script_golden() -> None:
    argv, line = extract_launch_argv(
        (SCRIPTS / "run_tp8_trtllm_mla.sh").read_text(encoding="utf-8"), "run.sh"
    )
    assert argv == SEED_ARGV
    assert line == 1


def test_reference_script_token_lines() -> None:
    inv = parse("run_tp8_trtllm_mla.sh")
    lines = dict(zip(inv.argv, inv.token_lines, strict=True))
    assert lines["--model"] == 2
    assert lines["--nsa-decode-backend"] == 14
    assert lines["--disable-cuda-graph"] == 17
    assert inv.token_lines[-4:] == [20, 20, 20, 20]  # --host 0.0.0.0 --port 8000


def test_env_prefix_exec_and_variables() -> None:
    inv = parse("env_prefix_exec.sh")
    assert inv.argv == [
        "--model", "lukealonso/GLM-5-NVFP4",
        "--served-model-name", "glm-5",
        "--tp-size", "8", "--port=8000",
        "--chat-template", "{% if x %}a b{% endif %}",
        "--host", "0.0.0.0",
    ]  # fmt: skip
    assert inv.line_no == 8
    assert inv.env == {"NCCL_IB_DISABLE": "1", "OMP_NUM_THREADS": "8"}
    assert inv.token_lines[inv.argv.index("--port=8000")] == 11
    assert not inv.opaque


def test_nohup_background_and_redirections() -> None:
    inv = parse("nohup_redirect.sh")
    assert inv.argv == ["--model", "m", "--port", "8001", "--attention-backend", "flashinfer"]
    assert inv.python == "python"


def test_comment_inside_continuation_ends_the_command() -> None:
    inv = parse("commented_continuation.sh")
    assert inv.argv == ["--model", "m"]
    assert inv.notes and inv.notes[0][0] == 3


def test_hostile_quotes() -> None:
    inv = parse("hostile_quotes.sh")
    assert inv.argv == [
        "--model", "/models/My Model",
        "--served-model-name", "glm\t5",
        "--json-model-override-args", '{"rope_scaling": {"type": "yarn", "factor": 2.0}}',
        "--api-key", 'a"b$c\\d',
        "--tool-call-parser", "glm47",
    ]  # fmt: skip
    assert inv.token_lines[inv.argv.index("--api-key")] == 4


def test_run_time_expansions_are_kept_and_marked_opaque() -> None:
    inv = parse("unknown_vars.sh")
    assert inv.argv == [
        "--model", "$MODEL_DIR/glm", "--tp-size", "$(nproc)", "--port", "8000", "$@",
    ]  # fmt: skip
    assert inv.opaque == {1, 3, 6}


def test_no_invocation_names_the_file() -> None:
    with pytest.raises(ConfigError, match=r"no_launch\.sh: no sglang\.launch_server"):
        parse("no_launch.sh")


@pytest.mark.parametrize(
    ("text", "argv"),
    [
        ("python3 -m sglang.launch_server --model m", ["--model", "m"]),
        ("/opt/venv/bin/python3.12 -X dev -m sglang.launch_server --port 1", ["--port", "1"]),
        ("python -B -msglang.launch_server --port 1", ["--port", "1"]),
        ("env A=1 B=2 python3 -m sglang.launch_server --port 1", ["--port", "1"]),
        ("python3 /src/sglang/python/sglang/launch_server.py --port 1", ["--port", "1"]),
        ("if true; then python3 -m sglang.launch_server --port 1; fi", ["--port", "1"]),
        ("cd /x && python3 -m sglang.launch_server --port 1 || exit 1", ["--port", "1"]),
        ("python3 -m sglang.launch_server --port 1 2>&1 | tee log", ["--port", "1"]),
        ("python3 -m sglang.launch_server --port 1 &>log", ["--port", "1"]),
        ("python3 -m sglang.launch_server --a=x\\ y --b 'c'\"d\"", ["--a=x y", "--b", "cd"]),
        ("python3 -m sglang.launch_server --a '#' --b#c # tail", ["--a", "#", "--b#c"]),
    ],
)
def test_launch_forms(text: str, argv: list[str]) -> None:
    assert extract_launch_argv(text, "inline.sh")[0] == argv


@pytest.mark.parametrize(
    "text",
    [
        "python3 -m sglang.bench_serving --x 1",
        "echo python3 -m sglang.launch_server",
        "python3 -c 'import sglang.launch_server'",
        "# python3 -m sglang.launch_server --model m",
        "",
    ],
)
def test_not_a_launch(text: str) -> None:
    with pytest.raises(ConfigError, match=r"inline\.sh"):
        extract_launch_argv(text, "inline.sh")


def test_unterminated_quote_names_file_and_line() -> None:
    with pytest.raises(ConfigError, match=r"bad\.sh:2: unterminated double quote"):
        extract_launch_argv('echo hi\npython3 -m sglang.launch_server --model "m\n', "bad.sh")


def test_heredoc_bodies_are_data() -> None:
    inv = parse("heredoc_writer.sh")
    assert inv.argv == ["--model", "real", "--port", "8002"]
    assert inv.line_no == 9


def test_several_launches_are_noted() -> None:
    text = (
        "python3 -m sglang.launch_server --port 1 &\npython3 -m sglang.launch_server --port 2 &\n"
    )
    inv = find_launch(text, "two.sh")
    assert inv.argv == ["--port", "1"]
    assert [line for line, _ in inv.notes] == [2]
    assert "only the first, on line 1" in inv.notes[0][1]


def test_crlf_line_endings_are_noted() -> None:
    inv = find_launch("python3 -m sglang.launch_server \\\r\n  --port 1\r\n", "win.sh")
    assert any("CRLF" in note for _, note in inv.notes)
    assert inv.argv == ["\r"]  # backslash + CR does not continue the line, as in bash


# --- against real bash --------------------------------------------------------------------

BASH_COMPARABLE = [
    "run_tp8_trtllm_mla.sh",
    "env_prefix_exec.sh",
    "nohup_redirect.sh",
    "commented_continuation.sh",
    "hostile_quotes.sh",
    "heredoc_writer.sh",
]


@pytest.fixture
def fake_python(tmp_path: Path) -> tuple[Path, Path]:
    """A ``python``/``python3`` on PATH that appends its argv (JSON) to a log and exits."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "argv.log"
    body = (
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "with open(os.environ['ARGV_LOG'], 'a') as fh:\n"
        "    fh.write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    for name in ("python", "python3"):
        path = bin_dir / name
        path.write_text(body)
        path.chmod(0o755)
    return bin_dir, log


def _bash_launch_argv(script: Path, bin_dir: Path, log: Path) -> list[str]:
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ARGV_LOG": str(log)}
    subprocess.run(["bash", str(script)], env=env, capture_output=True, timeout=30, check=False)
    for line in log.read_text().splitlines():
        argv = json.loads(line)
        for i, arg in enumerate(argv):
            if arg == "sglang.launch_server":
                return argv[i + 1 :]
            if (
                arg.endswith("m")
                and arg.startswith("-")
                and argv[i + 1 : i + 2] == ["sglang.launch_server"]
            ):
                return argv[i + 2 :]
    raise AssertionError(f"bash never ran sglang.launch_server: {log.read_text()!r}")


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
@pytest.mark.parametrize("name", BASH_COMPARABLE)
def test_argv_equals_what_bash_passes(name: str, fake_python: tuple[Path, Path]) -> None:
    bin_dir, log = fake_python
    assert parse(name).argv == _bash_launch_argv(SCRIPTS / name, bin_dir, log)


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
@pytest.mark.parametrize(
    "text",
    [
        "python3 -m sglang.launch_server --model m \\\r\n  --port 1\r\n",  # CRLF
        'M=x\nexport P=9\npython3 -m sglang.launch_server --model $M --port=${P} --x "$M y"\n',
        "python3 -m sglang.launch_server --a 'it''s' --b \"q'\" --c=\\$HOME\n",
    ],
)
def test_inline_scripts_equal_what_bash_passes(
    text: str, tmp_path: Path, fake_python: tuple[Path, Path]
) -> None:
    script = tmp_path / "inline.sh"
    script.write_bytes(text.encode())
    bin_dir, log = fake_python
    assert extract_launch_argv(text, "inline.sh")[0] == _bash_launch_argv(script, bin_dir, log)


def test_check_launch_locates_findings_at_script_lines() -> None:
    from glmserve.argspec.launch_script import check_argv, check_launch
    from glmserve.argspec.releases import load_argspec

    located = check_launch(parse("run_tp8_trtllm_mla.sh"), load_argspec("0.5.8"))
    errors = [
        loc
        for loc, f in zip(located.locations, located.report.findings, strict=True)
        if f.severity == "error"
    ]
    assert errors == ["run_tp8_trtllm_mla.sh:14", "run_tp8_trtllm_mla.sh:15"]
    assert located.to_dict()["source"] == "run_tp8_trtllm_mla.sh"
    cut = check_launch(parse("commented_continuation.sh"), load_argspec("0.5.9"))
    assert cut.lines()[0].startswith("commented_continuation.sh:3: warning: a comment")
    raw = check_argv(["python3", "-m", "sglang.launch_server", "--port"], load_argspec("0.5.9"))
    assert raw.lines()[0].startswith("argv[0]: error: argument --port: expected one argument")


# --- word splitting of unquoted expansions (issue 10 #10), against real bash ----------------

L = "python3 -m sglang.launch_server"
WORD_SPLITTING = [
    # the script: an unquoted $ARGS is two words, not one unknown flag
    f'ARGS="--tp-size 8"; {L} --model-path m $ARGS',
    f'ARGS="--tp-size 8"\n{L} --model-path m ${{ARGS}}',
    f'ARGS="--tp-size 8"; {L} --model-path m "$ARGS"',  # quoted: one word
    f"ARGS='  --tp-size \t 8\n '; {L} a$ARGS\"b c\" x${{ARGS}}y",  # blanks cut, edges join
    f'E=; {L} --x $E --y "$E" ""$E --z$E',  # unquoted empty: no word; quoted: an empty one
    f'X="a b"; Y=$X; export Z=$X; {L} $Y "$Y" $Z',  # an assignment's value is not split
    f'X="a   b"; {L} "$X" \'$X\' \\$X',
    f'PY="{L}"; $PY --tp-size 2',  # the command itself from a variable
    f'X="*.nomatch --a"; {L} $X "$X"',  # glob chars: bash keeps a pattern with no match
    # arrays
    f'A=(--tp-size 8 "--model-path" "my m"); {L} "${{A[@]}}" ${{A[@]}}',
    f'A=(1 2 3); {L} "x${{A[@]}}y" ${{A[1]}} "${{A[5]}}" $A "${{A[*]}}"',
    f'A=(); {L} --a "${{A[@]}}" --b "x${{A[@]}}" ""',
    f'X="p q"; A=( # comment\n  $X "$X"\n  r\\\n s\n); A[0]=ignored; {L} "${{A[@]}}"',
]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
@pytest.mark.parametrize("text", WORD_SPLITTING)
def test_expansions_split_into_words_as_bash_does(
    text: str, tmp_path: Path, fake_python: tuple[Path, Path]
) -> None:
    script = tmp_path / "split.sh"
    script.write_text(text + "\n")
    bin_dir, log = fake_python
    # the test's cwd holds no file a glob could match, as for the literal pattern above
    assert find_launch(text, "split.sh").argv == _bash_launch_argv(script, bin_dir, log)


def test_unquoted_glob_from_an_expansion_is_opaque() -> None:
    """A pattern is replaced by the host's file names at run time: left as written and
    marked unchecked (quoted, it is plain text)."""
    inv = find_launch(f'X="--model /m/*"; {L} $X "$X" --y "a*"', "g.sh")
    assert inv.argv == ["--model", "/m/*", "--model /m/*", "--y", "a*"]
    assert inv.opaque == {1}


def test_array_with_a_run_time_element_is_not_guessed() -> None:
    inv = find_launch(f'A=(--port "$(pick_port)"); {L} --model m "${{A[@]}}"', "a.sh")
    assert inv.argv == ["--model", "m", "${A[@]}"]
    assert inv.opaque == {2}


def test_split_words_keep_the_line_of_the_expansion() -> None:
    inv = find_launch(f'ARGS="--tp-size 8"\n{L} \\\n  --model-path m \\\n  $ARGS\n', "l.sh")
    assert inv.argv[-2:] == ["--tp-size", "8"]
    assert inv.token_lines[-2:] == [4, 4]


def test_validate_accepts_flags_from_an_unquoted_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's script: `glmserve validate` used to report "--tp-size 8" as one
    unrecognized argument (exit 2)."""
    from glmserve.cli import main

    script = tmp_path / "args.sh"
    script.write_text(f'ARGS="--tp-size 8"; {L} --model-path m $ARGS\n')
    rc = main(["validate", "--sglang-version", "0.5.9", str(script)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "ok for sglang 0.5.9" in out
