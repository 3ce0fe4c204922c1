"""``config/flags.py``: a server argv is read once, with argparse's semantics, and every stage
agrees on what it says (issue 21 #2).

Before ``Flags``, ``LaunchSpec.flag_value`` took the FIRST ``--port`` and preferred
``--tp-size`` over a later ``--tp``, while ``identity`` took the LAST and preferred ``--tp``
and ``--model`` whatever their position: one launch, two readings. argparse (SGLang's
parser) keeps the last occurrence of each dest, so the checks below compare every reader with
a real ``argparse`` parser built with SGLang's option strings.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from glmserve.bench.comparable import argv_hash
from glmserve.config.flags import Flags
from glmserve.config.profiles import load_profile
from glmserve.config.render import render_script
from glmserve.config.spec import LaunchSpec
from glmserve.deploy.identity import expected_server_args
from glmserve.deploy.plan import drop_flags
from glmserve.remote.address import bind_host
from glmserve.report import flag_map
from glmserve.store import RunRecord

SRC = Path(__file__).resolve().parents[2] / "src" / "glmserve"


def _argparse(argv: list[str]) -> argparse.Namespace:
    """SGLang 0.5.9's option strings for the dests glmserve reads (server_args.py:2894,
    3302); ``--tp`` spelled out, as argparse's abbreviation of ``--tp-size`` reads it."""
    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--model-path", "--model", dest="model_path")
    p.add_argument("--tensor-parallel-size", "--tp-size", "--tp", dest="tp_size", type=int)
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--attention-backend")
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--cuda-graph-bs", type=int, nargs="+")
    return p.parse_args(argv)


REPEATED = [
    "--model", "/m/a", "--port", "30001", "--tp-size", "4", "--host", "127.0.0.2",
    "--attention-backend", "triton", "--model-path", "/m/b", "--tp", "2",
    "--port=30002", "--host", "127.0.0.3", "--attention-backend=flashinfer",
]  # fmt: skip


def test_every_reader_takes_the_last_value_as_argparse_does():
    ns = _argparse(REPEATED)
    spec = LaunchSpec(profile="p", argv=list(REPEATED))
    assert (spec.port, spec.tp_size) == (ns.port, ns.tp_size) == (30002, 2)
    assert spec.flag_value("--attention-backend") == ns.attention_backend == "flashinfer"
    assert bind_host(REPEATED) == ns.host == "127.0.0.3"  # where launch, watch, bench probe
    run = RunRecord(run_id="a1b2c3d4", host="local", profile="p", port=spec.port,
                    run_dir="/r", state="READY", spec={"argv": REPEATED})  # fmt: skip
    assert expected_server_args(run) == {
        "model_path": ns.model_path,  # /m/b: --model-path came after --model
        "attention_backend": ns.attention_backend,
        "tp_size": str(ns.tp_size),
        "port": str(ns.port),
    }
    assert flag_map(REPEATED)["--port"] == "30002"  # the report's flag table


def test_a_profile_override_of_an_alias_wins_everywhere(tmp_path, monkeypatch):
    """``--set server.tp=2`` over a profile's ``tp-size: 4``: argparse runs TP 2, so the
    launch sizes GPUs for 2 and identity expects 2 (the spec used to say 4, identity 2)."""
    d = tmp_path / "configs" / "profiles"
    d.mkdir(parents=True)
    (d / "p.yaml").write_text("description: x\nserver:\n  model-path: /m\n  tp-size: 4\n")
    monkeypatch.setenv("GLMSERVE_CONFIGS", str(tmp_path / "configs"))
    spec = load_profile("p", ["server.tp=2"])
    assert spec.tp_size == _argparse(spec.argv).tp_size == 2
    run = RunRecord(run_id="a1b2c3d4", host="local", profile="p", port=spec.port,
                    run_dir="/r", state="READY", spec={"argv": spec.argv})  # fmt: skip
    assert expected_server_args(run)["tp_size"] == "2"


