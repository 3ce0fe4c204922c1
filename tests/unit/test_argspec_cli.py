"""`glmserve validate` through the console entry point (exit codes, script:line output,
--json) and once through the installed executable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from glmserve.cli import main

SCRIPTS = Path(__file__).parent.parent / "data" / "scripts"
SEED = str(SCRIPTS / "run_tp8_trtllm_mla.sh")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["validate", *args])
    captured = capsys.readouterr()
    return int(rc), captured.out, captured.err


def test_reference_script_ok_on_059(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--sglang-version", "0.5.9", SEED)
    assert code == 0
    assert "ok for sglang 0.5.9" in out
    assert "error:" not in out


def test_reference_script_fails_on_058_naming_script_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "--sglang-version", "0.5.8", SEED)
    assert code == 2
    lines = [line for line in out.splitlines() if ": error: " in line]
    assert len(lines) == 2
    assert lines[0].startswith(f"{SEED}:14: error: argument --nsa-decode-backend: invalid choice")
    assert lines[1].startswith(f"{SEED}:15: error: argument --nsa-prefill-backend")
    assert "2 errors" in err and "0.5.8" in err


def test_reference_script_fails_on_0523_with_dsa_replacements(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "--sglang-version", "0.5.23", SEED)
    assert code == 2
    assert "--nsa-decode-backend" in out and "--dsa-decode-backend" in out
    assert "--nsa-prefill-backend" in out and "--dsa-prefill-backend" in out
    assert f"{SEED}:17: warning: --disable-cuda-graph is deprecated" in out


def test_raw_argv_after_double_dash(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--sglang-version", "0.5.9", "--", "--model", "m", "--tp", "8")
    assert code == 0
    assert "argv[2]: warning: --tp is an abbreviation of --tp-size" in out
    code, out, _ = run(capsys, "--sglang-version", "0.5.9", "--", "--model", "m", "--port")
    assert code == 2
    assert "argv[2]: error: argument --port: expected one argument" in out


def test_pasted_command_after_double_dash(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--", "python3", "-u", "-m", "sglang.launch_server", "--model", "m", "--tp", "8"]
    code, out, _ = run(capsys, "--sglang-version", "0.5.9", *args)
    assert code == 0
    assert "argv[2]: warning: --tp is an abbreviation" in out


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--sglang-version", "0.5.8", SEED, "--json")
    assert code == 2
    data = json.loads(out)
    assert data["ok"] is False and data["sglang_version"] == "0.5.8"
    assert data["source"] == SEED
    errs = [f for f in data["findings"] if f["severity"] == "error"]
    assert [f["location"] for f in errs] == [f"{SEED}:14", f"{SEED}:15"]


def test_spec_file_instead_of_version(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = {
        "sglang_version": "0.9.0-host",
        "actions": [{"option_strings": ["--model"], "dest": "model", "type": "str"}],
    }
    path = tmp_path / "host.json"
    path.write_text(json.dumps(spec))
    code, out, _ = run(capsys, "--spec", str(path), "--", "--model", "m")
    assert code == 0 and "0.9.0-host" in out
    code, _, _ = run(capsys, "--spec", str(path), "--", "--model", "m", "--port", "1")
    assert code == 2


def test_comment_in_continuation_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    script = str(SCRIPTS / "commented_continuation.sh")
    code, out, _ = run(capsys, "--sglang-version", "0.5.9", script)
    assert code == 0
    assert f"{script}:3: warning: a comment inside a continued command" in out


def test_unresolved_expansions_are_warned_not_failed(capsys: pytest.CaptureFixture[str]) -> None:
    script = str(SCRIPTS / "unknown_vars.sh")
    code, out, _ = run(capsys, "--sglang-version", "0.5.9", script)
    assert code == 0
    assert "'$(nproc)' is only known when the script runs" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sglang-version", "0.5.24", "--", "--model", "m"], "nearest shipped: 0.5.23"),
        (["--", "--model", "m"], "exactly one of --sglang-version"),
        (["--sglang-version", "0.5.9"], "nothing to check"),
        (["--sglang-version", "0.5.9", "missing.sh"], "missing.sh: no such script"),
        # a version names a release; a path there is refused, not read as a spec file
        (["--sglang-version", SEED, "--", "--tp-size", "8"], "is not a release version"),
        (["--sglang-version", "../../etc/passwd", "--", "--tp-size", "8"], "--spec FILE"),
        (["--sglang-version", "0.5.9", str(SCRIPTS / "no_launch.sh")], "no sglang.launch_server"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, _, err = run(capsys, *args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_list_versions(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--list-versions")
    assert code == 0
    assert {"0.5.8", "0.5.9", "0.5.23"} <= set(out.split())


def test_list_versions_json_is_a_list_of_version_strings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "--list-versions", "--json")
    assert code == 0
    versions = json.loads(out)
    assert isinstance(versions, list) and all(isinstance(v, str) for v in versions)
    _, text, _ = run(capsys, "--list-versions")
    assert versions == text.split()  # the same releases, in the same order


def test_script_exporting_the_patch_is_not_warned(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = tmp_path / "gtc.sh"
    body = "exec python3 -m sglang.launch_server --model m --attention-backend flashinfer"
    script.write_text(f"export GLMSERVE_PATCHES=flashinfer_mla_gather_cast\n{body}\n")
    code, out, _ = run(capsys, "--sglang-version", "0.5.9", str(script), "--json")
    assert code == 0 and json.loads(out)["warnings"] == 0
    script.write_text(f"{body} --kv-cache-dtype fp8_e4m3\n")
    code, out, _ = run(capsys, "--sglang-version", "0.5.9", str(script))
    assert code == 0 and "flashinfer_gtc" in out
