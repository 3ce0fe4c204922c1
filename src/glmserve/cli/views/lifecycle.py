"""The lifecycle verbs' views and ``--json`` shapes: check, launch, status, runs, logs,
stop (rendered for ``cli/lifecycle_cmds.py``)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from glmserve.cli._app import err, is_interactive, out
from glmserve.cli.views.common import cell
from glmserve.errors import (
    JOB_END_ERRORS,
    DiagnosedError,
    GlmserveError,
    RunNotServing,
    ServerCrashed,
    ServerNotReady,
)

# -- lifecycle verbs: check, launch, status, runs, logs, stop ----------------------------

_COLOR = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


def fmt_s(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def say(msg: str) -> None:
    """A progress line on stderr, printed as it is."""
    err.print(msg, highlight=False, markup=False)


def note(msg: str) -> None:
    """An aside on stderr, in parentheses (``logs``: a node ended, a connection was lost)."""
    err.print(f"({msg})", highlight=False, markup=False)


# -- check ---------------------------------------------------------------------------------------
def check_json(plan: Any, res: Any) -> dict[str, Any]:
    if not plan.grouped:
        rows = [r.to_dict() for r in res.rows]
        return {"host": plan.nodes[0].host.name, "profile": plan.profile, "rows": rows}
    return {
        "profile": plan.profile,
        "nodes": plan.names,
        "dist_init_addr": plan.dist_init_addr,
        "rows": [{**r.to_dict(), "node": r.node, "host": r.host} for r in res.rows],
    }


def print_check(plan: Any, res: Any) -> None:
    """The rows as a table (with a node column for a group) on stdout."""
    where = f"nodes {', '.join(plan.names)}" if plan.grouped else plan.nodes[0].host.name
    table = Table(title=Text(f"check {plan.profile} on {where}"))
    for c in (
        ("node", "check", "status", "detail") if plan.grouped else ("check", "status", "detail")
    ):
        table.add_column(c)
    for r in res.rows:
        cells = [Text(r.name), Text(r.status, style=_COLOR[r.status]), Text(r.detail)]
        if plan.grouped:
            cells.insert(0, Text("all" if r.node is None else f"{r.node} {r.host}"))
        table.add_row(*cells)
    out.print(table)


def blocking_error(res: Any) -> GlmserveError | None:
    """The error naming every blocking check (and its node, in a group); None: none."""
    if not res.blocking:
        return None
    where = ", ".join(
        f"{r.name}" + ("" if r.node is None else f" (node {r.node} {r.host})") for r in res.blocking
    )
    return GlmserveError(f"{len(res.blocking)} blocking check(s): {where}")


# -- launch --------------------------------------------------------------------------------------
def launched(dep: Any) -> None:
    """The line naming what was started (after its id on stdout)."""
    if not dep.grouped:
        run = dep.runs[0]
        say(
            f"run {run.run_id}: {dep.plan.profile} on {run.host}:{run.port}, pid {run.pid}, "
            f"log {run.run_dir}/server.log"
        )
        return
    names = ", ".join(f"{r.meta['node_rank']}:{r.host}" for r in dep.runs)
    say(f"group {dep.group_id}: {dep.plan.profile} on nodes {names}")


def launch_json(
    dep: Any, verdict: Any = None, stopped: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """``launch --json``: ``{run, verdict, stopped}`` for a single run, ``{group_id, runs,
    verdict, stopped}`` for a group; with ``--no-wait`` verdict None and no ``stopped``."""
    runs = [r.to_dict() for r in dep.records()]
    v: dict[str, Any] | None = None
    if verdict is not None:
        d = verdict.decisive
        if dep.grouped:
            rank = verdict.failing_rank
            v = {
                "state": verdict.state,
                "failing_node": rank,
                "failing_host": None if rank is None else dep.runs[rank].host,
                "elapsed_s": round(verdict.elapsed_s, 2),
                **d.diagnosis.to_dict(),
            }
        else:
            v = {
                "state": d.state,
                "elapsed_s": round(d.elapsed_s, 2),
                "reconnects": d.reconnects,
                **d.diagnosis.to_dict(),
            }
    if v is not None and verdict.decisive.state == "STOPPED":
        v["state"] = "STOPPED"  # the log's phase stays in "phase"
    if not dep.grouped:
        if verdict is None:
            return {"run": runs[0], "verdict": v}
        # a CRASHED run's leftover processes, stopped after the verdict (Deployment.settle_crash)
        return {"run": runs[0], "verdict": v, "stopped": stopped or []}
    data = {"group_id": dep.group_id, "runs": runs, "verdict": v}
    if verdict is not None:
        data["stopped"] = stopped or []
    return data


_SGLANG_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]{0,40}\]\s*")


def brief_log_line(line: str, width: int) -> str:
    """A log line for a progress display: SGLang's ``[date time TPn]`` prefix dropped (the
    display has its own clock), the message kept from its start and cut at ``width``."""
    text = _SGLANG_PREFIX.sub("", line.strip())
    if not text:
        return "(no log line yet)"
    return text if len(text) <= width else text[: width - 1] + "…"


class _Progress:
    """One run's live phase / elapsed / last line: rich on a TTY, plain lines on change."""

    def __init__(self) -> None:
        self.live: Any = None
        self.last_state = ""
        self.last_note = ""

    def __enter__(self) -> _Progress:
        if is_interactive():
            from rich.live import Live

            self.live = Live(Text(""), console=err, refresh_per_second=4, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def __call__(self, _rank: int, tick: Any) -> None:
        line = brief_log_line(tick.last_line, 140)
        if self.live is not None:
            text = Text.assemble(
                (f"{tick.state:<16}", "bold cyan"),
                f" {fmt_s(tick.elapsed_s):>7}  ",
                (line, "dim"),
                (f"\n{tick.note}" if tick.note else "", "yellow"),
            )
            self.live.update(text)
            return
        if tick.state != self.last_state or (tick.note and tick.note != self.last_note):
            msg = f"[{fmt_s(tick.elapsed_s)}] {tick.state}: {line}"
            if tick.note:
                msg += f" ({tick.note})"
            err.print(msg, highlight=False, markup=False)
            self.last_state, self.last_note = tick.state, tick.note


@contextmanager
def watch_progress(dep: Any) -> Iterator[Any]:
    """The ``on_tick`` for a launch's watch: a single run's live progress, or a line each
    time a group's node changes phase."""
    if not dep.grouped:
        with _Progress() as progress:
            yield progress
        return
    last: dict[int, str] = {}

    def tick(rank: int, t: Any) -> None:
        if last.get(rank) != t.state:
            last[rank] = t.state
            say(
                f"[{fmt_s(t.elapsed_s)}] node {rank}: {t.state}: {brief_log_line(t.last_line, 120)}"
            )

    yield tick


def keeps_running(dep: Any) -> str:
    """What is left running when the watch ends early, and how to deal with it."""
    if dep.grouped:
        return f"group {dep.group_id} keeps running; stop it with `glmserve stop {dep.group_id}`"
    return _how_to(dep.id)


def interrupted_start(store: Any) -> str:
    """Ctrl-C (or SIGTERM) inside ``Deployment.launch``: a server whose process was not
    recorded yet is stopped there, but one recorded a moment before the interrupt keeps
    running (its id was never printed): name every live run this process launched."""
    import os

    mine = [
        r
        for r in store.list_runs(live_only=True)
        if (r.meta.get("launched_by") or {}).get("pid") == os.getpid() and r.pid is not None
    ]
    if not mine:
        return "interrupted while starting: no server of this launch is recorded running"
    return "interrupted while starting; " + "; ".join(_how_to(r.run_id) for r in mine)


def _how_to(run_id: str) -> str:
    return (
        f"the server keeps running (run {run_id} is recorded): watch it with "
        f"`glmserve logs {run_id} -f` or `glmserve status`, stop it with `glmserve stop {run_id}`"
    )


def _failure(result: Any, run_id: str) -> GlmserveError:
    """Print a failed watch's diagnosis and return its error (exit 3 crashed, 4 stalled)."""
    d = result.diagnosis
    if result.state == "STOPPED":
        err.print(
            f"[yellow]STOPPED[/yellow] by `glmserve stop` in phase {escape(str(d.phase.value))}",
            highlight=False,
        )
        return RunNotServing(
            f"run {run_id} was stopped (glmserve stop) in phase {d.phase.value}, before READY"
        )
    if result.state in JOB_END_ERRORS:  # a Slurm job ended by the scheduler
        err.print(f"[red]{result.state}[/red]: {escape(d.root_cause or '')}", highlight=False)
        if d.hint:
            err.print(f"hint: {d.hint}", highlight=False, markup=False)
        msg = f"run {run_id} {result.state.lower()}: {d.root_cause}"
        return JOB_END_ERRORS[result.state](msg, diagnosis=d)
    if result.state in ("CRASHED", "EXITED"):
        cat = d.category.value if d.category else result.state
        where = f" at log line {d.line}" if d.line else ""
        head = f"[red]{result.state}[/red]" + (f" {escape(str(cat))}" if d.category else "")
        err.print(f"{head}{where}: {escape(d.root_cause or '')}", highlight=False)
        if d.hint:
            hint = d.hint.replace("glmserve logs RUN ", f"glmserve logs {run_id} ")
            err.print(f"hint: {hint}", highlight=False, markup=False)
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


def verdict_error(dep: Any, verdict: Any) -> GlmserveError | None:
    """None when READY; else the failure printed and its error (a group's names the node)."""
    if verdict.state == "READY":
        return None
    rank = verdict.failing_rank
    bad = dep.runs[rank or 0]
    error = _failure(verdict.decisive, bad.run_id)
    if not dep.grouped:
        return error
    msg = f"group {dep.group_id}: node {rank} ({bad.host}) {error}; every node stopped"
    if isinstance(error, DiagnosedError):
        return type(error)(msg, diagnosis=verdict.decisive.diagnosis)
    return type(error)(msg)


def ready(dep: Any, verdict: Any) -> None:
    """The READY line: where it serves (and on how many ranks a patch is active)."""
    head = dep.runs[0]
    if dep.grouped:
        err.print(
            f"[green]READY[/green] after {fmt_s(verdict.elapsed_s)}: group {escape(dep.id)}, "
            f"{len(dep.runs)} nodes, serving on {escape(head.host)}:{head.port} "
            f"(run {escape(head.run_id)})",
            highlight=False,
        )
        return
    spec = dep.plan.nodes[0].spec
    patch = verdict.decisive.diagnosis.patch_active or f"0/{spec.tp_size}"
    err.print(
        f"[green]READY[/green] after {fmt_s(verdict.elapsed_s)}: {escape(head.run_id)} on "
        f"{escape(head.host)}:{head.port}"
        + (f"; patch active on {escape(str(patch))} ranks" if spec.patches else ""),
        highlight=False,
    )


# -- status / runs -------------------------------------------------------------------------------
def print_status(rows: list[dict[str, Any]]) -> None:
    if not rows:
        err.print("no live runs (glmserve runs lists past ones)")
        return
    table = Table()
    for c in ("run", "state", "uptime", "host", "profile", "port", "pid", "note"):
        table.add_column(c)
    for row in rows:
        what = row.get("error") or ""
        if row.get("identity_problems"):  # READY, but another server answers on its port
            what = "NOT THIS RUN'S SERVER: " + "; ".join(row["identity_problems"]) + " " + what
        if row.get("group_id"):
            what = f"group {row['group_id']} node {row['node_rank']} " + what
        if row.get("patch_active"):
            what = f"patch active on {row['patch_active']} ranks " + what
        if row.get("category"):
            what = f"{row['category']}: {row.get('root_cause') or ''} " + what
        what = _process_note(row) + what
        if row.get("group_problem"):  # first: a READY node of a broken group is no server
            what = f"NOT SERVING: {row['group_problem']}; " + what
        cells = (
            row["run_id"],
            row["state"],
            fmt_s(row["uptime_s"]),
            row["host"],
            row["profile"],
            str(row["port"]),
            str(row["pid"] or ""),
            what.strip().rstrip(";")[:200],
        )
        table.add_row(*(cell(c) for c in cells))  # data, never rich markup
    out.print(table)


def _process_note(row: dict[str, Any]) -> str:
    """A run with a verdict whose processes are still up (they hold its GPUs), or one this
    look found ended (listed this once; ``status --all`` and ``runs`` keep it)."""
    from glmserve.store import TERMINAL_STATES

    state = str(row.get("state") or "").rstrip("?")
    if row.get("alive") and row.get("alive_pids") and state in TERMINAL_STATES:
        pids = ", ".join(map(str, row["alive_pids"]))
        return f"{state} but processes still up (pid {pids}): glmserve stop {row['run_id']}; "
    if row.get("ended_now"):
        return "ended: no process left; "
    return ""


def print_runs(records: list[Any]) -> None:
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
        table.add_row(*(cell(c) for c in cells))  # data, never rich markup
    out.print(table)


# -- stop ----------------------------------------------------------------------------------------
def print_stop(reports: list[dict[str, Any]], as_table: bool) -> None:
    """One line for one run, else a table."""
    if as_table:
        _stop_table(reports)
    else:
        say(_stop_line(reports[0]))


def warn_unrecorded(reports: list[dict[str, Any]]) -> None:
    """A run stopped whose stop the store could not record (a full disk, say)."""
    for rep in reports:
        if rep["ok"] and not rep.get("recorded", True):
            say(f"warning: {rep['run_id']} stopped but not recorded: {rep['store_error']}")


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


def stop_title(reports: list[dict[str, Any]]) -> str:
    """``stop: 1 stopped, 1 not running, 1 FAILED (3 runs)``: a run whose processes had
    already ended was not stopped by this command, so it is not counted as stopped."""
    stopped = sum(1 for r in reports if r["ok"] and r["signalled"])
    ended = sum(1 for r in reports if r["ok"] and not r["signalled"])
    failed = len(reports) - stopped - ended
    parts = [f"{stopped} stopped"]
    if ended:
        parts.append(f"{ended} not running")
    if failed:
        parts.append(f"{failed} FAILED")
    return f"stop: {', '.join(parts)} ({len(reports)} run{'s' if len(reports) != 1 else ''})"


def _stop_table(reports: list[dict[str, Any]]) -> None:
    """One row per run tried by ``stop --all`` / a group stop (on stderr, like the lines)."""
    if not reports:
        err.print("no live runs to stop")
        return
    table = Table(title=Text(stop_title(reports)))
    for c in ("run", "host", "node", "outcome"):
        table.add_column(c)
    for rep in reports:
        node = f"{rep['group_id']}:{rep['node_rank']}" if rep.get("group_id") else ""
        style = "red" if not rep["ok"] else ""
        cells = (rep["run_id"], rep["host"], node, _stop_outcome(rep))
        table.add_row(*(cell(c, style) for c in cells))  # data, never markup
    err.print(table)
