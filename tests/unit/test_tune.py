"""``glmserve tune`` without servers: parsing, scoring, the strategies and the host pool,
driven through the ``JobRunner`` seam by a runner whose outcome is a known function."""

from __future__ import annotations

import threading
import time

import pytest
from tests.fixtures.sweep_tune_fakes import SPACE, FakeRunner, make

from glmserve.errors import ConfigError, HostLost
from glmserve.tune import state as st
from glmserve.tune.profile_out import changed_keys
from glmserve.tune.runner import run_tune
from glmserve.tune.space import (
    Budget,
    grid,
    level_metrics,
    pareto_front,
    parse_budget,
    parse_search,
    parse_slo,
    starting_config,
)


def best_key(t: st.Tune) -> str:
    return st.best_trial(t).key


def test_coordinate_search_finds_the_grid_optimum_in_fewer_trials():
    full = run_tune(make(None, "auto"), FakeRunner(), {}, lambda m: None)
    assert full.strategy == "grid" and len(full.trials) == 36
    small = run_tune(make(Budget(trials=24), "auto"), FakeRunner(), {"a": 1}, lambda m: None)
    assert small.strategy == "coordinate"
    assert best_key(small) == best_key(full) == "a=3,b=2,c=y@c8"
    assert len(small.trials) < len(full.trials) and len(small.trials) <= 24
    # the OOM config is a failed trial with its diagnosis; the search went on
    assert any(t.status == st.CRASHED for t in full.trials)
    assert "CUDA out of memory" in st.render_markdown(full)


def test_a_lost_host_leaves_the_pool_and_its_job_runs_on_another():
    h2_took_one = threading.Event()

    class Lossy(FakeRunner):
        def run_job(self, tune, host, slot, trials):
            if host == "h2":
                h2_took_one.set()
            else:
                assert h2_took_one.wait(10)  # h2 holds a job when it is lost
            super().run_job(tune, host, slot, trials)

    runner = Lossy(lose="h2")
    tune = run_tune(make(None, "grid"), runner, {}, lambda m: None)
    assert tune.lost_hosts == ["h2"] and tune.status == "done"
    assert all(t.status in (st.OK, st.CRASHED) and t.host == "h1" for t in tune.trials)
    lost_key = next(k for h, k in runner.jobs if h == "h2")
    requeued = next(t for t in tune.trials if t.key == lost_key)
    assert requeued.requeued_from == ["h2"]


def test_every_host_lost_is_an_error_and_the_tune_is_resumable():
    from glmserve.errors import TransportError

    tune = make(None, "grid", hosts=("h2",))
    with pytest.raises(TransportError, match="every host"):
        run_tune(tune, FakeRunner(lose="h2"), {}, lambda m: None)
    again = st.load_tune(tune.tune_id)
    again.lost_hosts, again.hosts = [], ["h1"]
    done = run_tune(again, FakeRunner(), {}, lambda m: None)
    assert all(t.finished for t in done.trials) and best_key(done) == "a=3,b=2,c=y@c8"


def test_jobs_run_concurrently_one_per_host():
    seen: dict[str, int] = {}
    both = threading.Barrier(2, timeout=10)

    class Overlap(FakeRunner):
        def run_job(self, tune, host, slot, trials):
            seen[host] = seen.get(host, 0) + 1
            if seen[host] == 1:
                both.wait()  # each host's first job waits for the other's: they overlap
            super().run_job(tune, host, slot, trials)

    run_tune(make(None, "grid"), Overlap(), {}, lambda m: None)
    assert set(seen) == {"h1", "h2"}


def test_parsing_refuses_bad_input_with_one_line():
    assert parse_search(["server.max-running-requests=8,32"]) == [
        ("max-running-requests", ["8", "32"])
    ]
    for bad in (["max-running-requests=8"], ["server.x=1,1"], ["server.x="], []):
        with pytest.raises(ConfigError):
            parse_search(bad)
    assert parse_slo("ttft_p99_ms=2000,tpot_p99_ms=50") == {
        "ttft_p99_ms": 2000.0,
        "tpot_p99_ms": 50.0,
    }
    for bad in ("ttft=1", "tpot_p99_ms=-1", "tpot_p99_ms=nan"):
        with pytest.raises(ConfigError):
            parse_slo(bad)
    assert parse_budget("40") == Budget(trials=40)
    assert parse_budget("15m") == Budget(seconds=900.0)
    for bad in ("0", "1.5", "ten"):
        with pytest.raises(ConfigError):
            parse_budget(bad)


