"""sweep: the loop (crash recorded, resume, Ctrl-C stops the server), table and storage."""

from __future__ import annotations

import json

import pytest
from tests.fixtures.sweep_tune_fakes import Scripted

from glmserve.errors import ConfigError, RunNotFound, TransportError
from glmserve.sweep.loop import StepOutcome, run_sweep
from glmserve.sweep.state import (
    CRASHED,
    FAILED,
    INTERRUPTED,
    OK,
    RUNNING,
    SKIPPED,
    SweepOptions,
    load_sweep,
    resume_options,
    start_sweep,
    sweep_dir,
)
from glmserve.sweep.summary import sweep_rows

PROFILES = ["flashinfer_gtc", "trtllm_mla", "cutlass_mla"]


def test_crash_is_recorded_and_the_sweep_moves_on_with_speedups():
    opts = SweepOptions(bench=["decode", "concurrency"], concurrency=[1, 8])
    sw = start_sweep(PROFILES, None, True, opts)
    be = Scripted(crash={"trtllm_mla"})
    run_sweep(sw, opts, be)
    assert not be.live  # every server stopped, the crashed one too
    assert [e.status for e in sw.entries] == [OK, CRASHED, OK]
    rows = {r["profile"]: r for r in sweep_rows(sw)}
    assert rows["trtllm_mla"]["diagnosis"] == "UNSUPPORTED_ARCH: no kernel image for sm_120"
    assert rows["flashinfer_gtc"]["speedup"] == pytest.approx(1.0)
    assert rows["cutlass_mla"]["speedup"] == pytest.approx(41.4 / 13.8)
    assert rows["cutlass_mla"]["aggregate_tok_s"] == {1: pytest.approx(33.12),
                                                      8: pytest.approx(264.96)}  # fmt: skip
    stored = json.loads((sweep_dir(sw.sweep_id) / "sweep.json").read_text())
    assert stored["status"] == "done" and stored["entries"][1]["run_id"] == "run-trtllm_mla"
    md = (sweep_dir(sw.sweep_id) / "sweep.md").read_text()
    assert "| trtllm_mla | crashed | UNSUPPORTED_ARCH: no kernel image for sm_120 |" in md
    assert "| cutlass_mla | ok |" in md and "3.00x" in md
    assert "trtllm-gen kernels need SM100" in md


def test_until_first_success_skips_the_rest():
    opts = SweepOptions(until_first_success=True)
    sw = start_sweep(["trtllm_mla", "cutlass_mla", "flashinfer_gtc"], None, True, opts)
    be = Scripted(crash={"trtllm_mla"})
    run_sweep(sw, opts, be)
    assert [e.status for e in sw.entries] == [CRASHED, OK, SKIPPED]
    assert "launch flashinfer_gtc" not in be.calls


def test_tool_error_stops_the_sweep_unless_continue_on_error():
    opts = SweepOptions()
    sw = start_sweep(PROFILES, "gpu8", False, opts)
    with pytest.raises(TransportError):
        run_sweep(sw, opts, Scripted(error="trtllm_mla"))
    assert [e.status for e in sw.entries] == [OK, FAILED, "pending"]
    assert load_sweep(sw.sweep_id).status == "stopped"
    opts2 = SweepOptions(continue_on_error=True)
    sw2 = start_sweep(PROFILES, "gpu8", False, opts2)
    run_sweep(sw2, opts2, Scripted(error="trtllm_mla"))
    assert [e.status for e in sw2.entries] == [OK, FAILED, OK]
    assert "Connection refused" in sweep_rows(sw2)[1]["diagnosis"]


def test_ctrl_c_stops_the_running_server_and_resume_continues():
    opts = SweepOptions(capture_steps=3)
    sw = start_sweep(PROFILES, None, True, opts)
    be = Scripted(crash={"trtllm_mla"}, interrupt_bench="cutlass_mla")
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sw, opts, be)
    assert "stop run-cutlass_mla" in be.calls and not be.live
    saved = load_sweep(sw.sweep_id)
    assert saved.status == "interrupted"
    assert [e.status for e in saved.entries] == [OK, CRASHED, INTERRUPTED]
    be2 = Scripted(crash={"trtllm_mla"})
    run_sweep(saved, resume_options(saved), be2)
    assert be2.calls == ["launch cutlass_mla", "stop run-cutlass_mla"]
    assert [e.status for e in saved.entries] == [OK, CRASHED, OK]
    assert saved.entries[2].trace == {"findings": [{"message": "trace of run-cutlass_mla"}]}


def test_bad_ids_and_profiles_are_config_errors():
    with pytest.raises(ConfigError, match="listed twice"):
        start_sweep(["a", "a"], None, True, SweepOptions())
    with pytest.raises(RunNotFound, match="unknown sweep"):
        load_sweep("sw-nope")
    with pytest.raises(ConfigError, match="not a sweep id"):
        load_sweep("../etc")


def test_corrupt_sweep_file_names_file_and_line():
    sw = start_sweep(["a"], None, True, SweepOptions())
    (sweep_dir(sw.sweep_id) / "sweep.json").write_text('{\n"version": 1,\n oops}')
    with pytest.raises(ConfigError, match=r"sweep\.json:3: corrupt sweep file"):
        load_sweep(sw.sweep_id)


