"""Verbs for the server lifecycle: check, launch, status, logs, stop, runs.

Each verb parses options and calls the library (hosts, preflight, lifecycle, watch); verdicts
become exit codes through the error tree (3 crashed, 4 stalled/timeout, 5 transport).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import typer
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from glmserve.cli._app import app, emit_json, err, is_interactive, out
from glmserve.errors import (
    EXIT_INTERRUPTED,
    ConfigError,
    GlmserveError,
    ServerCrashed,
    ServerNotReady,
    TransportError,
)


def _spec(profile: str, sets: list[str], simulate: bool, host_name: str | None):  # type: ignore[no-untyped-def]
    from glmserve.config import profiles
    from glmserve.remote.hosts import get_host

    host = get_host(host_name)
    spec = profiles.load_profile(profile, list(sets))
    if simulate:
        py = None if host.is_local else host.python  # local: this interpreter (has glmserve)
        spec = profiles.simulate(spec, python=py)
    from glmserve.remote.process import host_adjusted_spec

    return host, host_adjusted_spec(spec, host)


def _fmt_s(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


# -- check -------------------------------------------------------------------------------------
def _group_of(profile: str, sets: list[str], nodes: str | None, host: str | None) -> list[str]:
    """The host group to act on: ``--nodes a,b``, else the profile's ``nodes:`` when no
    ``--host`` is given; empty for a single-host run."""
    group = [n.strip() for n in nodes.split(",") if n.strip()] if nodes else []
    if group and host:
        raise ConfigError("give --host or --nodes, not both")
    if nodes is not None and not group:
        raise ConfigError(f"--nodes: expected host names like a,b, got {nodes!r}")
    if not group and not host:
        from glmserve.config import profiles

        group = profiles.load_profile(profile, list(sets)).nodes
    return list(group)


_COLOR = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


@app.command()
def check(
    profile: str = typer.Option(..., "--profile", "-p", help="Profile to check."),
    host: str = typer.Option(None, "--host", "-H", help="Host from hosts.yaml (default local)."),
    sets: list[str] = typer.Option([], "--set", help="Override, e.g. server.port=8001."),
    simulate: bool = typer.Option(False, "--simulate", help="Check for a simulator launch."),
    json_out: bool = typer.Option(False, "--json", help="Rows as JSON."),
    nodes: str = typer.Option(
        None, "--nodes", help="Host group a,b (node 0 first): check every node of it."
    ),
) -> None:
    """Preflight a launch in one pass: ssh, python + SGLang, live flag spec, GPUs, port, model,
    disk. Exit 2 if anything blocks, 5 if the host is unreachable. A profile with ``nodes:``
    (or --nodes) checks every node with its own argv and GPU share (tp-size / nnodes), that
    all run the same SGLang, and that node 0's dist-init port is free.

    Example: glmserve check --profile trtllm_mla --host gpu8
    Example (two nodes): glmserve check --profile trtllm_mla --nodes gpu8a,gpu8b
    """
    from glmserve.deploy.preflight import run_checks
    from glmserve.remote.transport import transport_for

    group = _group_of(profile, sets, nodes, host)
    if group:
        _check_group(profile, sets, simulate, group, json_out)
        return
    h, spec = _spec(profile, sets, simulate, host)
    if spec.nodes:
        raise ConfigError(
            f"profile {spec.profile} targets nodes {', '.join(spec.nodes)}; drop --host "
            "(or pass --nodes)"
        )
    rows = run_checks(h, spec, transport_for(h))
    if json_out:
        emit_json({"host": h.name, "profile": spec.profile, "rows": [r.to_dict() for r in rows]})
    else:
        table = Table(title=Text(f"check {spec.profile} on {h.name}"))
        for c in ("check", "status", "detail"):
            table.add_column(c)
        for r in rows:
            table.add_row(Text(r.name), Text(r.status, style=_COLOR[r.status]), Text(r.detail))
        out.print(table)
    blocking = [r for r in rows if r.blocking]
    if blocking:
        raise GlmserveError(
            f"{len(blocking)} blocking check(s): " + ", ".join(f"{r.name}" for r in blocking)
        )


def _check_group(
    profile: str, sets: list[str], simulate: bool, group: list[str], json_out: bool
) -> None:
    """``check`` for a host group: one table with a node column; exit 5 if a node cannot be
    reached (after showing what the others said), else 2 if anything blocks."""
    from dataclasses import replace as dc_replace

    from glmserve.deploy.group import plan_group
    from glmserve.deploy.preflight import run_group_checks

    _h, spec = _spec(profile, sets, simulate, group[0])  # simulator python: node 0's host
    hosts, specs = plan_group(dc_replace(spec, nodes=group))
    res = run_group_checks(hosts, specs)
    if json_out:
        emit_json(
            {
                "profile": spec.profile,
                "nodes": group,
                "dist_init_addr": specs[0].extra.get("dist_init_addr"),
                "rows": [{**r.to_dict(), "node": r.node, "host": r.host} for r in res.rows],
            }
        )
    else:
        table = Table(title=Text(f"check {spec.profile} on nodes {', '.join(group)}"))
        for c in ("node", "check", "status", "detail"):
            table.add_column(c)
        for r in res.rows:
            node = "all" if r.node is None else f"{r.node} {r.host}"
            table.add_row(
                Text(node), Text(r.name), Text(r.status, style=_COLOR[r.status]), Text(r.detail)
            )
        out.print(table)
    if res.unreachable:
        raise TransportError(f"unreachable: {', '.join(res.unreachable)}")
    if res.blocking:
        where = ", ".join(
            f"{r.name}" + ("" if r.node is None else f" (node {r.node} {r.host})")
            for r in res.blocking
        )
        raise GlmserveError(f"{len(res.blocking)} blocking check(s): {where}")


# -- launch ------------------------------------------------------------------------------------
class _Progress:
    """Live phase / elapsed / last line: rich on a TTY, plain lines on change otherwise."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.tty = is_interactive()
        self.live: Live | None = None
        self.last_state = ""
        self.last_note = ""

    def __enter__(self) -> _Progress:
        if self.tty:
            self.live = Live(Text(""), console=err, refresh_per_second=4, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def __call__(self, tick: Any) -> None:
        line = tick.last_line[-140:]
        if self.live is not None:
            text = Text.assemble(
                (f"{tick.state:<16}", "bold cyan"),
                f" {_fmt_s(tick.elapsed_s):>7}  ",
                (line, "dim"),
                (f"\n{tick.note}" if tick.note else "", "yellow"),
            )
            self.live.update(text)
            return
        if tick.state != self.last_state or (tick.note and tick.note != self.last_note):
            msg = f"[{_fmt_s(tick.elapsed_s)}] {tick.state}: {line}"
            if tick.note:
                msg += f" ({tick.note})"
            err.print(msg, highlight=False, markup=False)
            self.last_state, self.last_note = tick.state, tick.note


def _how_to(run_id: str) -> str:
    return (
        f"the server keeps running (run {run_id} is recorded): watch it with "
        f"`glmserve logs {run_id} -f` or `glmserve status`, stop it with `glmserve stop {run_id}`"
    )


def _verdict_error(result: Any, run_id: str) -> GlmserveError | None:
    d = result.diagnosis
    if result.state == "READY":
        return None
    if result.state in ("CRASHED", "EXITED"):
        cat = d.category.value if d.category else result.state
        where = f" at log line {d.line}" if d.line else ""
        err.print(
            f"[red]{result.state}[/red] {escape(str(cat))}{where}: {escape(d.root_cause or '')}",
            highlight=False,
        )
        if d.hint:
            err.print(f"hint: {d.hint}", highlight=False, markup=False)
        return ServerCrashed(f"run {run_id} {result.state.lower()}: {cat}", diagnosis=d)
    err.print(
        f"[yellow]{result.state}[/yellow] in phase {escape(str(d.phase.value))}", highlight=False
    )
    if d.hint:
        err.print(f"hint: {d.hint}", highlight=False, markup=False)
    what = "timed out" if result.state == "TIMEOUT" else "stalled"
    return ServerNotReady(
        f"run {run_id} {what} in phase {d.phase.value}; {_how_to(run_id)}", diagnosis=d
    )


@app.command()
def launch(
    profile: str = typer.Option(..., "--profile", "-p", help="Profile to launch."),
    host: str = typer.Option(None, "--host", "-H", help="Host from hosts.yaml (default local)."),
    sets: list[str] = typer.Option([], "--set", help="Override, e.g. server.port=8001."),
    simulate: bool = typer.Option(False, "--simulate", help="Launch the simulator, same flags."),
    no_wait: bool = typer.Option(False, "--no-wait", help="Start and return at once."),
    replace: bool = typer.Option(False, "--replace", help="Stop a live run on that port first."),
    timeout: float = typer.Option(
        None,
        "--timeout",
        help="Seconds to wait for READY (default 7200; 0: no deadline).",
        min=0,
    ),
    stall_timeout: float = typer.Option(
        None,
        "--stall-timeout",
        help="Seconds without log progress = STALLED, every phase (default per phase).",
    ),
    stall_budgets: list[str] = typer.Option(
        [],
        "--stall-budget",
        help="PHASE=SECONDS stall budget for one phase (repeatable; beats --stall-timeout).",
    ),
    poll: float = typer.Option(1.0, "--poll", help="Seconds between polls.", min=0.05),
    json_out: bool = typer.Option(False, "--json", help="Run and verdict as JSON."),
    nodes: str = typer.Option(
        None, "--nodes", help="Host group a,b (node 0 first): one server over several nodes."
    ),
) -> None:
    """Start a run (nohup + setsid, recorded) and wait for READY; exit 3 crashed, 4 stalled.
    A profile with ``nodes:`` (or --nodes) starts one run per node as a group.

    Example: glmserve launch --profile trtllm_mla --host gpu8 --timeout 1800
    Example (two nodes): glmserve launch --profile trtllm_mla --nodes gpu8a,gpu8b
    """
    from glmserve.deploy.watch import Watcher, check_stall_timeout, parse_stall_budgets
    from glmserve.remote.process import launch_run, transport_for_run
    from glmserve.store import RunStore

    budgets = parse_stall_budgets(stall_budgets)  # a typo fails before anything starts
    check_stall_timeout(stall_timeout)
    group = _group_of(profile, sets, nodes, host)
    if group:
        _launch_group(
            profile,
            sets,
            simulate,
            group,
            replace,
            timeout,
            stall_timeout,
            poll,
            json_out,
            no_wait,
            budgets,
        )
        return
    h, spec = _spec(profile, sets, simulate, host)
    if spec.nodes:
        raise ConfigError(
            f"profile {spec.profile} targets nodes {', '.join(spec.nodes)}; drop --host "
            "(or pass --nodes)"
        )
    store = RunStore.open()
    run = launch_run(
        spec,
        h.name,
        replace_existing=replace,
        store=store,
        say=lambda m: err.print(m, markup=False),
    )
    if not json_out:  # scripts capture the id: run=$(glmserve launch ...); --json carries it
        print(run.run_id, flush=True)
    err.print(
        f"run {run.run_id}: {spec.profile} on {run.host}:{run.port}, pid {run.pid}, "
        f"log {run.run_dir}/server.log",
        highlight=False,
        markup=False,
    )
    if no_wait:
        if json_out:
            emit_json({"run": store.get_run(run.run_id).to_dict(), "verdict": None})
        return
    watcher = Watcher(
        run,
        transport_for_run(run),
        store,
        poll_s=poll,
        timeout_s=timeout,
        stall_timeout_s=stall_timeout,
        stall_budgets=budgets,
    )
    try:
        with _Progress(run.run_id) as progress:
            watcher.on_tick = progress
            result = watcher.watch()
    except KeyboardInterrupt:
        err.print(f"stopped watching: {_how_to(run.run_id)}", highlight=False, markup=False)
        raise SystemExit(EXIT_INTERRUPTED) from None  # main() ignores a typer.Exit code
    except TransportError as exc:
        raise TransportError(f"{exc}; {_how_to(run.run_id)}") from exc
    if json_out:
        emit_json(
            {
                "run": store.get_run(run.run_id).to_dict(),
                "verdict": {
                    "state": result.state,
                    "elapsed_s": round(result.elapsed_s, 2),
                    "reconnects": result.reconnects,
                    **result.diagnosis.to_dict(),
                },
            }
        )
    error = _verdict_error(result, run.run_id)
    if error is not None:
        raise error
    patch = result.diagnosis.patch_active or f"0/{spec.tp_size}"
    err.print(
        f"[green]READY[/green] after {_fmt_s(result.elapsed_s)}: {escape(run.run_id)} on "
        f"{escape(run.host)}:{run.port}"
        + (f"; patch active on {escape(str(patch))} ranks" if spec.patches else ""),
        highlight=False,
    )


def _launch_group(
    profile: str,
    sets: list[str],
    simulate: bool,
    group: list[str],
    replace: bool,
    timeout: float | None,
    stall_timeout: float | None,
    poll: float,
    json_out: bool,
    no_wait: bool = False,
    stall_budgets: dict[Any, float] | None = None,
) -> None:
    """``launch`` for a host group: start every node, watch all, stop all if one fails."""
    from dataclasses import replace as dc_replace

    from glmserve.deploy.group import launch_group, mark_followers_ready, stop_group, watch_group
    from glmserve.store import RunStore

    _h, spec = _spec(profile, sets, simulate, group[0])  # simulator python: node 0's host
    spec = dc_replace(spec, nodes=group)
    store = RunStore.open()
    gid, runs = launch_group(
        spec, replace_existing=replace, store=store, say=lambda m: err.print(m, markup=False)
    )
    if not json_out:
        print(gid, flush=True)
    names = ", ".join(f"{r.meta['node_rank']}:{r.host}" for r in runs)
    err.print(f"group {gid}: {spec.profile} on nodes {names}", highlight=False, markup=False)
    if no_wait:
        if json_out:
            runs_d = [store.get_run(r.run_id).to_dict() for r in runs]
            emit_json({"group_id": gid, "runs": runs_d, "verdict": None})
        return
    last: dict[int, str] = {}

    def tick(rank: int, t: Any) -> None:
        if last.get(rank) != t.state:
            last[rank] = t.state
            err.print(
                f"[{_fmt_s(t.elapsed_s)}] node {rank}: {t.state}: {t.last_line[-120:]}",
                highlight=False,
                markup=False,
            )

    how = f"stop it with `glmserve stop {gid}`"
    try:
        result = watch_group(
            runs,
            poll_s=poll,
            timeout_s=timeout,
            stall_timeout_s=stall_timeout,
            stall_budgets=stall_budgets,
            on_tick=tick,
        )
    except KeyboardInterrupt:
        err.print(f"stopped watching: group {gid} keeps running; {how}", markup=False)
        raise SystemExit(EXIT_INTERRUPTED) from None
    except TransportError as exc:
        raise TransportError(f"{exc}; group {gid} keeps running; {how}") from exc
    stopped: list[dict[str, Any]] = []
    if result.state == "READY":
        mark_followers_ready(runs, store)
    else:
        bad = runs[result.failing_rank or 0]
        err.print(
            f"node {result.failing_rank} ({bad.host}, run {bad.run_id}) {result.state}: "
            f"stopping every node of group {gid}",
            highlight=False,
            markup=False,
        )
        stopped = stop_group(runs, store=store)
    if json_out:
        d = result.decisive.diagnosis
        emit_json(
            {
                "group_id": gid,
                "runs": [store.get_run(r.run_id).to_dict() for r in runs],
                "verdict": {
                    "state": result.state,
                    "failing_node": result.failing_rank,
                    "failing_host": None
                    if result.failing_rank is None
                    else runs[result.failing_rank].host,
                    "elapsed_s": round(result.elapsed_s, 2),
                    **d.to_dict(),
                },
                "stopped": stopped,
            }
        )
    if result.state != "READY":
        rank = result.failing_rank
        error = _verdict_error(result.decisive, runs[rank or 0].run_id)
        assert error is not None
        msg = f"group {gid}: node {rank} ({runs[rank or 0].host}) {error}; every node stopped"
        raise type(error)(msg, diagnosis=result.decisive.diagnosis)
    node0 = runs[0]
    err.print(
        f"[green]READY[/green] after {_fmt_s(result.elapsed_s)}: group {escape(gid)}, "
        f"{len(runs)} nodes, serving on {escape(node0.host)}:{node0.port} "
        f"(run {escape(node0.run_id)})",
        highlight=False,
    )


# -- status / runs -----------------------------------------------------------------------------
@app.command()
def status(
    run_id: str = typer.Argument(None, help="One run (id or unique prefix); default all live."),
    all_runs: bool = typer.Option(False, "--all", help="Include finished runs."),
    json_out: bool = typer.Option(False, "--json", help="Rows as JSON."),
) -> None:
    """Runs with state, uptime, host, profile, port (checked live on their hosts).

    Example: glmserve status --json
    """
    from glmserve.deploy.group import resolve_runs
    from glmserve.deploy.identity import identity_problems
    from glmserve.deploy.watch import assess_run
    from glmserve.remote.process import launch_in_progress
    from glmserve.store import RunStore

    store = RunStore.open()
    if run_id:
        runs = resolve_runs(store, run_id)  # a group id (or a node's run id): every node
    else:
        runs = store.list_runs() if all_runs else store.list_runs(live_only=True)
    rows = []
    for r in runs:
        if (r.ended_at is not None and not run_id) or launch_in_progress(r):
            rows.append(_stored_row(r))  # a run being launched has no process to check yet
            continue
        try:
            rows.append(assess_run(r, store))
            rows[-1]["identity_problems"] = identity_problems(r, rows[-1])
        except TransportError as exc:
            row = _stored_row(r)
            row["state"] = f"{r.state}?"
            row["error"] = str(exc)
            rows.append(row)
        if "group_id" in r.meta:
            rows[-1]["group_id"] = r.meta["group_id"]
            rows[-1]["node_rank"] = r.meta.get("node_rank")
    if json_out:
        emit_json(rows)
        return
    if not rows:
        err.print("no live runs (glmserve runs lists past ones)")
        return
    table = Table()
    for c in ("run", "state", "uptime", "host", "profile", "port", "pid", "note"):
        table.add_column(c)
    for row in rows:
        note = row.get("error") or ""
        if row.get("identity_problems"):  # READY, but another server answers on its port
            note = "NOT THIS RUN'S SERVER: " + "; ".join(row["identity_problems"]) + " " + note
        if row.get("group_id"):
            note = f"group {row['group_id']} node {row['node_rank']} " + note
        if row.get("patch_active"):
            note = f"patch active on {row['patch_active']} ranks " + note
        if row.get("category"):
            note = f"{row['category']}: {row.get('root_cause') or ''} " + note
        cells = (
            row["run_id"],
            row["state"],
            _fmt_s(row["uptime_s"]),
            row["host"],
            row["profile"],
            str(row["port"]),
            str(row["pid"] or ""),
            note.strip()[:120],
        )
        table.add_row(*(Text(str(c)) for c in cells))  # data, never rich markup
    out.print(table)


def _stored_row(r: Any) -> dict[str, Any]:
    end = r.ended_at or time.time()
    return {
        "run_id": r.run_id,
        "state": r.state,
        "host": r.host,
        "profile": r.profile,
        "port": r.port,
        "pid": r.pid,
        "uptime_s": round(end - r.created_at, 1),
        "category": r.category,
        "root_cause": r.root_cause,
        "patch_active": r.meta.get("patch_active") if r.patches else None,
        "launcher": r.launcher,
    }


@app.command()
def runs(
    last: int = typer.Option(20, "--last", "-n", help="How many, newest first."),
    host: str = typer.Option(None, "--host", "-H", help="Only this host."),
    json_out: bool = typer.Option(False, "--json", help="Records as JSON."),
) -> None:
    """Recorded runs from the store (no host is contacted).

    Example: glmserve runs --last 5
    """
    from glmserve.store import RunStore

    records = RunStore.open().list_runs(host=host, last=last)
    if json_out:
        emit_json([r.to_dict() for r in records])
        return
    table = Table()
    for c in ("run", "created", "state", "host", "profile", "port", "launcher", "category"):
        table.add_column(c)
    for r in records:
        cells = (
            r.run_id,
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created_at)),
            r.state,
            r.host,
            r.profile,
            str(r.port),
            r.launcher,
            r.category or "",
        )
        table.add_row(*(Text(str(c)) for c in cells))  # data, never rich markup
    out.print(table)


