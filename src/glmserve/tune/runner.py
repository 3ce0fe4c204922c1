"""The tune loop: a search strategy proposes configs, a host pool runs them concurrently.

Each config is one *job*: launch the profile with the config's server flags on one host, watch
it to READY, bench every load on the same server (a load-only change reuses it), stop it.
Every host of the pool runs one job at a time, in its own thread; jobs are independent. A
crash or stall is a result (every trial of the config is recorded with the diagnosis); a flag
the target release does not have is skipped before launch; a host that stops answering is
taken out of the pool and its job re-queued for the others.

Here: the options every trial is run with and the loop (resume, Ctrl-C). The strategies are
:mod:`glmserve.tune.search`, the pool :mod:`glmserve.tune.pool`, the real jobs
:mod:`glmserve.tune.jobs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from glmserve.bench.options import DEFAULT_INPUT_LEN, STAGE_REPEAT
from glmserve.errors import ConfigError, GlmserveError, TuneInterrupted
from glmserve.sigterm import sigterm_as_interrupt
from glmserve.sweep.options import STAGE_STALL_TIMEOUT
from glmserve.tune import state as st
from glmserve.tune.options import TUNE_HOST_LOST_S, TUNE_OUTPUT_LEN
from glmserve.tune.pool import JobRunner, Pool, Say
from glmserve.tune.search import Search


@dataclass
class TuneOptions:
    """How every trial is run; stored in tune.json so ``--resume`` repeats it."""

    # defaults: the options models' (bench.options, sweep.options, tune.options)
    input_len: int = DEFAULT_INPUT_LEN
    output_len: int = TUNE_OUTPUT_LEN
    num_prompts: int | None = None
    overrides: list[str] = field(default_factory=list)  # --set, applied to every trial
    timeout_s: float | None = None
    stall_budgets: list[str] = field(default_factory=list)
    stall_timeout_s: float = STAGE_STALL_TIMEOUT
    sglang_version: str | None = None
    base_port: int = 30000
    sim_speed: float = 1.0  # the profile's sim.speed (simulated figures are scaled back)
    host_lost_s: float = TUNE_HOST_LOST_S  # a host unreachable this long leaves the pool
    repeat: int = STAGE_REPEAT  # each trial's bench N times on its server: medians, intervals, ties
    probe: bool = False  # judge every trial's output against the untuned profile's
    max_excess_nll: float | None = None
    min_greedy_agreement: float | None = None
    max_parallel: int = 1  # jobs at once on a Slurm host (an ssh host runs one at a time)

    def check(self, loads: list[int]) -> None:
        """Refuse, before the tune is created, what every trial would otherwise find out only
        after launching its server: a bad --input-len/--output-len/--num-prompts (the bench's
        own checks), an --sglang-version glmserve has no argspec of, --stall-budget or
        --host-lost-after. ConfigError naming the flag."""
        from glmserve.argspec.releases import load_release_spec
        from glmserve.deploy.stall_budgets import parse_stall_budgets
        from glmserve.sweep.state import SweepOptions

        if not (isinstance(self.max_parallel, int) and self.max_parallel >= 1):
            raise ConfigError(f"--max-parallel: expected an integer >= 1, got {self.max_parallel}")
        if not self.host_lost_s >= 0:  # NaN too
            raise ConfigError(f"--host-lost-after: expected seconds >= 0, got {self.host_lost_s}")
        if self.sglang_version:
            load_release_spec(self.sglang_version)
        parse_stall_budgets(self.stall_budgets)
        SweepOptions(
            bench=["concurrency"],
            concurrency=list(loads),
            input_len=self.input_len,
            output_len=self.output_len,
            num_prompts=self.num_prompts,
            stall_timeout_s=self.stall_timeout_s,
        ).check_bench()


def run_tune(tune: st.Tune, runner: JobRunner, profile_server: dict[str, Any], say: Say) -> st.Tune:
    """Run (or resume) ``tune`` to the end of its strategy; saves after every step."""
    pool = Pool(tune, runner, say)
    with st.TUNES.lock(tune.tune_id), sigterm_as_interrupt():  # SIGTERM: the Ctrl-C path
        _reclaim_left_running(tune, runner, say)
        for t in tune.trials:  # what a previous process left running is to be run again
            if t.status in (st.RUNNING, st.INTERRUPTED):
                t.status = st.PENDING
        tune.status = st.RUNNING
        pool.save()
        try:
            if tune.options.get("probe") and tune.reference is None:
                say("output reference: the untuned profile")
                tune.reference = runner.reference(tune)
                pool.save()
            search = Search(tune, pool.evaluate)
            pool.deadline = search.deadline
            search.run(profile_server)
        except KeyboardInterrupt:
            pool.shutdown()
            with pool.lock:
                for t in tune.trials:
                    if t.status in (st.RUNNING, st.PENDING) and t.started_at:
                        t.status, t.error = st.INTERRUPTED, "interrupted (Ctrl-C)"
                tune.status = "interrupted"
                st.save_tune(tune)
            raise TuneInterrupted(
                f"tune {tune.tune_id} interrupted; servers stopped. "
                f"Continue with: glmserve tune --resume {tune.tune_id}"
            ) from None
        tune.status = "done"
        pool.save()
    return tune


def _reclaim_left_running(tune: st.Tune, runner: JobRunner, say: Say) -> None:
    """Before a resumed tune runs anything, stop the servers its unfinished trials recorded
    (a tune killed outright, SIGKILL, could not): each would hold its GPU (and, on a remote
    host, the port its trial gets again). Only runs this tune recorded are touched, each by
    the stop machinery (verified process group). A run that cannot be stopped is said, not
    raised: its trial runs again all the same, and a lost host is the pool's to handle."""
    left = {
        (t.host, t.run_id)
        for t in tune.trials
        if t.status in (st.RUNNING, st.INTERRUPTED) and t.host and t.run_id
    }
    for host, run_id in sorted(left):
        try:
            if runner.reclaim(host, run_id):
                say(f"{host}: stopped run {run_id}, left running by the earlier attempt")
        except GlmserveError as exc:
            say(f"{host}: could not stop run {run_id}, left running by the earlier attempt: {exc}")