def test_metrics_slo_goodput_pareto_and_starting_config():
    level = {
        "output_tok_s": 1000.0,
        "completed": 10,
        "errors": 0,
        "ttft_ms": {"p50": 10.0, "p99": 40.0},
        "tpot_ms": {"p99": 6.0},
        "decode_tok_s": {"p50": 100.0},
    }
    m = level_metrics(level, {"tpot_p99_ms": 50.0}, scale=10.0)  # sim at 10x: box units
    assert (m["output_tok_s"], m["tpot_p99_ms"], m["ttft_p99_ms"]) == (100.0, 60.0, 400.0)
    assert not m["meets_slo"] and m["goodput"] == 0.0
    assert m["slo_violations"] == ["tpot_p99_ms 60.0 > 50"]
    assert level_metrics(level, {"tpot_p99_ms": 50.0})["goodput"] == 1000.0
    front = pareto_front([(100, 10, "a"), (200, 20, "b"), (150, 30, "c"), (200, 25, "d")])
    assert front == ["a", "b"]
    assert starting_config(SPACE, {"a": 2, "b": 9}) == {"a": "2", "b": "1", "c": "x"}


def test_write_profile_sets_only_what_changed():
    parent = {"mem-fraction-static": 0.92, "max-running-requests": 64, "port": 8000}
    got = changed_keys(
        parent,
        {"mem-fraction-static": "0.92", "max-running-requests": "16"},
        ["server.port=9000", "sim.speed=10", "server.disable-cuda-graph=false"],
    )
    assert got == {"max-running-requests": 16, "disable-cuda-graph": False}


def test_a_duration_budget_starts_no_job_after_its_deadline():
    class Slow(FakeRunner):
        def run_job(self, tune, host, slot, trials):
            super().run_job(tune, host, slot, trials)
            end = time.time() + 0.25  # each job outlasts the whole budget
            while time.time() < end:
                time.sleep(0.01)

    tune = make(Budget(seconds=0.2), "auto", hosts=("h1",))
    assert tune.strategy == "coordinate"
    runner = Slow()
    done = run_tune(tune, runner, {}, lambda m: None)
    # the seed ran; its neighbours were never started (the budget was spent)
    assert len(runner.jobs) == 1 and done.status == "done"
    assert all(t.status == st.OK for t in done.trials)


def test_report_renders_a_tune_page_with_pareto_plot_trials_and_diagnoses(tmp_path):
    from glmserve.report import load_report_data, render_html, write_html

    tune = run_tune(make(None, "grid"), FakeRunner(), {}, lambda m: None)
    page = render_html(load_report_data([tune.tune_id]))
    assert f'data-tune="{tune.tune_id}"' in page and 'data-chart="tune-pareto"' in page
    front = st.pareto(tune)
    assert page.count('<circle class="front"') == len(front) >= 1
    ok = [t for t in tune.trials if t.status == st.OK]
    assert page.count("<circle ") == len(ok)
    assert page.count('<tr class="status-') == len(tune.trials)
    assert "CUDA out of memory" in page and "Best:</b> a=3, b=2, c=y at concurrency 8" in page
    assert "src=" not in page and "href=" not in page  # self-contained
    assert write_html(load_report_data([tune.tune_id]), tmp_path / "r.html").exists()


def test_report_cli_counts_a_tune_and_does_not_call_it_empty(tmp_path, capsys):
    """Audit round 2: `report TUNE_ID` wrote the tune page but said "(0 profiles/runs)" and
    "warning: no results in the selected ids"."""
    from glmserve.cli import main

    tune = run_tune(make(None, "grid"), FakeRunner(), {}, lambda m: None)
    assert main(["report", tune.tune_id, "--html", str(tmp_path / "r.html")]) == 0
    cap = capsys.readouterr()
    assert "(0 profiles/runs, 1 tune(s))" in cap.out and "warning" not in cap.err


