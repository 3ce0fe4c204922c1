"""`glmserve validate` on hostile or broken hand-written launch scripts (all synthetic).

Whatever the file holds, validate answers with a verdict or one `error:` line naming the
script (and line where there is one), exit 2, quickly, and never a traceback.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from glmserve.argspec.launch_script import MAX_SCRIPT_BYTES, find_launch
from glmserve.cli import main

L = "python3 -m sglang.launch_server --model-path m"


def validate(capsys, path: Path, *extra: str) -> tuple[int, str, str]:
    start = time.monotonic()
    rc = main(["validate", "--sglang-version", "0.5.9", *extra, str(path)])
    assert time.monotonic() - start < 30
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "internal error" not in captured.err
    return int(rc), captured.out, captured.err


def script(tmp_path: Path, content: str | bytes) -> Path:
    p = tmp_path / "run.sh"
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return p


@pytest.mark.parametrize(
    "content, fragment",
    [
        (bytes(range(256)), "a binary file"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00", "a binary file"),
        (b"", "no sglang.launch_server invocation found"),
        (L + " --tp-size '8\n", ":1: unterminated single quote"),
        (L + ' --tp-size "8\n', ":1: unterminated double quote"),
        (L + " --tp-size $'8\n", ":1: unterminated $'...' quote"),
        ("\n" + L + " --tp-size $(nproc\n", ":2: unterminated $("),
        (L + " --tp-size `nproc\n", ":1: unterminated `"),
        (L + " --tp-size ${TP\n", ":1: unterminated ${"),
        ("cat <<EOF\n" + L + "\n", "no sglang.launch_server invocation found"),
        ("A=" + "x" * 60_000 + "\n" + L + " --x " + "$A" * 20 + "\n", ":2: a word expands to"),
    ],
)
def test_unusable_script_is_one_line_exit_2(capsys, tmp_path, content, fragment):
    path = script(tmp_path, content)
    code, _, err = validate(capsys, path)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}"), err
    assert fragment in lines[0], err


def test_huge_script_is_refused_without_reading_it(capsys, tmp_path):
    path = script(tmp_path, L + "\n")
    with path.open("ab") as fh:
        fh.truncate(MAX_SCRIPT_BYTES * 64)  # sparse: reading it all would be the bug
    code, _, err = validate(capsys, path)
    assert code == 2 and "the limit is" in err


@pytest.mark.parametrize("target", ["/dev/null", "/"])
def test_non_regular_file_is_refused(capsys, target):
    code, _, err = validate(capsys, Path(target))
    assert code == 2 and f"error: {target}: script is not a regular file" in err


def test_long_script_is_linear_time(tmp_path):
    """~1 MB of flags used to take minutes (a slice of the rest of the text per word)."""
    text = L + " --tp-size 8" * 80_000 + "\n"
    start = time.monotonic()
    inv = find_launch(text, "big.sh")
    assert time.monotonic() - start < 15
    assert len(inv.argv) == 2 + 160_000


def test_bad_ansi_c_escapes_stay_literal_like_bash():
    # bash: printf '[%s]' $'\x' $'\N{foo}' prints [\x][\N{foo}]
    inv = find_launch(L + " --a $'\\x' --b $'\\N{foo}' --c $'it\\'s'\n", "s.sh")
    assert inv.argv[-6:] == ["--a", "\\x", "--b", "\\N{foo}", "--c", "it's"]


@pytest.mark.parametrize("tail", ["\\", " \\", " \\\n"])
def test_backslash_at_end_of_file_is_dropped_like_bash(tail):
    inv = find_launch(L + " --tp-size 8" + tail, "s.sh")
    assert inv.argv == ["--model-path", "m", "--tp-size", "8"]


def test_crlf_bom_and_second_launch_are_warnings_with_lines(capsys, tmp_path):
    path = script(
        tmp_path,
        "\ufeff#!/bin/bash\r\n" + L + " --tp-size 8\r\n" + L + " --tp-size 4\r\n",
    )
    code, out, _ = validate(capsys, path, "--json")
    report = json.loads(out)
    notes = [(f["location"], f["message"]) for f in report["findings"]]
    assert any(loc == f"{path}:1" and "byte-order mark" in m for loc, m in notes)
    assert any(loc == f"{path}:3" and "another sglang.launch_server" in m for loc, m in notes)
    # CRLF: bash passes "8\r" (int() accepts it); the note says continuations break
    assert code == 0
    assert any("CRLF" in m for _, m in notes)


def test_self_doubling_variable_stays_bounded(capsys, tmp_path):
    """A=$A$A sixty times would be 2^60 characters; past the cap the variable is forgotten
    and its use is reported as unknown until run time, instead of exhausting memory."""
    path = script(tmp_path, "A=x\n" + "A=$A$A\n" * 60 + L + " --served-model-name $A\n")
    code, out, _ = validate(capsys, path)
    assert code == 0, out
    assert "'$A' is only known when the script runs" in out


def test_heredoc_body_and_substitutions_are_not_the_launch(capsys, tmp_path):
    path = script(
        tmp_path,
        "cat > other.sh <<'EOF'\n" + L + " --bogus-flag\nEOF\n"
        f"{L} --tp-size $(nproc) --port `echo 1`\n",
    )
    code, out, _ = validate(capsys, path)
    assert code == 0, out
    assert f"{path}:4: warning: '$(nproc)' is only known when the script runs" in out


def test_nul_bytes_after_the_first_line_are_dropped_like_bash(capsys, tmp_path):
    path = script(tmp_path, ("#!/bin/bash\n" + L + " --tp-size 8\x00\n").encode())
    code, out, _ = validate(capsys, path)
    assert code == 0, out


def test_findings_quoting_script_text_are_not_rich_markup(capsys, tmp_path):
    path = script(tmp_path, L + ' --tp-size "[/red][bold]$X"\n')
    code, out, _ = validate(capsys, path)
    assert code == 0
    assert "'[/red][bold]$X' is only known when the script runs" in out


@pytest.mark.parametrize(
    "line",
    [
        "VER=$(python3 -c 'print(1)' | awk -F'(' '{print $1}')",
        'MSG="$(echo ")")"',
        "X=$(echo \\( )",
        'Y=$(printf "%s" "a)b(c")',
    ],
)
def test_parentheses_quoted_inside_command_substitution(capsys, tmp_path, line):
    """Quoted or escaped parentheses inside ``$(...)`` do not nest (bash -n accepts these
    scripts): validate must check the launch line, not stop at an 'unterminated $('."""
    import subprocess

    p = script(tmp_path, f"#!/bin/bash\n{line}\n{L} --tp-size 8\n")
    assert subprocess.run(["bash", "-n", str(p)], capture_output=True).returncode == 0
    code, out, err = validate(capsys, p)
    assert code == 0, err
    assert "ok for sglang 0.5.9" in out
