"""Verb ``tune``: parse options, call ``glmserve.tune`` (the search lives there)."""

from __future__ import annotations

from glmserve.cli._app import app, emit_json, err, out
from glmserve.cli.generate import from_options
from glmserve.cli.options import JsonOpt
from glmserve.tune.options import TuneCommand


@app.command()
@from_options(TuneCommand)
def tune(opts: TuneCommand, as_json: JsonOpt = False) -> None:
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
    from glmserve.errors import ServerCrashed
    from glmserve.tune import state as st
    from glmserve.tune.jobs import LifecycleJobRunner
    from glmserve.tune.profile_out import write_profile as write_winner
    from glmserve.tune.runner import run_tune

    def say(msg: str) -> None:
        err.print(f"tune: {msg}", highlight=False, markup=False)

    tu, server = opts.plan()
    say(f"{tu.tune_id}: {tu.profile}, strategy {tu.strategy}, hosts {', '.join(tu.hosts)}")
    run_tune(tu, LifecycleJobRunner(tu, say), server, say)
    best = st.best_trial(tu)
    if as_json:
        emit_json(tu.to_dict())
    else:
        out.print(st.render_markdown(tu), highlight=False, markup=False)
        err.print(f"saved {st.tune_dir(tu.tune_id)}/tune.json and tune.md", highlight=False)
    if opts.write_profile:
        if best is None:
            raise ServerCrashed(f"tune {tu.tune_id}: no trial met the SLOs; no profile written")
        beats, why = st.beats_start(tu, server)
        if beats:
            path = write_winner(tu, opts.write_profile, tu.options.get("sglang_version"))
            err.print(f"wrote profile {opts.write_profile} ({path}): {why}", highlight=False)
        else:
            err.print(
                f"no profile written: the best does not beat the starting config beyond "
                f"noise ({why})",
                highlight=False,
                markup=False,
            )
    if best is None:
        raise ServerCrashed(f"tune {tu.tune_id}: no trial met the SLOs")
