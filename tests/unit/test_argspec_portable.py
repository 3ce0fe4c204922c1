"""Portable profiles: the translation table agrees with the shipped argspecs, every shipped
profile renders for every release 0.5.8..newest where its backend exists (and is refused
clearly where it does not), and ``validate --fix`` migrates a hand-written script by
changing only the flags that must change."""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

import pytest

from glmserve.argspec.emulator import validate_argv
from glmserve.argspec.portable import (
    fix_script,
    for_release,
    load_table,
    range_target,
    translate_argv,
)
from glmserve.argspec.releases import available_versions, load_argspec, version_key
from glmserve.config.profiles import load_profile
from glmserve.errors import ConfigError, FlagValidationError

SEED = Path(__file__).resolve().parents[1] / "data" / "scripts" / "run_tp8_trtllm_mla.sh"
PROFILES = ["trtllm_mla", "cutlass_mla", "flashinfer", "flashinfer_gtc", "triton",
            "trtllm_mla_decode"]  # fmt: skip
RELEASES = [v for v in available_versions() if version_key(v) >= version_key("0.5.8")]


def _before(version: str) -> list[str]:
    return [v for v in available_versions() if version_key(v) < version_key(version)]


def _from(version: str) -> list[str]:
    return [v for v in available_versions() if version_key(v) >= version_key(version)]


# --- the table against the shipped specs ------------------------------------------------------


@pytest.mark.parametrize("rename", load_table().renames, ids=lambda r: r.old)
def test_rename_entries_match_the_shipped_specs(rename):
    newest = available_versions()[-1]
    assert rename.new not in load_argspec(_before(rename.added)[-1]).by_option
    for version in _from(rename.added):
        assert rename.new in load_argspec(version).by_option, version
    assert rename.old in load_argspec(_before(rename.added)[-1]).by_option
    gone = rename.removed or "99.0.0"
    for version in _from(rename.added):
        spec = load_argspec(version)
        if version_key(version) >= version_key(gone):
            assert rename.old not in spec.by_option, version
        else:  # an alias of the new flag: same setting, and marked deprecated
            old, new = spec.by_option[rename.old], spec.by_option[rename.new]
            assert old.dest == new.dest and old.is_deprecated, version
    assert rename.removed is None or rename.old not in load_argspec(newest).by_option


@pytest.mark.parametrize("succ", load_table().successors, ids=lambda s: s.flag)
def test_successor_entries_match_the_shipped_specs(succ):
    assert not load_argspec(_before(succ.deprecated)[-1]).by_option[succ.flag].is_deprecated
    for version in _from(succ.deprecated):
        spec = load_argspec(version)
        act = spec.by_option.get(succ.flag)
        if act is not None:
            assert act.is_deprecated, version
        tokens = succ.replacement  # valid wherever the flag is deprecated or gone
        for i, tok in enumerate(tokens):
            if tok.startswith("--"):
                assert tok in spec.by_option and not spec.by_option[tok].is_deprecated, version
            else:
                assert tok in spec.by_option[tokens[i - 1]].choices, (version, tok)


@pytest.mark.parametrize("entry", load_table().removed_choices, ids=lambda c: c.value)
def test_removed_choice_entries_match_the_shipped_specs(entry):
    last = load_argspec(_before(entry.removed)[-1])
    for flag in entry.flags:
        assert entry.value in last.by_option[flag].choices
        for version in _from(entry.removed):
            choices = load_argspec(version).by_option[flag].choices
            assert entry.value not in choices, version
            assert all(alt in choices for alt in entry.instead), version


