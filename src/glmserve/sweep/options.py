"""``SweepCommand``: the options of ``glmserve sweep``, declared once, composed of the bench's
load (``bench.options.LoadOptions``) and the launch's start-up (``deploy.options``).

``StageOptions`` is what a sweep and a tune share (each launches servers and benches them,
``--repeat`` times, optionally probing their output); ``tune.options`` composes it too. The
defaults that differ from ``glmserve bench``'s are overridden here, once, with the reason.
``plan()`` applies the verb's rules and returns the stored ``SweepOptions`` (sweep.json).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from glmserve.bench.options import STAGE_REPEAT, BenchOptions, LoadOptions
from glmserve.deploy.options import PlaceOptions, StartOptions
from glmserve.errors import ConfigError
from glmserve.optmodel import opt, same_as

# A sweep or tune fails a silent stream after 60 s, not bench's 120: each profile's server was
# just started by the stage itself, and a minute of silence there is a hung config to record
# and move past, not a slow server under someone else's load.
STAGE_STALL_TIMEOUT = 60.0
SWEEP_LEVELS = "1,4,16"  # --bench concurrency levels of a sweep


class StageOptions(LoadOptions, StartOptions):
    """What a sweep and a tune share: the bench of each server, how it starts, --resume."""

    repeat: Annotated[
        int, opt("--repeat", help="Bench each profile N times: medians, 95% intervals, ties.")
    ] = STAGE_REPEAT
    resume: Annotated[
        str | None,
        opt("--resume", help="Continue this stored sweep or tune id (finished work kept)."),
    ] = None


class SweepCommand(StageOptions, PlaceOptions):
    """``glmserve sweep``'s options (``--json`` is rendering only)."""

    stall_timeout: Annotated[
        float,
        opt("--stall-timeout", help="Bench: seconds a stream may stay silent (then an error)."),
    ] = STAGE_STALL_TIMEOUT  # tune has no flag: its trials use STAGE_STALL_TIMEOUT

    cli_order = ("profiles", "host", "nodes", "bench", "concurrency", "input_len", "output_len",
                 "num_prompts", "sets", "until_first_success", "continue_on_error",
                 "max_parallel", "capture_steps", "timeout", "stall_budgets", "stall_timeout",
                 "repeat", "probe", "reference", "max_excess_nll", "min_greedy_agreement",
                 "resume", "simulate")  # fmt: skip

    profiles: Annotated[
        str | None,
        opt(
            "--profiles",
            help="Comma-separated profiles, in order (the first success is 1.00x).",
        ),
    ] = None
    bench: Annotated[
        list[str], opt("--bench", help="decode and/or concurrency (repeatable; default decode).")
    ] = Field(default_factory=list)
    concurrency: Annotated[str, same_as(BenchOptions, "concurrency")] = SWEEP_LEVELS
    until_first_success: Annotated[
        bool, opt("--until-first-success", help="Stop at the first profile that benchmarks.")
    ] = False
    continue_on_error: Annotated[
        bool,
        opt("--continue-on-error", help="Record tool errors (check/bench/transport) and go on."),
    ] = False
    max_parallel: Annotated[
        int,
        opt(
            "--max-parallel",
            help="On a Slurm host: K profiles' jobs at once (slot k serves on server.port + k).",
        ),
    ] = 1
    capture_steps: Annotated[
        int, opt("--profile-steps", help="Also capture a torch-profiler trace of N decode steps.")
    ] = 0
    probe: Annotated[
        bool, opt("--probe", help="Probe every profile's output against --reference (greedy).")
    ] = False
    reference: Annotated[
        str | None,
        opt(
            "--reference",
            help="Profile (or bench result id) whose outputs are right (implies --probe; "
            "default: the first profile that starts). WRONG_OUTPUT profiles get no speedup, "
            "never win.",
        ),
    ] = None

    def plan(self) -> SweepPlan:
        """The sweep to run: a resumed one as stored, or a new one checked and created
        (nothing launched). ConfigError names the flag."""
        from glmserve.sweep.backend import check_plans
        from glmserve.sweep.state import SweepOptions, load_sweep, resume_options, start_sweep

        if self.resume:
            sw = load_sweep(self.resume)
            if self.profiles is not None:
                raise ConfigError("--resume: the sweep keeps its own --profiles; drop --profiles")
            return SweepPlan(sw, resume_options(sw), sw.host, sw.simulate, list(sw.nodes))
        if self.profiles is None:  # given but empty ("$PROFILES" unset): comma_list says so
            raise ConfigError("--profiles is required (or --resume SWEEP_ID)")
        opts = SweepOptions.from_cli(
            self.bench,
            self.concurrency,
            self.stall_budgets,
            input_len=self.input_len,
            output_len=self.output_len,
            num_prompts=self.num_prompts,
            overrides=list(self.sets),
            until_first_success=self.until_first_success,
            continue_on_error=self.continue_on_error,
            capture_steps=self.capture_steps,
            timeout_s=self.timeout,
            stall_timeout_s=self.stall_timeout,
            repeat=self.repeat,
            probe=self.probe or self.reference is not None,
            reference=self.reference,
            max_excess_nll=self.max_excess_nll,
            min_greedy_agreement=self.min_greedy_agreement,
            max_parallel=self.max_parallel,
        )
        from glmserve.commalist import comma_list

        group = comma_list(self.nodes, "--nodes", "a,b") if self.nodes is not None else []
        if group and self.host:
            raise ConfigError("give --host or --nodes, not both")
        if self.nodes is not None and len(group) < 2:
            raise ConfigError(
                f"--nodes: expected at least 2 host names like a,b, got {self.nodes!r}"
            )
        names = comma_list(self.profiles, "--profiles", "flashinfer,trtllm_mla")
        opts.check_probe(names)
        from glmserve.bench.repeats import check_repeat

        check_repeat(self.repeat, "median")
        parallel_slots(opts, self.host, group)  # before the sweep is created
        check_plans(names, self.host, group, opts, self.simulate)  # before the sweep is created
        sw = start_sweep(names, self.host, self.simulate, opts, group)
        return SweepPlan(sw, opts, self.host, self.simulate, group)


class SweepPlan:
    """A sweep ready to run: its state, stored options, where it runs."""

    def __init__(
        self, sweep: Any, opts: Any, host: str | None, simulate: bool, group: list[str]
    ) -> None:
        self.sweep, self.opts, self.host, self.simulate, self.group = (
            sweep, opts, host, simulate, group
        )  # fmt: skip
        self.parallel = parallel_slots(opts, host, group)


def parallel_slots(opts: object, host: str | None, group: list[str]) -> int:
    """``--max-parallel K``: K jobs at once, on a Slurm host only (an ssh host runs one
    server at a time; a host group is one job per profile already). ConfigError otherwise."""
    from glmserve.remote.hosts import get_host

    k = getattr(opts, "max_parallel", 1)
    if not isinstance(k, int) or k < 1:
        raise ConfigError(f"--max-parallel: expected an integer >= 1, got {k}")
    if k > 1 and (group or not get_host(host).is_slurm):
        raise ConfigError("--max-parallel: only on a kind: slurm host (--host)")
    return k
