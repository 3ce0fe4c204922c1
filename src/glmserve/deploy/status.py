"""What ``status`` shows: each run it names (or every live one) checked live on its host,
a group's rows judged as one server, a finished run as the store has it."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from glmserve.deploy.deployment import Deployment, group_runs
from glmserve.store import TERMINAL_STATES, RunRecord, RunStore


def status_rows(store: RunStore, ident: str | None, all_runs: bool) -> list[dict[str, Any]]:
    """What ``status`` shows: the runs ``ident`` names (every node of a group), else the
    live ones (``all_runs``: every recorded one), each checked live on its host; a finished
    run not asked for by id, or one still being launched, as the store has it."""
    from glmserve.deploy.assess import assess_run
    from glmserve.deploy.identity import identity_problems
    from glmserve.errors import ProcessUnverified, TransportError
    from glmserve.remote.launcher import launch_in_progress
    from glmserve.remote.run_host import host_note

    if ident:
        runs = Deployment.resolve(store, ident).runs
    else:
        runs = store.list_runs() if all_runs else store.list_runs(live_only=True)
    rows = []
    for r in runs:
        if (r.ended_at is not None and not ident) or launch_in_progress(r):
            rows.append(_stored_row(r))  # a run being launched has no process to check yet
            continue
        try:
            rows.append(assess_run(r, store))
            rows[-1]["identity_problems"] = identity_problems(r, rows[-1])
            if r.ended_at is None and not rows[-1]["alive"] and r.state != "STOPPED":
                # found ended by this very look: listed once, saying so (no longer live)
                rows[-1]["ended_now"] = store.get_run(r.run_id).ended_at is not None
        except TransportError as exc:
            row = _stored_row(r)
            row["state"] = f"{r.state}?"
            row["error"] = str(exc)
            row["unverified"] = isinstance(exc, ProcessUnverified)  # `status` exits 5
            rows.append(row)
        note = host_note(r)  # checked on the host it was launched on, whatever hosts.yaml says
        if note:
            rows[-1]["host_note"] = note
        if r.meta.get("slurm") and r.ended_at is None:
            from glmserve.deploy.slurm_job import status_fields

            with contextlib.suppress(TransportError):
                rows[-1].update(status_fields(r))
        if "group_id" in r.meta:
            rows[-1]["group_id"] = r.meta["group_id"]
            rows[-1]["node_rank"] = r.meta.get("node_rank")
    _judge_groups(store, rows)
    return rows


def _judge_groups(store: RunStore, rows: list[dict[str, Any]]) -> None:
    """Give every grouped row its group's verdict: a group serves only while every node
    does, so a READY node 0 beside a dead node 1 must not read as a working server (its
    collectives hang). Nodes not listed (an ended one drops out of the live list) are read
    from the store, as their last assessment left them."""
    listed = {row["run_id"]: row["state"] for row in rows}
    for gid in {row["group_id"] for row in rows if row.get("group_id")}:
        nodes = group_runs(store, gid, exact=True)
        down = [
            (int(r.meta.get("node_rank", i)), r.host, listed.get(r.run_id, r.state))
            for i, r in enumerate(nodes)
            if listed.get(r.run_id, r.state).rstrip("?") in TERMINAL_STATES
        ]
        if down and len(down) < len(nodes):
            rank, host, state = down[0]
            group_state = state.rstrip("?")
            problem = (
                f"group {gid} cannot serve: node {rank} ({host}) is {group_state}; "
                f"stop every node: glmserve stop {gid}"
            )
        elif down:
            group_state, problem = down[0][2].rstrip("?"), None  # all ended: nothing serves
        else:
            states = {listed.get(r.run_id, r.state).rstrip("?") for r in nodes}
            group_state, problem = ("READY" if states == {"READY"} else "STARTING"), None
        for row in rows:
            if row.get("group_id") == gid:
                row["group_state"] = group_state
                row["group_problem"] = problem


def _stored_row(r: RunRecord) -> dict[str, Any]:
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