# Same-dest deprecated aliases in the shipped specs that the table leaves out, and why.
NOT_TRANSLATED = {
    # 0.5.23 still has it, as a StoreConst taking the value "amd": a flag-with-value to a bare
    # flag is not a one-token rewrite; the emulator's deprecation warning names the successor.
    "--monokernel-backend",
    # its successor's value tc_piecewise is itself gone from 0.5.22: no successor there.
    "--enforce-piecewise-cuda-graph",
    # an alias only from 0.5.13 while the new flag exists from 0.5.12 (separate before).
    "--speculative-dflash-draft-window-size",
    # 0.5.14-0.5.19 point it at --cp-strategy with renamed values (in-seq-split -> zigzag):
    # a value mapping the table does not model; the same-dest partner is --nsa-prefill-cp-mode.
    "--dsa-prefill-cp-mode",
    # successors themselves removed by the newest release (0.5.14 / 0.5.22): nothing to map to.
    "--enable-nsa-prefill-context-parallel",
    "--nsa-prefill-cp-mode",
    "--piecewise-cuda-graph-compiler",
}


def _shipped_aliases() -> set[str]:
    """Old flags the shipped specs 0.5.8..newest mark deprecated and that store into the same
    dest as a current flag: each is a rename or successor the table must know."""
    import re

    found = set()
    for version in RELEASES:
        spec = load_argspec(version)
        for act in spec.actions:
            if not act.is_deprecated:
                continue
            named = re.findall(r"--[a-z0-9][a-z0-9-]*[a-z0-9]", act.help or "")
            same = [b for b in spec.actions if b is not act and b.dest == act.dest]
            if any(spec.by_option.get(n) in same for n in named) or (
                act.action.startswith("DeprecatedAlias") and same
            ):
                found.update(act.option_strings)
    return found


def test_table_covers_every_same_dest_alias_in_the_shipped_specs():
    table = load_table()
    known = {r.old for r in table.renames} | {s.flag for s in table.successors}
    assert _shipped_aliases() - known == NOT_TRANSLATED
    assert not known & NOT_TRANSLATED


def test_every_entry_cites_a_release_file_and_line():
    table = load_table()
    entries = [*table.renames, *table.successors, *table.removed_choices]
    for entry in entries:
        assert entry.sources, entry
        for src in entry.sources:
            assert src["file"].startswith("python/sglang/srt/") and src["release"]
            assert ("line" in src and src["text"]) or src.get("absent")


# --- translation --------------------------------------------------------------------------


def test_translate_renames_keep_values_and_equals_forms():
    spec = load_argspec("0.5.23")
    argv = ["--model", "m", "--nsa-decode-backend=trtllm", "--nsa-prefill-backend", "fa3"]
    out = translate_argv(argv, spec)
    assert out.argv == [
        "--model",
        "m",
        "--dsa-decode-backend=trtllm",
        "--dsa-prefill-backend",
        "fa3",
    ]
    assert [c.index for c in out.changes] == [2, 3]


def test_translate_is_identity_where_the_release_has_the_flag():
    argv = shlex.split(" ".join(load_profile("trtllm_mla").argv))
    assert translate_argv(argv, load_argspec("0.5.9")).argv == argv


def test_translate_deprecated_alias_era_uses_the_new_name():
    # 0.5.13-0.5.19 accept --nsa-* but warn: the release's own name is written instead
    out = translate_argv(["--nsa-decode-backend", "trtllm"], load_argspec("0.5.15"))
    assert out.argv == ["--dsa-decode-backend", "trtllm"]
    assert "deprecated alias" in out.changes[0].reason


def test_translate_backward_for_an_older_release():
    out = translate_argv(["--dsa-decode-backend", "trtllm"], load_argspec("0.5.9"))
    assert out.argv == ["--nsa-decode-backend", "trtllm"]


def test_translate_successor_only_where_deprecated():
    assert translate_argv(["--disable-cuda-graph"], load_argspec("0.5.13")).argv == [
        "--disable-cuda-graph"
    ]
    out = translate_argv(["--disable-cuda-graph", "--port", "1"], load_argspec("0.5.14"))
    assert out.argv == [
        "--cuda-graph-backend-decode",
        "disabled",
        "--cuda-graph-backend-prefill",
        "disabled",
        "--port",
        "1",
    ]
    assert out.origin == [0, 0, 0, 0, 1, 2]