@pytest.mark.parametrize("extra", [["--profile", ""], ["--profile", "flashinfer"]])
def test_resume_refuses_a_profile_even_an_empty_one(capsys, extra):
    """A resumed tune keeps its own --profile: ``--profile ''`` ("$PROFILE" unset) was
    taken as not given and the resume went on silently."""
    from glmserve.cli import main

    tune = st.Tune(
        tune_id=st.new_tune_id(), profile="flashinfer", search=[["max-running-requests", ["8"]]],
        loads=[1], objective="output_tok_s", slo={}, budget=None, hosts=["local"],
        simulate=True, status="interrupted",
    )  # fmt: skip
    st.save_tune(tune)
    code = main(["tune", "--resume", tune.tune_id, *extra])
    err = capsys.readouterr().err
    assert code == 2 and "--resume: the tune keeps its own --profile and --search" in err, err
    again = st.load_tune(tune.tune_id)
    assert again.trials == [] and again.status == "interrupted"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--search", "mem-fraction-static=0.9"], "--search 'mem-fraction-static=0.9'"),
        (["--search", "server.max-running-requests=8,,32"], "an empty item in '8,,32'"),
        (["--search", "server.max-running-requests=8", "--slo", "p99=1"], "--slo 'p99=1'"),
        (["--search", "server.max-running-requests=8", "--budget", "ten"], "--budget 'ten'"),
        (["--search", "server.max-running-requests=8", "--hosts", "nosuch"], "nosuch"),
        (["--search", "server.max-running-requests=8", "--objective", "speed"], "--objective"),
        (
            ["--search", "server.max-running-requests=8", "--budget", "1", "--concurrency", "1,4"],
            "one config costs 2 trials",
        ),
        (["--resume", "tu-nope"], "unknown tune"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(args, needle):
    from tests.fixtures.cli import run_glmserve

    prof = [] if args[0] == "--resume" else ["--profile", "trtllm_mla"]
    res = run_glmserve("tune", *prof, *args)
    assert res.returncode == 2, res.stderr
    assert needle in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("../evil", "invalid --write-profile name '../evil'"),
        ("flashinfer", "--write-profile flashinfer: that is the tuned profile itself"),
        ("mine", "mine.yaml exists and was not written by tune"),
    ],
)
def test_write_profile_is_refused_before_a_tune_is_created(capsys, name, needle):
    import os
    from pathlib import Path

    from glmserve.cli import main

    mine = Path(os.environ["GLMSERVE_CONFIG_DIR"]) / "profiles" / "mine.yaml"
    mine.parent.mkdir(parents=True)
    mine.write_text("extends: flashinfer\n")  # hand-written: not the tune's to overwrite
    argv = ["tune", "--simulate", "--profile", "flashinfer"]
    code = main([*argv, "--search", "server.max-running-requests=8", "--write-profile", name])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert st.TUNES.ids() == []  # nothing created, so nothing launched
    assert mine.read_text() == "extends: flashinfer\n"


