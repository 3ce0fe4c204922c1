"""Verb ``tune``: parse options, call ``glmserve.tune`` (the search lives there)."""

from __future__ import annotations

import typer

from glmserve.cli._app import app, emit_json, err, out
from glmserve.cli.options import (
    ConcurrencyOpt,
    InputLenOpt,
    JsonOpt,
    NumPromptsOpt,
    OutputLenOpt,
    ReadyTimeoutOpt,
    ResumeOpt,
    SetOpt,
    SglangVersionOpt,
    SimulateOpt,
    StallBudgetOpt,
)


@app.command()
def tune(
    profile: str = typer.Option(None, "--profile", help="Profile whose server flags are tuned."),
    search: list[str] = typer.Option(
        (),
        "--search",
        help="server.KEY=V1,V2,... (repeatable): values to try for one flag. Not searched "
        "(which server, where it runs): port, host, model-path, tokenizer-path, "
        "served-model-name, nnodes, node-rank, dist-init-addr, nccl-init-addr.",
    ),
    objective: str = typer.Option(
        "output_tok_s", "--objective", help="output_tok_s | goodput | decode_tok_s (maximised)."
    ),
    slo: str = typer.Option(
        None, "--slo", help="Latency SLOs, e.g. ttft_p99_ms=2000,tpot_p99_ms=60."
    ),
    concurrency: ConcurrencyOpt = "1,16",
    input_len: InputLenOpt = 128,
    output_len: OutputLenOpt = 64,
    num_prompts: NumPromptsOpt = None,
    hosts: str = typer.Option(
        "local", "--hosts", help="Host pool a,b,c (hosts.yaml): one server per host at a time."
    ),
    budget: str = typer.Option(
        None, "--budget", help="Trials (40) or a duration (90s, 15m); default: the whole grid."
    ),
    strategy: str = typer.Option(
        "auto", "--strategy", help="auto (grid if it fits the budget) | grid | coordinate."
    ),
    sets: SetOpt = (),
    sglang_version: SglangVersionOpt = None,
    timeout: ReadyTimeoutOpt = None,
    stall_budgets: StallBudgetOpt = (),
    host_lost_after: float = typer.Option(
        60.0, "--host-lost-after", help="Seconds a host may stay unreachable before it leaves."
    ),
    max_parallel: int = typer.Option(
        1, "--max-parallel", help="Jobs at once on a Slurm host (each config is one job)."
    ),
    write_profile: str = typer.Option(
        None, "--write-profile", help="Save the best config as this profile (extends --profile)."
    ),
    repeat: int = typer.Option(
        3, "--repeat", help="Bench each trial N times on its server: medians, intervals, ties."
    ),
    probe: bool = typer.Option(
        False,
        "--probe",
        help="Judge every config's greedy output against the untuned profile's; WRONG_OUTPUT "
        "configs are excluded (with the reason), never the best.",
    ),
    max_excess_nll: float | None = typer.Option(
        None, "--max-excess-nll", help="WRONG_OUTPUT above this many nats/token (default 0.1)."
    ),
    min_greedy_agreement: float | None = typer.Option(
        None, "--min-greedy-agreement", help="WRONG_OUTPUT below this mean agreement (0.25)."
    ),
    resume: ResumeOpt = None,
    simulate: SimulateOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Search server flags x load points for the best configuration that meets the SLOs.

    Each config is launched once per host of the pool (flags change: relaunch; loads reuse the
    server), benched at every --concurrency, stopped. Crashes and stalls are failed trials with
    their diagnosis; a flag the --sglang-version lacks is skipped before launch; a host that
    stops answering leaves the pool and its trial is re-queued. The whole grid runs when it
    fits --budget, else a coordinate search from the profile's values. Stored under
    $GLMSERVE_HOME/tunes/<id>/ (tune.json, tune.md); Ctrl-C stops the servers, --resume goes on
    (first stopping the servers of trials a killed tune left running).
    Exit 0 with a best config, 3 when no trial met the SLOs, 130 on Ctrl-C.

    Example:
      glmserve tune --simulate --profile trtllm_mla --set sim.gpu-arch=sm100 \\
        --search server.max-running-requests=8,32 \\
        --search server.cuda-graph-max-bs=8,64 \\
        --slo tpot_p99_ms=60 --hosts la,lb --budget 12
    """
    from glmserve.errors import ConfigError, ServerCrashed
    from glmserve.sweep.state import positive_ints
    from glmserve.tune import resume_tune, start_tune
    from glmserve.tune import state as st
    from glmserve.tune.profile_out import check_target
    from glmserve.tune.profile_out import write_profile as write_winner
    from glmserve.tune.runner import LifecycleJobRunner, TuneOptions, run_tune
    from glmserve.tune.space import parse_budget, parse_search, parse_slo

    def say(msg: str) -> None:
        err.print(f"tune: {msg}", highlight=False, markup=False)

    if resume:
        if profile or search:
            raise ConfigError("--resume: the tune keeps its own --profile and --search")
        tu, server = resume_tune(resume)
        if write_profile:
            check_target(write_profile, tu.profile)  # before any trial runs
    else:
        if not profile:
            raise ConfigError("--profile is required (or --resume TUNE_ID)")
        if write_profile:
            check_target(write_profile, profile)  # before the tune is created or run
        opts = TuneOptions(
            input_len=input_len,
            output_len=output_len,
            num_prompts=num_prompts,
            overrides=list(sets),
            timeout_s=timeout,
            stall_budgets=list(stall_budgets),
            sglang_version=sglang_version,
            host_lost_s=host_lost_after,
            max_parallel=max_parallel,
            repeat=repeat,
            probe=probe,
            max_excess_nll=max_excess_nll,
            min_greedy_agreement=min_greedy_agreement,
        )
        from glmserve.bench.probe import thresholds
        from glmserve.bench.repeats import check_repeat

        check_repeat(repeat, "median")

        thresholds(max_excess_nll, min_greedy_agreement)  # a bad one: exit 2 before anything
        if not probe and (max_excess_nll is not None or min_greedy_agreement is not None):
            raise ConfigError("--max-excess-nll/--min-greedy-agreement need --probe")
        from glmserve.commalist import comma_list

        pool = comma_list(hosts, "--hosts", "gpu1,gpu2")
        if max_parallel != 1:
            from glmserve.remote.hosts import get_host

            if max_parallel < 1 or not any(get_host(h).is_slurm for h in pool):
                raise ConfigError(
                    f"--max-parallel {max_parallel}: an integer >= 1, for a kind: slurm host "
                    "of --hosts (an ssh host runs one server at a time)"
                )
        tu, server = start_tune(
            profile,
            parse_search(search),
            positive_ints(concurrency, "--concurrency"),
            objective,
            parse_slo(slo),
            pool,
            parse_budget(budget),
            simulate,
            opts,
            strategy,
        )
    say(f"{tu.tune_id}: {tu.profile}, strategy {tu.strategy}, hosts {', '.join(tu.hosts)}")
    run_tune(tu, LifecycleJobRunner(tu, say), server, say)
    best = st.best_trial(tu)
    if as_json:
        emit_json(tu.to_dict())
    else:
        out.print(st.render_markdown(tu), highlight=False, markup=False)
        err.print(f"saved {st.tune_dir(tu.tune_id)}/tune.json and tune.md", highlight=False)
    if write_profile:
        if best is None:
            raise ServerCrashed(f"tune {tu.tune_id}: no trial met the SLOs; no profile written")
        beats, why = st.beats_start(tu, server)
        if beats:
            path = write_winner(tu, write_profile, tu.options.get("sglang_version"))
            err.print(f"wrote profile {write_profile} ({path}): {why}", highlight=False)
        else:
            err.print(
                f"no profile written: the best does not beat the starting config beyond "
                f"noise ({why})",
                highlight=False,
                markup=False,
            )
    if best is None:
        raise ServerCrashed(f"tune {tu.tune_id}: no trial met the SLOs")
