"""Verbs for the server lifecycle: check, launch, status, logs, stop, runs.

Each verb parses its options, plans or resolves a deployment (``glmserve.deploy``), calls one
step of it and renders the result (``views``); a single host and a host group take
the same path. Verdicts become exit codes through the error tree (3 crashed, 4 stalled/timeout,
5 transport).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from glmserve.cli._app import app, emit_json, err
from glmserve.cli.generate import from_options
from glmserve.cli.options import (
    HostOpt,
    JsonOpt,
    NodesOpt,
    PollOpt,
    ProfileOpt,
    SetOpt,
    SimulateOpt,
)
from glmserve.deploy.options import LaunchOptions
from glmserve.errors import ConfigError, Interrupted, ProcessUnverified, TransportError


# -- check -------------------------------------------------------------------------------------
@app.command()
def check(
    profile: ProfileOpt,
    host: HostOpt = None,
    sets: SetOpt = (),
    simulate: SimulateOpt = False,
    json_out: JsonOpt = False,
    nodes: NodesOpt = None,
) -> None:
    """Preflight a launch in one pass: ssh, python + SGLang, live flag spec, GPUs, port, model,
    disk. Exit 2 if anything blocks, 5 if the host is unreachable. A profile with `nodes:`
    (or --nodes) checks every node with its own argv and GPU share (tp-size / nnodes), that
    all run the same SGLang, and that node 0's dist-init port is free.

    Example: glmserve check --profile trtllm_mla --host gpu8
    Example (two nodes): glmserve check --profile trtllm_mla --nodes gpu8a,gpu8b
    """
    from glmserve.cli import views
    from glmserve.deploy.deployment import Deployment
    from glmserve.deploy.plan import parse_nodes, plan

    p = plan(profile, host=host, nodes=parse_nodes(nodes), overrides=sets, simulate=simulate)
    res = Deployment(plan=p).check()
    if json_out:
        emit_json(views.check_json(p, res))
    else:
        views.print_check(p, res)
    if res.unreachable:
        raise TransportError(f"unreachable: {', '.join(res.unreachable)}")
    error = views.blocking_error(res)
    if error is not None:
        raise error


# -- launch ------------------------------------------------------------------------------------
@app.command()
@from_options(LaunchOptions, after="poll")
def launch(opts: LaunchOptions, json_out: JsonOpt = False) -> None:
    """Start a run (nohup + setsid, recorded) and wait for READY; exit 3 crashed, 4 stalled.
    A profile with `nodes:` (or --nodes) starts one run per node as a group.

    Example: glmserve launch --profile trtllm_mla --host gpu8 --timeout 1800
    Example (two nodes): glmserve launch --profile trtllm_mla --nodes gpu8a,gpu8b
    """
    from glmserve.sigterm import sigterm_as_interrupt

    # SIGTERM (a CI job's `timeout`, `kill`) does what Ctrl-C does: a server being started is
    # stopped again, one being watched is left running and recorded, and it is said.
    with sigterm_as_interrupt():
        _launch(opts, json_out)


def _launch(opts: LaunchOptions, json_out: bool) -> None:
    from glmserve.cli import views
    from glmserve.deploy.deployment import Deployment
    from glmserve.store import RunStore

    p, budgets = opts.plan()
    store = RunStore.open()
    try:
        dep = Deployment.launch(
            p,
            store=store,
            replace_existing=opts.replace,
            say=lambda m: err.print(m, markup=False),
        )
    except KeyboardInterrupt:  # a server half started is stopped; one recorded is named
        raise Interrupted(views.interrupted_start(store)) from None
    try:
        if not json_out:  # scripts capture the id: run=$(glmserve launch ...); --json has it
            print(dep.id, flush=True)
        views.launched(dep)
        if opts.no_wait:
            if json_out:
                emit_json(views.launch_json(dep))
            return
        with views.watch_progress(dep) as progress:
            verdict = dep.watch(
                poll_s=opts.poll,
                timeout_s=opts.timeout,
                stall_timeout_s=opts.stall_timeout,
                stall_budgets=budgets,
                on_tick=progress,
            )
    except KeyboardInterrupt:  # the server keeps running: say how to reach it
        raise Interrupted(f"stopped watching: {views.keeps_running(dep)}") from None
    except TransportError as exc:
        raise TransportError(f"{exc}; {views.keeps_running(dep)}") from exc
    error = views.verdict_error(dep, verdict)  # the diagnosis first, whatever follows
    try:
        stopped = dep.stop_failed(verdict, views.say)
    except KeyboardInterrupt:  # the verdict stands; what is left of the run is the user's
        raise Interrupted(
            f"interrupted after the verdict {verdict.state}: processes of {dep.id} may still be "
            f"up; see `glmserve status {dep.id}`, stop them with `glmserve stop {dep.id}`"
        ) from None
    if json_out:
        emit_json(views.launch_json(dep, verdict, stopped))
    if error is not None:
        raise error
    views.ready(dep, verdict)


# -- status / runs -----------------------------------------------------------------------------
@app.command()
def status(
    run_id: str = typer.Argument(None, help="One run (id or unique prefix); default all live."),
    all_runs: bool = typer.Option(False, "--all", help="Include finished runs."),
    json_out: JsonOpt = False,
) -> None:
    """Runs with state, uptime, host, profile, port (checked live on their hosts).

    Example: glmserve status --json
    """
    from glmserve.cli import views
    from glmserve.deploy.deployment import status_rows
    from glmserve.store import RunStore

    if run_id is not None and not run_id.strip():  # "$RUN" unset: not "every live run"
        raise ConfigError("status: empty RUN id (an unset shell variable?); leave it out for all")
    rows = status_rows(RunStore.open(), run_id, all_runs)
    if json_out:
        emit_json(rows)
    else:
        views.print_status(rows)
    # A row its host could not be asked about (unreachable, no ssh client) or whose group
    # could not be verified: neither alive nor gone is known, never a plain exit 0.
    unchecked = [r for r in rows if "error" in r]
    if unchecked:
        first = unchecked[0]
        raise (ProcessUnverified if first.get("unverified") else TransportError)(first["error"])


@app.command()
def runs(
    last: int = typer.Option(20, "--last", "-n", help="How many, newest first.", min=1),
    host: Annotated[str | None, typer.Option("--host", "-H", help="Only this host.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Recorded runs from the store (no host is contacted).

    Example: glmserve runs --last 5
    """
    from glmserve.cli import views
    from glmserve.store import RunStore

    records = RunStore.open().list_runs(host=host, last=last)
    if json_out:
        emit_json([r.to_dict() for r in records])
        return
    views.print_runs(records)


