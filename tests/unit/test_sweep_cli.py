"""sweep/profile/report verbs: usage errors are one line with exit 2, before anything runs."""

from __future__ import annotations

import pytest

from glmserve.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return int(rc), out, err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["sweep"], "--profiles is required"),
        # given but empty ("$PROFILES" unset) is not "not given"
        (["sweep", "--profiles", ""], "--profiles: an empty list"),
        (["sweep", "--profiles", " "], "--profiles: an empty list"),
        (["sweep", "--profiles", "cutlass_mla", "--bench", "burst"], "--bench: expected decode"),
        (["sweep", "--profiles", "cutlass_mla", "--concurrency", "4,x"], "--concurrency"),
        (["sweep", "--profiles", "cutlass_mla,cutlass_mla"], "listed twice"),
        (["sweep", "--resume", "sw-missing"], "unknown sweep 'sw-missing'"),
        (["report", "nope", "--html", "x.html"], "neither a sweep nor a run"),
        (["profile", "nope"], "nope"),
    ],
)
def test_usage_errors_exit_2_with_one_line(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_unknown_profile_fails_before_a_sweep_is_created(capsys):
    import os
    from pathlib import Path

    code, _, err = run(capsys, "sweep", "--simulate", "--profiles", "cutlass_mla,nosuch")
    assert code == 2 and "nosuch" in err
    assert not (Path(os.environ["GLMSERVE_HOME"]) / "sweeps").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["sweep", "--simulate", "--profiles", "flashinfer"],
        ["tune", "--simulate", "--profile", "flashinfer", "--search", "server.cuda-graph-max-bs=8"],
    ],
)
def test_an_unwritable_home_is_exit_2_with_one_line_naming_the_folder(capsys, argv):
    import os
    from pathlib import Path

    noun = argv[0]
    (Path(os.environ["GLMSERVE_HOME"]) / f"{noun}s").write_text("")  # fails for root too
    code, _, err = run(capsys, *argv)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert f"/{noun}s/" in err and f"cannot write the {noun}'s state" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--output-len", "0"], "--output-len must be at least 1, got 0"),
        (["--input-len", "-5"], "--input-len must be at least 1, got -5"),
        (["--num-prompts", "-1"], "--num-prompts must be at least 1"),
        (["--bench", "concurrency", "--num-prompts", "0"], "--num-prompts must be at least 1"),
        (["--stall-timeout", "0"], "--stall-timeout: expected a finite number > 0 s, got 0"),
        (["--profile-steps", "-1"], "--profile-steps: expected 0 or more, got -1"),
        (["--host", "nohost"], "unknown host 'nohost'"),
        (["--nodes", "a,b"], "unknown host 'a'"),
        # audit round 2: a bad simulated flag was refused only after the sweep existed
        (["--set", "sim.bogus=1"], "unknown simulator option --sim-bogus"),
        (["--bench", "concurrency", "--concurrency", "1,,2"], "an empty item in '1,,2'"),
        (["--set", "sim.speed=nan"], "--sim-speed: expected a finite number > 0, got nan"),
    ],
)
def test_bad_options_are_refused_before_a_sweep_is_created_or_a_server_launched(
    capsys, args, message
):
    import os
    from pathlib import Path

    from glmserve.store import RunStore

    code, _, err = run(capsys, "sweep", "--simulate", "--profiles", "flashinfer", *args)
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (Path(os.environ["GLMSERVE_HOME"]) / "sweeps").exists()
    with RunStore.open() as store:
        assert store.list_runs() == []  # nothing was launched