def test_range_target_is_the_newest_shipped_release_in_range():
    assert range_target(">=0.5.9") == available_versions()[-1]
    assert range_target(">=0.5.9,<0.5.20") == "0.5.19"
    assert range_target(">=0.5.9,<0.5.13") == "0.5.12.post1"
    assert range_target(None) is None
    assert range_target(">=9") is None
    with pytest.raises(ConfigError):
        range_target("not a range")


# --- every profile x every release ----------------------------------------------------------


def _expected_refusal(profile: str, version: str) -> str | None:
    """Why ``profile`` cannot run on ``version``: the seed's ``--nsa-*-backend trtllm`` is a
    choice from 0.5.9 on; ``cutlass_mla`` is a choice up to 0.5.19."""
    if version_key(version) < version_key("0.5.9"):
        return "'trtllm'"
    if profile == "cutlass_mla" and version_key(version) >= version_key("0.5.20"):
        return "cutlass_mla"
    if profile == "trtllm_mla_decode" and version_key(version) >= version_key("0.5.10"):
        # the backend facts: XQA decode on SM120 runs on 0.5.9 and 0.5.15 (outside the range:
        # a warning only); 0.5.19, 0.5.21 and 0.5.23 crash; the others are not verified
        if version == "0.5.15":
            return None
        if version in ("0.5.19", "0.5.21") or version_key(version) >= version_key("0.5.23"):
            return "multi_ctas_kv_counter_buffer is only supported by the trtllm-gen backend"
        return "decode trtllm_mla on SM120 (RTX PRO 6000), sglang " + version + ": not verified"
    return None


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_renders_for_every_release(profile, version):
    refusal = _expected_refusal(profile, version)
    spec = load_profile(profile)
    if refusal is not None:
        with pytest.raises(FlagValidationError) as info:
            for_release(spec, version)
        message = str(info.value)
        assert refusal in message and f"sglang {version}" in message
        assert f"{profile}.yaml:" in message or "glm5-nvfp4-tp8.yaml:" in message
        if refusal == "cutlass_mla":
            assert "trtllm_mla or cutedsl_mla instead" in message
        return
    ported = for_release(spec, version)
    argspec = load_argspec(version)
    report = validate_argv(ported.spec.argv, argspec, patches=spec.patches)
    assert report.ok, [f.format() for f in report.errors]
    # the release's own spelling: no flag it calls deprecated is left in
    assert not [f for f in report.warnings if "deprecated" in f.message], report.warnings
    joined = " ".join(ported.spec.argv)
    dsa = version_key(version) >= version_key("0.5.13")
    assert ("--dsa-decode-backend trtllm --dsa-prefill-backend trtllm" in joined) == dsa
    assert ("--nsa-decode-backend trtllm --nsa-prefill-backend trtllm" in joined) == (not dsa)


def test_render_cli_for_0_5_23_prints_the_dsa_flags(capsys):
    from glmserve.cli import main

    rc = main(
        ["render", "--profile", "trtllm_mla", "--sglang-version", "0.5.23", "--format", "argv"]
    )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "--dsa-decode-backend trtllm --dsa-prefill-backend trtllm" in captured.out
    assert "note: sglang 0.5.23: --nsa-decode-backend -> --dsa-decode-backend" in captured.err


