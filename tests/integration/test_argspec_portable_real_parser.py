"""Portable profiles against the real thing: every profile rendered for 0.5.9, 0.5.19 and
0.5.23 (and the seed script migrated by ``validate --fix``) is parsed by that release's own
``ServerArgs`` argparse, imported from its PyPI wheel; and every citation in
``argspec/data/translations.json`` is checked against the cited release's source file.

Each release is imported in its own subprocess with ``sys.path`` = the unpacked wheel (the
wheel is downloaded once per machine by ``tests/fixtures/sglang_releases.py``); third-party
modules the import chain needs and the venv lacks are stubbed by dump_program's importer, as
``scripts/dump_argspec.py`` does (``stubbed`` is reported; argparse itself is never stubbed).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.fixtures.sglang_releases import sglang_source

from glmserve.argspec.host_dump import dump_program_source
from glmserve.argspec.launch_script import find_launch
from glmserve.argspec.portable import fix_script, for_release, load_table, translate_argv
from glmserve.argspec.releases import load_argspec
from glmserve.config.profiles import load_profile
from glmserve.errors import FlagValidationError

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

SEED = Path(__file__).resolve().parents[1] / "data" / "scripts" / "run_tp8_trtllm_mla.sh"
PROFILES = ["trtllm_mla", "cutlass_mla", "flashinfer", "flashinfer_gtc", "triton",
            "trtllm_mla_decode"]  # fmt: skip
REAL_RELEASES = ["0.5.9", "0.5.19", "0.5.23"]

_REAL_PARSER = r"""
import argparse, contextlib, io, json, sys
sys.path.insert(0, SOURCE)
ns = {"__name__": "glmserve_dump"}
exec(SNIPPET, ns)
with contextlib.redirect_stdout(sys.stderr):
    ServerArgs, stubbed = ns["_import_server_args"](True)
import sglang
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
results = []
for argv in json.loads(sys.stdin.read()):
    buf = io.StringIO()
    try:
        with contextlib.redirect_stderr(buf), contextlib.redirect_stdout(buf):
            parser.parse_args(argv)
        results.append({"ok": True, "message": buf.getvalue()[-600:]})
    except SystemExit as exc:
        results.append({"ok": exc.code == 0, "message": buf.getvalue()[-600:]})
print(json.dumps({"file": sglang.__file__, "stubbed": stubbed, "results": results}))
"""


def _cases(version: str) -> list[tuple[str, list[str], bool]]:
    """(what, argv, accepted?) for one release: each profile as rendered for it (where
    glmserve refuses it, translated anyway: the real parser must refuse that too), the seed
    as written, and the seed as ``validate --fix`` migrates it."""
    cases: list[tuple[str, list[str], bool]] = []
    for profile in PROFILES:
        spec = load_profile(profile)
        try:
            cases.append((f"{profile} rendered", for_release(spec, version).spec.argv, True))
        except FlagValidationError as exc:  # translated all the same: only the refusal is left
            translated = translate_argv(spec.argv, load_argspec(version)).argv
            if "trtllm_mla on SM120" in str(exc):
                # refused on the backend facts (a crash at run time), not on argparse: the
                # release's parser takes the flags
                cases.append((f"{profile} refused on backend facts", translated, True))
                continue
            cases.append((f"{profile} refused by glmserve", translated, False))
    seed_text = SEED.read_text()
    seed = find_launch(seed_text, "seed").argv
    cases.append(("seed as written", seed, version == "0.5.9" or version == "0.5.19"))
    fixed = fix_script(seed_text, "seed", load_argspec(version)).new_text
    cases.append(("seed after validate --fix", find_launch(fixed, "fixed").argv, True))
    return cases


@pytest.fixture(scope="module")
def real_verdicts() -> dict[str, dict]:
    """Every release's verdicts, its subprocesses run side by side (each import takes ~10 s)."""
    procs = {}
    for version in REAL_RELEASES:
        program = _REAL_PARSER.replace("SNIPPET", repr(dump_program_source()), 1).replace(
            "SOURCE", repr(str(sglang_source(version))), 1
        )
        procs[version] = subprocess.Popen(
            [sys.executable, "-c", program],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    out = {}
    for version, proc in procs.items():
        argvs = [argv for _, argv, _ in _cases(version)]
        stdout, stderr = proc.communicate(json.dumps(argvs), timeout=600)
        assert proc.returncode == 0, stderr[-3000:]
        data = json.loads(stdout.strip().splitlines()[-1])
        assert f"sglang-{version}" in data["file"], data["file"]  # the wheel, not the venv's
        out[version] = data
    return out


@pytest.mark.parametrize("version", REAL_RELEASES)
def test_rendered_profiles_and_fixed_reference_script_parse_under_the_real_release(
    version, real_verdicts
):
    results = real_verdicts[version]["results"]
    cases = _cases(version)
    assert len(results) == len(cases)
    for (what, argv, expected), real in zip(cases, results, strict=True):
        assert real["ok"] == expected, f"{what} on {version}: {real['message']}\n{argv}"
        if expected and what.endswith(("rendered", "--fix")):
            # the release's own spelling: its parser prints no deprecation warning
            assert "deprecated" not in real["message"], f"{what} on {version}: {real['message']}"


def test_trtllm_mla_for_0_5_23_is_the_dsa_spelling(real_verdicts):
    argv = for_release(load_profile("trtllm_mla"), "0.5.23").spec.argv
    assert " ".join(argv).count("--dsa-decode-backend trtllm --dsa-prefill-backend trtllm") == 1
    assert real_verdicts["0.5.23"]["results"][0]["ok"]


def _citations() -> list[tuple[str, dict]]:
    table = load_table()
    entries = [*table.renames, *table.successors, *table.removed_choices]
    return [
        (getattr(e, "old", None) or getattr(e, "flag", None) or e.value, src)
        for e in entries
        for src in e.sources
    ]


@pytest.mark.parametrize(
    "entry, src", _citations(), ids=lambda x: x if isinstance(x, str) else x["release"]
)
def test_citation_matches_the_release_source(entry, src):
    path = sglang_source(src["release"]) / src["file"].removeprefix("python/")
    text = path.read_text(encoding="utf-8")
    if "absent" in src:
        assert src["absent"] not in text, f"{entry}: {src}"
    else:
        line = text.splitlines()[src["line"] - 1]
        assert src["text"] in line, f"{entry}: {src['file']}:{src['line']} is {line!r}"
