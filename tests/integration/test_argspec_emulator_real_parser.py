"""``validate_argv`` with the shipped 0.5.9 spec must give the same verdict as the real
sglang 0.5.9 ``ServerArgs`` argparse on every argv in the table (each case chosen for one
argparse rule) and on 1,500 seeded random argvs over all of 0.5.9's flags.

The real parser runs in one subprocess (importing sglang takes seconds and, without a
torchvision matching the CPU torch, needs dump_program's stub importer; keeping that out of
the test process keeps stub modules out of other tests). CI installs
``sglang==0.5.9 --no-deps`` plus its light imports; without sglang the test is skipped.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from glmserve.argspec.emulator import validate_argv
from glmserve.argspec.host_dump import dump_program_source
from glmserve.argspec.launch_script import extract_launch_argv
from glmserve.argspec.releases import load_argspec

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

M = ["--model", "m"]
SEED_SCRIPT = Path(__file__).parent.parent / "data" / "scripts" / "run_tp8_trtllm_mla.sh"
SEED, _ = extract_launch_argv(SEED_SCRIPT.read_text(encoding="utf-8"), str(SEED_SCRIPT))

# (argv, argparse accepts it?) -- the expectation documents intent; the real parser decides.
CASES: list[tuple[list[str], bool]] = [
    # accepted
    (["--model-path", "m"], True),
    (M, True),
    (SEED, True),
    ([*M, "--tp-size", "8"], True),
    ([*M, "--tp", "8"], True),  # unique prefix of --tp-size
    (["--model=m", "--port=8000"], True),
    ([*M, "--mem-fraction-static", "0.92"], True),
    ([*M, "--mem-fraction-static", "1e-1"], True),
    ([*M, "--attention-backend", "trtllm_mla", "--page-size", "64"], True),
    ([*M, "--nsa-decode-backend", "trtllm"], True),
    ([*M, "--port", "8000", "--port", "8001"], True),
    ([*M, "--json-model-override-args", '{"a": 1}'], True),
    ([*M, "--hybrid-kvcache-ratio"], True),  # DeprecatedAction: warns, still parses
    ([*M, "--trust-remote-code", "--disable-radix-cache"], True),
    ([*M, "--lora-paths", "a", "b", "c"], True),
    ([*M, "--lora-paths"], True),  # nargs='*' takes zero values
    ([*M, "--chunked-prefill-size", "-1"], True),  # negative number is a value
    ([*M, "--chunked-prefill-size=-1"], True),
    ([*M, "--served-model-name", "glm 5"], True),
    ([*M, "--tp-size", " 8 "], True),  # int() strips whitespace
    ([*M, "--max-running-requests", "1_000"], True),  # int() takes underscores
    (["--model-path=--weird"], True),
    ([*M, "--kv-cache-dtype", "fp8_e4m3"], True),
    ([*M, "--cuda-graph-bs", "1", "2", "4"], True),
    ([*M, "--host", "::1"], True),
    ([*M, "--mem-fraction-static", "nan"], True),  # float('nan') parses
    ([*M, "--json-model-override-args", "{bad"], True),  # a str here; checked after parsing
    ([*M, "--preferred-sampling-params", '{"temperature": 0}'], True),
    ([*M, "--forward-hooks", "[]"], True),
    ([*M, "--tp-size=8"], True),
    (["--help"], True),  # prints help, exits 0 before the required check
    (["--bogus", "--help"], True),  # unknown flags are only reported at the end
    (["--help", "--port"], True),  # nothing after --help is consumed
    ([*M, "--he"], True),  # unique prefix of --help
    ([*M, "--tp-size=--"], True),  # argparse drops a "--" value and stores [] unchecked
    # rejected
    ([], False),  # --model-path is required
    (["--port", "8000"], False),
    ([*M, "--nonexistent-flag"], False),
    ([*M, "--nsa-decode-backend", "bogus"], False),
    ([*M, "--attention-backend", "cutlass_mla2"], False),
    ([*M, "--attention-backend=trtllm"], False),
    ([*M, "--tp-size", "eight"], False),
    ([*M, "--tp-size", "8.0"], False),
    ([*M, "--mem-fraction-static", "high"], False),
    ([*M, "--port"], False),
    ([*M, "--port", "--tp-size", "8"], False),
    ([*M, "--port", "80.5"], False),
    ([*M, "--trust-remote-code=yes"], False),
    ([*M, "--trust-remote-code="], False),
    ([*M, "extra"], False),
    ([*M, "--disable-radix-cache", "true"], False),
    ([*M, "--mod", "x"], False),  # ambiguous prefix
    ([*M, "--disable", "x"], False),
    ([*M, "--preferred-sampling-params", "{bad"], False),  # type=json.loads
    ([*M, "--forward-hooks", "not json"], False),  # json_list_type
    ([*M, "--mod=x"], False),
    ([*M, "--dsa-decode-backend", "trtllm"], False),  # the 0.5.23 name
    ([*M, "--", "--port", "8000"], False),
    ([*M, "-p", "8000"], False),
    ([*M, "--kv-cache-dtype", "fp16"], False),
    ([*M, "--quantization"], False),
    ([*M, "--tp-size=8=9"], False),
    ([*M, "--cuda-graph-bs"], False),  # nargs='+' needs one
    ([*M, "--cuda-graph-bs", "1", "x"], False),
    ([*SEED, "--attention-backend", "cutlass"], False),
    ([*M, "--nsa-prefill-backend", "trtllm", "--nsa-decode-backend"], False),
    (["--help", "--h"], False),  # ambiguity is found while classifying, before --help runs
    ([*M, "--tp-size", "x", "--help"], False),  # a bad value before --help still fails
    ([*M, "--help=1"], False),
    ([*M, "--h", "x"], False),  # --help, --host, ... share the prefix
]


def _random_argvs(count: int, seed: int = 20261130) -> list[list[str]]:
    """Seeded random argvs over every 0.5.9 flag: values from its choices or junk, ``=``
    forms, prefixes, flags of other releases, stray words. Deterministic, so a failure
    reproduces; broad, so the table's blind spots get exercised."""
    spec = load_argspec("0.5.9")
    rng = random.Random(seed)
    options = sorted(o for o in spec.by_option if o.startswith("--"))
    others = ["--dsa-decode-backend", "--cuda-graph-max-bs-decode", "--enable-tf32-matmul"]
    junk = ["1", "0", "-1", "2.5", "x", "", "[1]", '{"a": 1}', "auto", "--", "1k", "a b"]

    def value(opt: str) -> str:
        act = spec.by_option.get(opt)
        pool = junk + ([str(c) for c in act.choices][:6] * 2 if act and act.choices else [])
        return rng.choice(pool)

    argvs = []
    for _ in range(count):
        argv = ["--model", "m"] if rng.random() < 0.9 else []
        for _ in range(rng.randint(0, 5)):
            opt = rng.choice(options)
            kind = rng.random()
            if kind < 0.45:
                argv += [opt, value(opt)]
            elif kind < 0.6:
                argv += [opt]
            elif kind < 0.7:
                argv += [f"{opt}={value(opt)}"]
            elif kind < 0.8:
                argv += [opt[: rng.randint(3, len(opt))], value(opt)]
            elif kind < 0.85:
                argv += [value(opt)]
            elif kind < 0.9:
                argv += [rng.choice(others), value(opt)]
            else:
                argv += [opt, value(opt), value(opt)]
        argvs.append(argv)
    return argvs