def test_an_argv_splits_into_flags_with_their_values():
    argv = ["x", "--a", "1", "--b", "--c=3", "--cuda-graph-bs", "1", "2", "-4", "--d"]
    flags = Flags.parse(argv)
    assert [(f.name, f.values) for f in flags.items] == [
        (None, ("x",)), ("--a", ("1",)), ("--b", ()), ("--c", ("3",)),
        ("--cuda-graph-bs", ("1", "2", "-4")), ("--d", ()),
    ]  # fmt: skip
    assert flags.get("--b") is True and flags.get("--zz") is None
    assert flags.groups() == [["x"], ["--a", "1"], ["--b"], ["--c=3"],
                              ["--cuda-graph-bs", "1", "2", "-4"], ["--d"]]  # fmt: skip
    assert [flags.flag_at(i) for i in (0, 2, 4, 7, 99)] == [None, "--a", "--c", "--cuda-graph-bs",
                                                              "--d"]  # fmt: skip
    assert drop_flags(argv, ("--cuda-graph-bs", "--a")) == ["x", "--b", "--c=3", "--d"]
    # every value of a flag with several (a diff of the second one used to be invisible)
    assert (
        flag_map(argv)["--cuda-graph-bs"]
        == "1 2 -4"
        == " ".join(map(str, _argparse(["--cuda-graph-bs", "1", "2", "-4"]).cuda_graph_bs))
    )


def test_placement_is_left_out_of_the_hash_in_every_form():
    base = ["--model", "m", "--tp", "8"]
    assert argv_hash([*base, "--port", "1", "--host=0.0.0.0"]) == argv_hash(
        ["--port=2", *base, "--host", "::"]
    )


def test_the_script_puts_each_flag_on_its_own_line():
    spec = LaunchSpec(profile="p", argv=["--model", "m", "--cuda-graph-bs", "1", "2", "--x"])
    assert "  --cuda-graph-bs 1 2 \\\n" in render_script(spec)


# -- no stage scans an argv itself ------------------------------------------------------------
# A hand-written scanner: indexing an argv by a loop variable, or telling flags from values by
# their "--". Allowed: ``config/flags.py`` (the one reader), ``argspec/emulator.py`` (argparse
# itself, for one release), the simulator (SGLang's stand-in parses its own command line, as
# SGLang's argparse would) and the runtime patch (runs inside SGLang, imports nothing of ours).
SCANNING = re.compile(
    r"argv\[\s*[a-z_]\w*\s*(?:[+-]\s*1\s*)?\]"  # argv[i], argv[i + 1]
    r"|\.startswith\(\s*(?:f?[\"']--|flag\b)"  # tok.startswith("--"), tok.startswith(flag + "=")
    r"|argv\.index\("  # argv[argv.index("--x") + 1]: the first one, where argparse takes the last
)
READERS = ("config/flags.py", "argspec/emulator.py", "simulator/", "runtime/")
# Lines that match the pattern but read no argv, each with why.
NOT_ARGV = {
    "store_migrations.py": "SQL migration text: a '--' comment line",
    "argspec/launch_script.py": "a shell script's words, before there is an argv",
}


def _scanners() -> list[str]:
    hits = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(READERS) or rel in NOT_ARGV:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = re.sub(r"``[^`]*``", "", line.split("#", 1)[0])  # a docstring's ``argv[i]``
            if SCANNING.search(code):
                hits.append(f"{rel}:{n}: {line.strip()}")
    return hits


def test_no_stage_rescans_an_argv():
    hits = _scanners()
    assert not hits, "read argv through config.flags.Flags:\n" + "\n".join(hits)


@pytest.mark.parametrize(
    "line",
    [
        "        tok = argv[i]",
        "            value = argv[i + 1]",
        '        if tok.startswith("--"):',
        '        elif tok.startswith(flag + "="):',
        '        version = argv[argv.index("--sim-sglang-version") + 1]',
    ],
)
def test_the_scanner_check_sees_a_scanner(line):
    """The rule can fail: each shape the old scanners had is caught."""
    assert SCANNING.search(line)


def test_the_allowed_exceptions_still_exist():
    """An exception whose file is gone would silently widen the rule."""
    for rel in (*READERS, *NOT_ARGV):
        assert (SRC / rel).exists(), rel