def test_ctrl_c_inside_launch_still_stops_the_server_it_started():
    class LaunchInterrupted(Scripted):
        def launch(self, spec):
            self.live.add(f"run-{spec}")  # the server is up, the run id never returned
            raise KeyboardInterrupt

        def runs_started_since(self, profile, since):
            return [r for r in self.live if r == f"run-{profile}"]

    opts = SweepOptions()
    sw = start_sweep(["cutlass_mla"], None, True, opts)
    be = LaunchInterrupted()
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sw, opts, be)
    assert not be.live and "stop run-cutlass_mla" in be.calls
    assert sw.entries[0].run_id == "run-cutlass_mla"


def test_a_sweep_runs_in_one_process_at_a_time():
    from glmserve.sweep.state import sweep_lock

    opts = SweepOptions()
    sw = start_sweep(["cutlass_mla"], None, True, opts)
    with sweep_lock(sw.sweep_id), pytest.raises(ConfigError, match="another glmserve process"):
        run_sweep(sw, opts, Scripted())
    run_sweep(sw, opts, Scripted())  # released: runs
    assert sw.entries[0].status == OK


def test_a_server_that_dies_during_the_bench_is_a_crash_not_a_success():
    class DiesUnderLoad(Scripted):
        def bench(self, run_id, mode, opts):
            return {"version": 1, "mode": mode, "complete": False, "stopped": "connect failed",
                    "levels": [], "decode_tok_s": 3.0}  # fmt: skip

        def assess(self, run_id):
            why = {"category": "CRASH", "root_cause": "process(es) [42] died after READY"}
            return StepOutcome("CRASHED", why)

    opts = SweepOptions(bench=["decode", "concurrency"], capture_steps=2)
    sw = start_sweep(["cutlass_mla"], None, True, opts)
    be = DiesUnderLoad()
    run_sweep(sw, opts, be)
    (entry,) = sw.entries
    assert entry.status == CRASHED and len(entry.bench) == 1 and entry.trace is None
    assert sweep_rows(sw)[0]["diagnosis"] == "CRASH: process(es) [42] died after READY"
    assert not be.live


def test_a_healthy_server_that_answers_nothing_fails_the_profile_and_the_sweep_goes_on():
    class Silent(Scripted):
        def bench(self, run_id, mode, opts):
            if run_id == "run-flashinfer_gtc":
                return {"version": 1, "mode": mode, "complete": True, "levels": [
                    {"concurrency": 1, "completed": 0, "errors": 5,
                     "error_samples": ["stalled: no data within the stall timeout"]}]}  # fmt: skip
            return super().bench(run_id, mode, opts)

    opts = SweepOptions()
    sw = start_sweep(["flashinfer_gtc", "cutlass_mla"], None, True, opts)
    run_sweep(sw, opts, Silent())
    assert [e.status for e in sw.entries] == [FAILED, OK]
    assert sw.entries[0].error == (
        "bench decode: every request failed (stalled: no data within the stall timeout)"
    )


def test_sigterm_takes_the_ctrl_c_path_so_the_server_is_stopped():
    import os
    import signal

    class Terminated(Scripted):
        def bench(self, run_id, mode, opts):
            os.kill(os.getpid(), signal.SIGTERM)  # e.g. a CI timeout killing the sweep
            return super().bench(run_id, mode, opts)

    opts = SweepOptions()
    sw = start_sweep(["cutlass_mla"], None, True, opts)
    be = Terminated()
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sw, opts, be)
    assert not be.live and sw.entries[0].status == INTERRUPTED
    assert signal.getsignal(signal.SIGTERM) == before  # handler restored


def test_resume_first_stops_the_server_its_killed_attempt_left_up_and_only_that_one():
    opts = SweepOptions()
    sw = start_sweep(["flashinfer_gtc", "cutlass_mla"], None, True, opts)
    sw.entries[0].status, sw.entries[0].run_id = RUNNING, "run-flashinfer_gtc"  # killed -9
    sw.entries[1].status, sw.entries[1].run_id = INTERRUPTED, "run-cutlass_mla"  # stopped
    be = Scripted()
    be.live = {"run-flashinfer_gtc", "run-someone-else"}  # the other one: not this sweep's
    said: list[str] = []
    run_sweep(sw, opts, be, said.append)
    assert be.calls == [
        "stop run-flashinfer_gtc",  # reclaimed before the relaunch takes its port
        "launch flashinfer_gtc",
        "stop run-flashinfer_gtc",
        "launch cutlass_mla",  # its recorded run had ended: nothing to stop first
        "stop run-cutlass_mla",
    ]
    assert be.live == {"run-someone-else"}
    assert (
        "flashinfer_gtc: stopped run run-flashinfer_gtc, left running by the earlier "
        "attempt" in said
    )
    assert [e.status for e in sw.entries] == [OK, OK]


def test_a_left_behind_server_that_cannot_be_stopped_fails_its_entry_and_keeps_its_run_id():
    class Unstoppable(Scripted):
        def reclaim(self, run_id):
            raise TransportError(f"ssh: connect to host gpu8: Connection refused ({run_id})")

    opts = SweepOptions()
    sw = start_sweep(["cutlass_mla"], None, True, opts)
    sw.entries[0].status, sw.entries[0].run_id = RUNNING, "run-cutlass_mla"
    be = Unstoppable()
    with pytest.raises(TransportError):
        run_sweep(sw, opts, be)
    saved = load_sweep(sw.sweep_id)
    assert (saved.entries[0].status, saved.entries[0].run_id) == (FAILED, "run-cutlass_mla")
    assert "launch cutlass_mla" not in be.calls  # never launched onto a taken port