RANDOM_CASES = _random_argvs(1500)

_REAL_PARSER = r"""
import argparse, contextlib, io, json, sys
cases = json.loads(sys.stdin.read())
ns = {"__name__": "glmserve_dump"}
exec(SNIPPET, ns)
with contextlib.redirect_stdout(sys.stderr):
    ServerArgs, stubbed = ns["_import_server_args"](True)
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
results = []
for argv in cases:
    buf = io.StringIO()
    try:
        with contextlib.redirect_stderr(buf), contextlib.redirect_stdout(buf):
            parser.parse_args(argv)
        results.append({"ok": True, "message": ""})
    except SystemExit as exc:
        results.append({"ok": exc.code == 0, "message": buf.getvalue().strip()[-400:]})
    except Exception as exc:
        results.append({"ok": False, "message": repr(exc)})
print(json.dumps({"stubbed": stubbed, "results": results}))
"""


def _sglang_version() -> str | None:
    if importlib.util.find_spec("sglang") is None:
        return None
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


@pytest.fixture(scope="module")
def real_verdicts() -> list[dict]:
    version = _sglang_version()
    if version is None:
        pytest.skip(
            "sglang is not installed (CI: pip install --no-deps sglang==0.5.9 + light deps)"
        )
    if version != "0.5.9":
        pytest.skip(f"the agreement table is for sglang 0.5.9; installed is {version}")
    program = _REAL_PARSER.replace("SNIPPET", repr(dump_program_source()), 1)
    proc = subprocess.run(
        [sys.executable, "-c", program],
        input=json.dumps([argv for argv, _ in CASES] + RANDOM_CASES),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(data["results"]) == len(CASES) + len(RANDOM_CASES)
    return data["results"]


def test_table_is_big_and_mixed() -> None:
    assert len(CASES) >= 40
    assert sum(ok for _, ok in CASES) >= 15
    assert sum(not ok for _, ok in CASES) >= 15


@pytest.mark.parametrize("case", range(len(CASES)), ids=lambda i: " ".join(CASES[i][0])[:60])
def test_validate_agrees_with_real_parser(case: int, real_verdicts: list[dict]) -> None:
    argv, expected = CASES[case]
    real = real_verdicts[case]
    ours = validate_argv(argv, load_argspec("0.5.9"))
    assert real["ok"] == expected, f"table expectation wrong; real parser said: {real['message']}"
    assert ours.ok == real["ok"], (
        f"real parser: {'ok' if real['ok'] else real['message']}\n"
        f"glmserve: {[f.format() for f in ours.findings]}"
    )


def test_random_argvs_agree_with_real_parser(real_verdicts: list[dict]) -> None:
    spec = load_argspec("0.5.9")
    real = real_verdicts[len(CASES) :]
    disagree = [
        (argv, verdict["message"])
        for argv, verdict in zip(RANDOM_CASES, real, strict=True)
        if validate_argv(argv, spec).ok != verdict["ok"]
    ]
    assert not disagree, disagree[:5]
    # the sample is not lopsided: both verdicts occur often
    assert 200 < sum(v["ok"] for v in real) < len(real) - 200