def test_write_profile_is_refused_before_a_resumed_tune_runs_a_trial(capsys):
    from glmserve.cli import main

    tune = st.Tune(
        tune_id=st.new_tune_id(),
        profile="flashinfer",
        search=[["max-running-requests", ["8"]]],
        loads=[1],
        objective="output_tok_s",
        slo={},
        budget=None,
        hosts=["local"],
        simulate=True,
        status="interrupted",
    )
    st.save_tune(tune)
    code = main(["tune", "--resume", tune.tune_id, "--write-profile", "flashinfer"])
    err = capsys.readouterr().err
    assert code == 2 and "that is the tuned profile itself" in err, err
    again = st.load_tune(tune.tune_id)
    assert again.trials == [] and again.status == "interrupted"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--output-len", "0"], "--output-len must be at least 1, got 0"),
        (["--input-len", "-5"], "--input-len must be at least 1, got -5"),
        (["--num-prompts", "-1"], "--num-prompts must be at least 1"),
        (["--host-lost-after", "-5"], "--host-lost-after: expected seconds >= 0"),
        (["--sglang-version", "9.9.9"], "no argspec shipped for sglang '9.9.9'"),
        (["--stall-budget", "foo=1"], "--stall-budget foo=1"),
        # audit round 2: a bad simulated flag skipped every trial ("no trial met the SLOs")
        (["--set", "sim.bogus=1"], "unknown simulator option --sim-bogus"),
    ],
)
def test_bad_options_are_refused_before_a_tune_is_created_or_a_server_launched(
    capsys, args, needle
):
    from glmserve.cli import main
    from glmserve.store import RunStore

    argv = ["tune", "--simulate", "--profile", "flashinfer", "--concurrency", "1"]
    code = main([*argv, "--search", "server.max-running-requests=8", *args])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert st.TUNES.ids() == []
    with RunStore.open() as store:
        assert store.list_runs() == []  # nothing was launched


@pytest.mark.parametrize("key", ["port", "host", "model-path", "dist-init-addr"])
def test_search_refuses_flags_that_name_the_server_or_where_it_runs(key):
    with pytest.raises(ConfigError, match=rf"^--search 'server\.{key}=1,2': server\.{key} names"):
        parse_search([f"server.{key}=1,2"])


def test_tune_help_lists_every_flag_search_refuses(capsys, monkeypatch):
    from glmserve.cli import main
    from glmserve.tune.space import UNTUNABLE

    monkeypatch.setenv("COLUMNS", "400")  # one help line per option: nothing wrapped mid-name
    assert main(["tune", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    listed = text.split("Not searched (which server, where it runs):")[1].split(".")[0]
    assert [k.strip() for k in listed.split(",")] == list(UNTUNABLE)


def test_resume_first_stops_the_servers_its_unfinished_trials_recorded_and_only_those():
    class Reclaiming(FakeRunner):
        def __init__(self) -> None:
            super().__init__()
            self.reclaimed: list[tuple[str, str]] = []

        def reclaim(self, host, run_id):
            assert not self.jobs, "reclaimed after a job started"
            self.reclaimed.append((host, run_id))
            if run_id == "r-gone":
                raise HostLost("ssh: connect to host h2: Connection refused")
            return run_id == "r-left"

    tune = make(None, "grid", hosts=("h1", "h2"))
    configs = grid(tune.space)
    left = st.Trial(config=configs[0], concurrency=2, status=st.RUNNING, host="h1")
    left.run_id = "r-left"  # the tune was killed -9 while this ran
    stopped = st.Trial(config=configs[1], concurrency=2, status=st.INTERRUPTED, host="h2")
    stopped.run_id = "r-gone"
    done = st.Trial(config=configs[2], concurrency=2, status=st.OK, host="h1", run_id="r-ok")
    launching = st.Trial(config=configs[3], concurrency=2, status=st.RUNNING, host="h2")
    tune.trials = [left, stopped, done, launching]
    runner, said = Reclaiming(), []
    run_tune(tune, runner, {}, said.append)
    assert runner.reclaimed == [("h1", "r-left"), ("h2", "r-gone")]  # recorded, unfinished
    assert "h1: stopped run r-left, left running by the earlier attempt" in said
    assert any(m.startswith("h2: could not stop run r-gone") for m in said)
    assert tune.status == "done" and left.status == st.OK  # and it ran again


@pytest.mark.parametrize(
    ("profile", "needle"), [("", "--profile: empty"), (" ", "--profile: empty")]
)
def test_an_empty_profile_is_named_empty_not_missing(capsys, profile, needle):
    """``--profile "$PROFILE"`` with the variable unset said "--profile is required"."""
    from glmserve.cli import main

    argv = ["tune", "--simulate", "--profile", profile, "--search", "server.max-running-requests=8"]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert st.TUNES.ids() == []