# -- logs --------------------------------------------------------------------------------------
@app.command()
def logs(
    run_id: str = typer.Argument(..., help="Run id or unique prefix, or a group id (g...)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
    lines: int = typer.Option(None, "-n", "--lines", help="Only the last N lines (per node)."),
    poll: PollOpt = 0.5,
) -> None:
    """Print a run's server.log (by byte offset over ssh; -f follows until the server ends).
    A group id prints every node's log, each line prefixed `\\[nodeI host]`; -f follows them
    all until every node's server has ended. A server.log that is gone from its host (deleted)
    exits 2, naming the file.

    Example: glmserve logs 3fa2c1d0 -f -n 50
    Example (a group): glmserve logs g1a2b3c4 -n 20 -f
    """
    from glmserve.cli import views
    from glmserve.deploy.deployment import Deployment
    from glmserve.store import RunStore

    store = RunStore.open()
    if lines is not None and lines < 0:
        raise ConfigError(f"-n/--lines: expected a count of 0 or more, got {lines}")
    dep = Deployment.resolve(store, run_id)  # a run: its log; a group id: every node's
    dep.logs(last=lines, follow=follow, poll_s=poll, write=_write, note=views.note)


def _write(text: str) -> None:
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()


# -- stop --------------------------------------------------------------------------------------
MAX_STOP_TIMEOUT_S = 3600.0  # TERM to KILL: an hour; inf would wait for ever before the KILL


@app.command()
def stop(
    run_id: str = typer.Argument(
        None, help="Run id or unique prefix; a group id (or one node's run) stops every node."
    ),
    all_runs: bool = typer.Option(False, "--all", help="Every live run."),
    timeout: float = typer.Option(
        15.0, "--timeout", help="Seconds between TERM and KILL (0: KILL at once; at most 3600)."
    ),
    json_out: JsonOpt = False,
) -> None:
    """Stop a run: TERM its process group, wait, KILL, verify nothing is left. Never by name;
    the PID's start time is checked first so a reused PID is never signalled.

    Example: glmserve stop 3fa2c1d0
    """
    from glmserve.cli import views
    from glmserve.deploy.deployment import Deployment
    from glmserve.remote.stop import stop_failure, stop_runs
    from glmserve.store import RunStore

    if not 0 <= timeout <= MAX_STOP_TIMEOUT_S:  # NaN fails this too; inf never KILLs
        raise ConfigError(
            f"--timeout: expected 0 to {MAX_STOP_TIMEOUT_S:g} seconds, got {timeout:g}"
        )
    # A read-only home (or a full disk) must not keep a server running: read the store, stop
    # anyway, and say the stop goes unrecorded.
    store = RunStore.open(read_only_ok=True)
    if store.read_only:
        views.say(
            f"warning: {store.path} is read-only; stopping anyway, unrecorded: {store.read_only}"
        )
    if run_id is not None and not run_id.strip():  # "$RUN" unset: never "every run"
        raise ConfigError("stop: empty RUN id (an unset shell variable?); give a run id or --all")
    if all_runs and run_id:
        raise ConfigError("give a RUN id or --all, not both")
    if not all_runs and not run_id:
        raise ConfigError("give a RUN id or --all")
    if all_runs:  # every run is tried; the table says what happened to each
        reports = stop_runs(store.list_runs(live_only=True), timeout=timeout, store=store)
    else:
        reports = Deployment.resolve(store, run_id).stop(timeout)
    if json_out:
        emit_json(reports)
    else:
        views.print_stop(reports, as_table=all_runs or len(reports) > 1)
    views.warn_unrecorded(reports)
    error = stop_failure(reports)
    if error is not None:
        raise error
