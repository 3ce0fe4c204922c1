"""``TuneCommand``: the options of ``glmserve tune``, declared once; it composes a sweep's
``StageOptions`` (the bench of each server, its start-up, ``--repeat``, ``--resume``), which
compose the bench's load and the launch's start-up options.

``plan()`` applies the verb's rules and creates (or reopens) the stored tune; nothing runs.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from glmserve.bench.options import STAGE_REPEAT, BenchOptions, LoadOptions
from glmserve.deploy.options import ReleaseOptions
from glmserve.errors import ConfigError
from glmserve.optmodel import opt, same_as
from glmserve.sweep.options import StageOptions

# A tune benches every config at every load point: 64 output tokens (not bench's 256) keep a
# trial short while still measuring steady decode; give --output-len for longer replies.
TUNE_OUTPUT_LEN = 64
TUNE_LEVELS = "1,16"  # --concurrency load points of a tune
TUNE_HOST_LOST_S = 60.0  # --host-lost-after


class TuneCommand(StageOptions, ReleaseOptions):
    """``glmserve tune``'s options (``--json`` is rendering only)."""

    cli_order = ("profile", "search", "objective", "slo", "concurrency", "input_len",
                 "output_len", "num_prompts", "hosts", "budget", "strategy", "sets",
                 "sglang_version", "timeout", "stall_budgets", "host_lost_after",
                 "max_parallel", "write_profile", "repeat", "probe", "max_excess_nll",
                 "min_greedy_agreement", "resume", "simulate")  # fmt: skip

    output_len: Annotated[int, same_as(LoadOptions, "output_len")] = TUNE_OUTPUT_LEN
    repeat: Annotated[
        int,
        opt("--repeat", help="Bench each trial N times on its server: medians, intervals, ties."),
    ] = STAGE_REPEAT
    profile: Annotated[
        str | None, opt("--profile", help="Profile whose server flags are tuned.")
    ] = None
    search: Annotated[
        list[str],
        opt(
            "--search",
            help="server.KEY=V1,V2,... (repeatable): values to try for one flag. Not searched "
            "(which server, where it runs): port, host, model-path, tokenizer-path, "
            "served-model-name, nnodes, node-rank, dist-init-addr, nccl-init-addr.",
        ),
    ] = Field(default_factory=list)
    objective: Annotated[
        str,
        opt("--objective", help="output_tok_s | goodput | decode_tok_s (maximised)."),
    ] = "output_tok_s"
    slo: Annotated[
        str | None, opt("--slo", help="Latency SLOs, e.g. ttft_p99_ms=2000,tpot_p99_ms=60.")
    ] = None
    concurrency: Annotated[str, same_as(BenchOptions, "concurrency")] = TUNE_LEVELS
    hosts: Annotated[
        str,
        opt("--hosts", help="Host pool a,b,c (hosts.yaml): one server per host at a time."),
    ] = "local"
    budget: Annotated[
        str | None,
        opt("--budget", help="Trials (40) or a duration (90s, 15m); default: the whole grid."),
    ] = None
    strategy: Annotated[
        str, opt("--strategy", help="auto (grid if it fits the budget) | grid | coordinate.")
    ] = "auto"
    host_lost_after: Annotated[
        float,
        opt("--host-lost-after", help="Seconds a host may stay unreachable before it leaves."),
    ] = TUNE_HOST_LOST_S
    max_parallel: Annotated[
        int, opt("--max-parallel", help="Jobs at once on a Slurm host (each config is one job).")
    ] = 1
    write_profile: Annotated[
        str | None,
        opt("--write-profile", help="Save the best config as this profile (extends --profile)."),
    ] = None
    probe: Annotated[
        bool,
        opt(
            "--probe",
            help="Judge every config's greedy output against the untuned profile's; "
            "WRONG_OUTPUT configs are excluded (with the reason), never the best.",
        ),
    ] = False

    def plan(self) -> tuple[Any, Any]:
        """``(tune, starting server)``: a resumed tune as stored, or a new one checked and
        created (nothing launched). ConfigError names the flag."""
        from glmserve.sweep.state import positive_ints
        from glmserve.tune.profile_out import check_target
        from glmserve.tune.runner import TuneOptions
        from glmserve.tune.space import parse_budget, parse_search, parse_slo
        from glmserve.tune.start import resume_tune, start_tune

        if self.resume:
            if self.profile is not None or self.search:
                raise ConfigError("--resume: the tune keeps its own --profile and --search")
            tu, server = resume_tune(self.resume)
            if self.write_profile:
                check_target(self.write_profile, tu.profile)  # before any trial runs
            return tu, server
        if self.profile is None:
            raise ConfigError("--profile is required (or --resume TUNE_ID)")
        if not self.profile.strip():  # given but empty ("$PROFILE" unset): not "not given"
            raise ConfigError("--profile: empty; name a profile")
        if self.write_profile:
            check_target(self.write_profile, self.profile)  # before the tune is created or run
        opts = TuneOptions(
            input_len=self.input_len,
            output_len=self.output_len,
            num_prompts=self.num_prompts,
            overrides=list(self.sets),
            timeout_s=self.timeout,
            stall_budgets=list(self.stall_budgets),
            sglang_version=self.sglang_version,
            host_lost_s=self.host_lost_after,
            max_parallel=self.max_parallel,
            repeat=self.repeat,
            probe=self.probe,
            max_excess_nll=self.max_excess_nll,
            min_greedy_agreement=self.min_greedy_agreement,
        )
        from glmserve.bench.probe import thresholds
        from glmserve.bench.repeats import check_repeat

        check_repeat(self.repeat, "median")
        thresholds(self.max_excess_nll, self.min_greedy_agreement)  # a bad one: exit 2 first
        if not self.probe and (
            self.max_excess_nll is not None or self.min_greedy_agreement is not None
        ):
            raise ConfigError("--max-excess-nll/--min-greedy-agreement need --probe")
        from glmserve.commalist import comma_list

        pool = comma_list(self.hosts, "--hosts", "gpu1,gpu2")
        if self.max_parallel != 1:
            from glmserve.remote.hosts import get_host

            if self.max_parallel < 1 or not any(get_host(h).is_slurm for h in pool):
                raise ConfigError(
                    f"--max-parallel {self.max_parallel}: an integer >= 1, for a kind: slurm "
                    "host of --hosts (an ssh host runs one server at a time)"
                )
        return start_tune(
            self.profile,
            parse_search(self.search),
            positive_ints(self.concurrency, "--concurrency"),
            self.objective,
            parse_slo(self.slo),
            pool,
            parse_budget(self.budget),
            self.simulate,
            opts,
            self.strategy,
        )