# -- logs --------------------------------------------------------------------------------------
@app.command()
def logs(
    run_id: str = typer.Argument(..., help="Run id or unique prefix, or a group id (g...)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
    lines: int = typer.Option(None, "-n", "--lines", help="Only the last N lines (per node)."),
    poll: float = typer.Option(0.5, "--poll", help="Seconds between reads when following."),
) -> None:
    """Print a run's server.log (by byte offset over ssh; -f follows until the server ends).
    A group id prints every node's log, each line prefixed ``\\[nodeI host]``; -f follows them
    all until every node's server has ended.

    Example: glmserve logs 3f2a -f -n 50
    Example (a group): glmserve logs g1a2b3c4 -n 20 -f
    """
    from glmserve.deploy.group import group_runs
    from glmserve.remote.process import (
        read_log_bytes,
        read_log_tail,
        run_ownership,
        transport_for_run,
    )
    from glmserve.store import RunStore

    store = RunStore.open()
    if lines is not None and lines < 0:
        raise ConfigError(f"-n/--lines: expected a count of 0 or more, got {lines}")
    group = group_runs(store, run_id) if run_id.startswith("g") else []
    if group:
        _group_logs(group, follow, lines, poll)
        return
    run = store.get_run(run_id)
    t = transport_for_run(run)
    if lines is not None:  # only the tail is read, however big the log
        data, offset = read_log_tail(t, run.log_path, lines)
    else:
        data, offset = read_log_bytes(t, run.log_path)
    text = data.decode("utf-8", "replace")
    sys.stdout.write(text)
    sys.stdout.flush()
    if not follow:
        return
    last_check = 0.0
    while True:
        try:
            data, new = t.read_from(run.log_path, offset)
            if data:
                sys.stdout.write(data.decode("utf-8", "replace"))
                sys.stdout.flush()
            offset = new
            if not data and time.monotonic() - last_check > 2:
                last_check = time.monotonic()
                if not run_ownership(t, run).alive:
                    data, offset = read_log_bytes(t, run.log_path, offset)
                    sys.stdout.write(data.decode("utf-8", "replace"))
                    err.print(f"(run {run.run_id} is no longer running)", markup=False)
                    return
        except TransportError as exc:
            err.print(f"(connection lost: {exc}; retrying at byte {offset})", markup=False)
        time.sleep(poll)


def _group_logs(runs: list[Any], follow: bool, lines: int | None, poll: float) -> None:
    """``logs GROUP``: every node's log, prefixed; -f until every node's server ended."""
    from glmserve.deploy.group import GroupLogs

    def note(msg: str) -> None:
        err.print(f"({msg})", highlight=False, markup=False)

    logs = GroupLogs(runs, note)
    _write_lines(logs.initial(lines, follow))
    if not follow:
        return
    while True:
        _write_lines(logs.poll())
        if logs.done:
            note(f"group {runs[0].meta.get('group_id')}: every node's server has ended")
            return
        time.sleep(poll)


def _write_lines(lines: list[str]) -> None:
    if lines:
        sys.stdout.write("".join(f"{ln}\n" for ln in lines))
        sys.stdout.flush()


# -- stop --------------------------------------------------------------------------------------
@app.command()
def stop(
    run_id: str = typer.Argument(
        None, help="Run id or unique prefix; a group id (or one node's run) stops every node."
    ),
    all_runs: bool = typer.Option(False, "--all", help="Every live run."),
    timeout: float = typer.Option(15.0, "--timeout", help="Seconds between TERM and KILL."),
    json_out: bool = typer.Option(False, "--json", help="What was signalled, as JSON."),
) -> None:
    """Stop a run: TERM its process group, wait, KILL, verify nothing is left. Never by name;
    the PID's start time is checked first so a reused PID is never signalled.

    Example: glmserve stop 3f2a
    """
    from glmserve.deploy.group import resolve_runs
    from glmserve.remote.process import stop_failure, stop_run, stop_runs
    from glmserve.store import RunStore

    store = RunStore.open()
    if all_runs == bool(run_id):
        raise ConfigError("give a RUN id or --all (not both)")
    runs = store.list_runs(live_only=True) if all_runs else resolve_runs(store, run_id)
    if not all_runs and len(runs) == 1 and "group_id" not in runs[0].meta:
        reports = [{**stop_run(runs[0].run_id, timeout=timeout, store=store), "ok": True}]
    else:  # every run is tried; the table says what happened to each
        reports = stop_runs(runs, timeout=timeout, store=store)
    if json_out:
        emit_json(reports)
    elif all_runs or len(reports) > 1:
        _stop_table(reports)
    else:
        err.print(_stop_line(reports[0]), highlight=False, markup=False)
    for rep in reports:
        if rep["ok"] and not rep.get("recorded", True):
            err.print(
                f"warning: {rep['run_id']} stopped but not recorded: {rep['store_error']}",
                highlight=False,
                markup=False,
            )
    error = stop_failure(reports)
    if error is not None:
        raise error


def _stop_outcome(rep: dict[str, Any]) -> str:
    if not rep["ok"]:
        return f"FAILED: {rep['error']}"
    if not rep["signalled"]:
        return f"{rep.get('note', 'not running')}; nothing left"
    killed = f", killed {rep['killed']}" if "killed" in rep else ""
    return f"stopped: signalled {rep['signalled']}{killed}; nothing left"


def _stop_line(rep: dict[str, Any]) -> str:
    node = f" (group {rep['group_id']} node {rep['node_rank']})" if rep.get("group_id") else ""
    return f"{rep['run_id']}{node} on {rep['host']}: {_stop_outcome(rep)}"


def _stop_table(reports: list[dict[str, Any]]) -> None:
    """One row per run tried by ``stop --all`` / a group stop (on stderr, like the lines)."""
    if not reports:
        err.print("no live runs to stop")
        return
    table = Table(title=Text(f"stop: {sum(r['ok'] for r in reports)}/{len(reports)} stopped"))
    for c in ("run", "host", "node", "outcome"):
        table.add_column(c)
    for rep in reports:
        node = f"{rep['group_id']}:{rep['node_rank']}" if rep.get("group_id") else ""
        style = "red" if not rep["ok"] else ""
        cells = (rep["run_id"], rep["host"], node, _stop_outcome(rep))
        table.add_row(*(Text(str(c), style=style) for c in cells))  # data, never markup
    err.print(table)
