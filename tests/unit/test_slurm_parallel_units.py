"""--max-parallel on a Slurm host without a cluster: the sweep's parallel runner and the tune's
pool with scripted backends (re-queueing a job the scheduler took, slots and their ports)."""

from __future__ import annotations

import threading

from tests.fixtures.sweep_tune_fakes import FakeRunner, Scripted, make

from glmserve.sweep.loop import StepOutcome
from glmserve.sweep.parallel import run_sweep_parallel, slot_options
from glmserve.sweep.state import OK, SweepOptions, start_sweep
from glmserve.tune import pool as tune_pool
from glmserve.tune import state as st
from glmserve.tune.pool import JobLost
from glmserve.tune.runner import run_tune


def test_parallel_sweep_requeues_a_job_lost_to_node_failure_and_runs_two_at_once():
    lost_once: set[str] = set()
    launched: list[str] = []
    both = threading.Barrier(2, timeout=10)
    lock = threading.Lock()

    class NodeFails(Scripted):
        def launch(self, spec):
            with lock:
                launched.append(spec)
            return super().launch(spec)

        def watch(self, run_id, opts):
            profile = run_id.removeprefix("run-")
            with lock:
                first = profile not in lost_once
                lost_once.add(profile)
            if first:
                both.wait()  # each profile's first job waits for the other's: they overlap
            if profile == "cutlass_mla" and first:
                return StepOutcome("NODE_FAIL", {"state": "NODE_FAIL", "queued_s": 0.5})
            return StepOutcome("READY", {"state": "READY", "queued_s": 1.5})

    opts = SweepOptions(bench=["decode"], overrides=["server.port=31000"], max_parallel=2)
    sw = start_sweep(["flashinfer", "cutlass_mla"], None, True, opts)
    done = run_sweep_parallel(sw, opts, NodeFails, 2, lambda m: None)
    assert [e.status for e in done.entries] == [OK, OK]
    lost = done.entries[1]
    assert lost.requeued == ["run run-cutlass_mla: job ended NODE_FAIL"]
    assert lost.queued_s == 1.5 and done.entries[0].queued_s == 1.5
    assert sorted(launched) == ["cutlass_mla", "cutlass_mla", "flashinfer"]
    assert done.status == "done"


def test_slot_k_serves_on_port_plus_k():
    o = SweepOptions(overrides=["server.port=31000", "sim.speed=2"])
    assert slot_options(o, 0) is o
    assert slot_options(o, 2).overrides[-1] == "server.port=31002"
    assert slot_options(SweepOptions(), 1).overrides == ["server.port=30001"]


def test_tune_pool_runs_max_parallel_jobs_on_one_slurm_host_and_requeues_a_lost_job(
    monkeypatch,
):
    monkeypatch.setattr(tune_pool, "_is_slurm", lambda h: True)
    slots: set[int] = set()
    both = threading.Barrier(2, timeout=10)
    lost: list[str] = []

    class Jobs(FakeRunner):
        def run_job(self, tune, host, slot, trials):
            if slot not in slots:
                slots.add(slot)
                both.wait()  # the two slots' first jobs overlap on the one host
            if not lost:
                lost.append(trials[0].key)
                raise JobLost("Slurm job of run r1 ended PREEMPTED")
            super().run_job(tune, host, slot, trials)

    tune = make(None, "grid", hosts=("cluster",))
    tune.options["max_parallel"] = 2
    done = run_tune(tune, Jobs(), {}, lambda m: None)
    assert slots == {0, 1} and done.status == "done" and done.lost_hosts == []
    again = next(t for t in done.trials if t.key == lost[0])
    assert again.finished and again.requeued_from == [
        "cluster (Slurm job of run r1 ended PREEMPTED)"
    ]
    assert all(t.finished for t in done.trials) and st.best_trial(done) is not None


def test_a_trial_the_cluster_keeps_taking_fails_after_three_requeues():
    class AlwaysPreempted(FakeRunner):
        def run_job(self, tune, host, slot, trials):
            if trials[0].config["a"] == "1":
                raise JobLost("Slurm job of run r ended PREEMPTED")
            super().run_job(tune, host, slot, trials)

    done = run_tune(make(None, "grid", hosts=("cluster",)), AlwaysPreempted(), {}, lambda m: None)
    taken = [t for t in done.trials if t.config["a"] == "1"]
    assert taken and all(t.status == st.FAILED and len(t.requeued_from) == 4 for t in taken)
    assert "not re-queued" in taken[0].error and done.status == "done"