def test_render_cli_refuses_cutlass_mla_after_0_5_19(capsys):
    from glmserve.cli import main

    rc = main(["render", "--profile", "cutlass_mla", "--sglang-version", "0.5.20"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "cutlass_mla.yaml:" in err and "dropped the cutlass_mla choice in 0.5.20" in err
    assert "offers trtllm_mla or cutedsl_mla instead" in err and "Traceback" not in err


def test_render_without_version_uses_the_profile_range(capsys):
    from glmserve.cli import main

    rc = main(["render", "--profile", "cutlass_mla", "--format", "argv"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "rendered for sglang 0.5.19 (newest shipped release in the profile's range" in (
        captured.err
    )
    assert "--dsa-decode-backend" in captured.out


# --- validate --fix ---------------------------------------------------------------------------


def _reference_script_copy(tmp_path: Path) -> Path:
    path = tmp_path / "run_tp8_trtllm_mla.sh"
    path.write_text(SEED.read_text())
    path.chmod(0o750)
    return path


def _changed_lines(old: str, new: str) -> list[tuple[str, str]]:
    pairs = list(zip(old.splitlines(), new.splitlines(), strict=True))
    return [(a, b) for a, b in pairs if a != b]


def test_fix_reference_script_for_0_5_23_changes_only_the_three_flags():
    text = SEED.read_text()
    fixed = fix_script(text, "run.sh", load_argspec("0.5.23"))
    assert _changed_lines(text, fixed.new_text) == [
        ("  --nsa-decode-backend trtllm \\", "  --dsa-decode-backend trtllm \\"),
        ("  --nsa-prefill-backend trtllm \\", "  --dsa-prefill-backend trtllm \\"),
        (
            "  --disable-cuda-graph \\",
            "  --cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled \\",
        ),
    ]
    assert [line for line, _ in fixed.changes] == [14, 15, 17]


def test_fix_for_the_release_it_was_written_for_changes_nothing():
    text = SEED.read_text()
    fixed = fix_script(text, "run.sh", load_argspec("0.5.9"))
    assert fixed.new_text == text and not fixed.changes and fixed.diff() == ""


def test_fix_rewrites_quoted_and_equals_forms_in_place():
    text = (
        "#!/bin/bash\n"
        "# --nsa-decode-backend in a comment stays\n"
        "exec python3 -m sglang.launch_server --model m \\\n"
        "  '--nsa-decode-backend' trtllm --nsa-prefill-backend=trtllm  # keep me\n"
    )
    fixed = fix_script(text, "run.sh", load_argspec("0.5.23"))
    assert fixed.new_text.splitlines()[1] == "# --nsa-decode-backend in a comment stays"
    assert fixed.new_text.splitlines()[3] == (
        "  '--dsa-decode-backend' trtllm --dsa-prefill-backend=trtllm  # keep me"
    )


def test_fix_refuses_a_flag_built_from_a_variable():
    text = 'F=--nsa-decode-backend\npython3 -m sglang.launch_server --model m "$F" trtllm\n'
    with pytest.raises(ConfigError) as info:
        fix_script(text, "run.sh", load_argspec("0.5.23"))
    assert "run.sh:2" in str(info.value) and "by hand" in str(info.value)


def test_fix_refuses_a_dropped_choice(tmp_path):
    text = SEED.read_text().replace("trtllm_mla", "cutlass_mla")
    with pytest.raises(FlagValidationError) as info:
        fix_script(text, "run.sh", load_argspec("0.5.23"))
    assert "run.sh:12" in str(info.value) and "trtllm_mla or cutedsl_mla" in str(info.value)


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    from glmserve.cli import main

    rc = main(list(args))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_cli_fix_diff_prints_a_unified_diff_and_writes_nothing(tmp_path, capsys):
    path = _reference_script_copy(tmp_path)
    before = path.read_text()
    code, out, err = _cli(
        capsys, "validate", "--fix", "--diff", "--sglang-version", "0.5.23", str(path)
    )
    assert code == 0, err
    assert path.read_text() == before
    assert out.startswith(f"--- {path}\n+++ {path} (sglang 0.5.23)\n@@ ")
    removed = [ln for ln in out.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    added = [ln for ln in out.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    assert removed == [
        "-  --nsa-decode-backend trtllm \\",
        "-  --nsa-prefill-backend trtllm \\",
        "-  --disable-cuda-graph \\",
    ]
    assert len(added) == 3


def test_cli_fix_writes_the_migrated_script_that_then_validates(tmp_path, capsys):
    path = _reference_script_copy(tmp_path)
    code, _, err = _cli(capsys, "validate", "--fix", "--sglang-version", "0.5.23", str(path))
    assert code == 0, err
    assert "migrated for sglang 0.5.23 (3 change(s))" in err
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o750
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left
    code, out, err = _cli(capsys, "validate", "--sglang-version", "0.5.23", str(path))
    assert code == 0, out + err
    assert "deprecated" not in out


def test_cli_fix_on_a_symlink_migrates_its_target_and_keeps_the_link(tmp_path, capsys):
    """The link is written through: the script it points at is migrated (atomically, mode
    kept, no temp file left beside it) and the link stays a link to it."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    target = _reference_script_copy(scripts)
    links = tmp_path / "links"
    links.mkdir()
    link = links / "link.sh"
    link.symlink_to(Path("..") / "scripts" / target.name)
    code, _, err = _cli(capsys, "validate", "--fix", "--sglang-version", "0.5.23", str(link))
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(Path("..") / "scripts" / target.name)
    assert "--dsa-decode-backend trtllm" in target.read_text()
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o750
    assert [p.name for p in scripts.iterdir()] == [target.name]
    assert [p.name for p in links.iterdir()] == [link.name]
    code, out, err = _cli(capsys, "validate", "--sglang-version", "0.5.23", str(target))
    assert code == 0, out + err


def test_cli_fix_refusal_leaves_the_script_alone(tmp_path, capsys):
    path = _reference_script_copy(tmp_path)
    path.write_text(path.read_text().replace("trtllm_mla", "cutlass_mla"))
    before = path.read_text()
    code, _, err = _cli(capsys, "validate", "--fix", "--sglang-version", "0.5.23", str(path))
    assert code == 2 and path.read_text() == before
    assert f"{path}:12" in err and "Traceback" not in err


def test_cli_fix_needs_a_script(capsys):
    code, _, err = _cli(
        capsys, "validate", "--fix", "--sglang-version", "0.5.23", "--", "--model", "m"
    )
    assert code == 2 and "one launch script" in err


def test_render_for_the_simulator_keeps_the_flags_unless_a_release_is_named(capsys):
    code, out, err = _cli(capsys, "render", "--profile", "trtllm_mla", "--simulate", "-f", "argv")
    assert code == 0, err
    assert "--nsa-decode-backend trtllm" in out and "note:" not in err
    code, out, err = _cli(
        capsys,
        "render",
        "-p",
        "trtllm_mla",
        "--simulate",
        "-f",
        "argv",
        "--sglang-version",
        "0.5.23",
    )
    assert code == 0, err
    assert "--dsa-decode-backend trtllm" in out


def test_cli_validate_hints_at_fix_when_it_would_help(tmp_path, capsys):
    path = _reference_script_copy(tmp_path)
    code, _, err = _cli(capsys, "validate", "--sglang-version", "0.5.23", str(path))
    assert code == 2
    assert f"hint: glmserve validate --fix [--diff] --sglang-version 0.5.23 {path}" in err
    code, _, err = _cli(capsys, "validate", "--sglang-version", "0.5.9", str(path))
    assert code == 0 and "hint:" not in err


def test_fix_in_a_folder_that_cannot_be_written_is_exit_2_and_leaves_the_script(tmp_path):
    """Review: an unwritable folder made ``validate --fix`` an internal error (exit 70,
    PermissionError from mkstemp). Non-root: mode 555; root: the immutable attribute."""
    import subprocess

    from tests.fixtures.cli import run_glmserve

    folder = tmp_path / "ro"
    folder.mkdir()
    path = _reference_script_copy(folder)
    before = path.read_text()
    folder.chmod(0o555)
    locked = not os.access(folder, os.W_OK)
    if not locked and subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
        folder.chmod(0o755)
        pytest.skip("root without chattr: no way to make a folder unwritable here")
    try:
        proc = run_glmserve("validate", "--fix", "--sglang-version", "0.5.23", str(path))
    finally:
        if not locked:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {path}: cannot write the migrated script"), last
    assert path.read_text() == before
    assert sorted(p.name for p in folder.iterdir()) == [path.name]  # no temp file left
