"""Group-aware verbs without servers: the cross-node SGLang check, a group's logs read from
two local "nodes", the sweep loop over a scripted host group, and lifecycle tables that show
data (a profile or root cause with rich markup in it) literally."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from glmserve.cli import main
from glmserve.deploy.deployment import group_summary
from glmserve.deploy.logs import GroupLogs, node_prefix
from glmserve.deploy.preflight import CheckRow, sglang_versions, version_row
from glmserve.remote.hosts import get_host
from glmserve.store import RunRecord, RunStore
from glmserve.sweep.loop import StepOutcome, SweepBackend, run_sweep
from glmserve.sweep.state import (
    CRASHED,
    INTERRUPTED,
    OK,
    SweepOptions,
    load_sweep,
    resume_options,
    start_sweep,
)
from glmserve.sweep.summary import render_markdown, sweep_rows


# -- same SGLang on every node ------------------------------------------------------------------
def _rows(*versions: tuple[str, str, str]) -> list[CheckRow]:
    return [CheckRow("sglang", st, d, node=i, host=h) for i, (h, st, d) in enumerate(versions)]


def test_different_sglang_versions_block_and_name_each_node():
    rows = _rows(("gpu-a", "ok", "sglang 0.5.9"), ("gpu-b", "warn", "sglang 0.5.8, profile "
                 "targets >=0.5.9"), ("gpu-c", "ok", "sglang 0.5.9"))  # fmt: skip
    assert sglang_versions(rows) == {"0.5.9": ["gpu-a", "gpu-c"], "0.5.8": ["gpu-b"]}
    row = version_row(rows, simulate=False)
    assert (row.name, row.status) == ("same sglang", "fail")
    assert (
        row.detail == "nodes run different SGLang versions: 0.5.8 on gpu-b; 0.5.9 on gpu-a, gpu-c"
    )
    # The simulator does not run SGLang: a mismatch is only worth a warning there.
    assert version_row(rows, simulate=True).status == "warn"


def test_sglang_missing_on_one_node_blocks_unless_simulated():
    rows = _rows(("gpu-a", "ok", "sglang 0.5.9"), ("gpu-b", "fail", "not installed"))
    row = version_row(rows, simulate=False)
    assert row.status == "fail" and row.detail == "sglang 0.5.9 on gpu-a, none on gpu-b"
    assert version_row(_rows(("a", "ok", "sglang 0.5.9"), ("b", "ok", "sglang 0.5.9")), False) == (
        CheckRow("same sglang", "ok", "sglang 0.5.9 on every node")
    )


# -- logs of a group --------------------------------------------------------------------------
def _group(tmp_path: Path, logs: list[bytes]) -> list[RunRecord]:
    """Two finished runs of group g1234567 on local hosts ``la``/``lb`` with these logs."""
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "hosts.yaml").write_text("hosts:\n  la:\n    workdir: /tmp\n  lb:\n    workdir: /tmp\n")
    store = RunStore.open()
    runs = []
    for rank, (host, text) in enumerate(zip(("la", "lb"), logs, strict=True)):
        d = tmp_path / f"run{rank}"
        d.mkdir()
        (d / "server.log").write_bytes(text)
        meta = {"group_id": "g1234567", "node_rank": rank, "nnodes": 2, "nodes": ["la", "lb"]}
        rec = RunRecord(f"r{rank}", host, "p", 30000, str(d), meta=meta, created_at=time.time())
        rec.host_config = get_host(host).model_dump(mode="json")  # as a launch records it
        store.add_run(rec)
        runs.append(store.get_run(rec.run_id))
    return runs


def test_group_logs_prefix_every_line_with_its_node_and_last_n_per_node(tmp_path):
    runs = _group(tmp_path, [b"a1\na2\na3\n", b"b1\nb2 [/red] half"])
    assert node_prefix(runs[1]) == "[node1 lb] "
    assert GroupLogs(runs).initial(2) == [
        "[node0 la] a2",
        "[node0 la] a3",
        "[node1 lb] b1",
        "[node1 lb] b2 [/red] half",
    ]
    assert GroupLogs(runs).initial(0) == []


def test_following_a_group_ends_when_every_node_has_ended(tmp_path):
    runs = _group(tmp_path, [b"a1\n", b"b1\nb2 unterminated"])
    notes: list[str] = []
    logs = GroupLogs(runs, notes.append)
    # Following: the unterminated line waits for its end ...
    assert logs.initial(None, follow=True) == ["[node0 la] a1", "[node1 lb] b1"]
    with open(Path(runs[0].run_dir) / "server.log", "ab") as fh:
        fh.write(b"a2 appended\n")
    # ... and comes out whole when its node is seen gone (these runs have no processes).
    assert logs.poll(check_every_s=0) == ["[node0 la] a2 appended", "[node1 lb] b2 unterminated"]
    # Node 0 just had new lines, so it is looked at again before it counts as ended.
    assert not logs.done and logs.ended == [False, True]
    assert logs.poll(check_every_s=0) == [] and logs.done
    assert notes == [
        "[node1 lb] run r1 is no longer running",
        "[node0 la] run r0 is no longer running",
    ]


@pytest.mark.parametrize("extra", [[], ["-n", "5"], ["-f"]])
def test_logs_of_a_run_whose_log_was_deleted_is_one_line_exit_2(tmp_path, capsys, extra):
    runs = _group(tmp_path, [b"a1\n", b""])
    one = RunRecord("r9", "la", "p", 30001, str(tmp_path / "run0"), created_at=time.time())
    one.host_config = runs[0].host_config
    RunStore.open().add_run(one)
    (Path(runs[0].run_dir) / "server.log").unlink()
    assert main(["logs", "r9", *extra]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        f"error: run r9: no log file la:{tmp_path}/run0/server.log (deleted, or the run never "
        "started)"
    ]
    # a group names the node whose log is gone; an empty log (node 1) is no error
    assert main(["logs", "g1234567"]) == 2
    assert f"run r0: no log file la:{tmp_path}/run0/server.log" in capsys.readouterr().err
    assert main(["logs", "r1"]) == 0
    assert capsys.readouterr().out == ""


# -- the sweep loop over a host group ---------------------------------------------------------
class GroupScripted(SweepBackend):
    """Every profile is a two-node group; ``crash`` profiles fail on node 1."""

    def __init__(self, crash=(), interrupt_bench=None) -> None:
        self.crash, self.interrupt_bench = set(crash), interrupt_bench
        self.live: set[str] = set()
        self.calls: list[str] = []

    def prepare(self, profile, opts):
        return profile

    def check(self, spec):
        return None

    def launch(self, spec):
        self.live |= {f"{spec}-n0", f"{spec}-n1"}
        self.calls.append(f"launch {spec}")
        return f"{spec}-n0"

    def group_of(self, run_id):
        p = run_id.removesuffix("-n0")
        return {"group_id": f"g-{p}", "nodes": [
            {"node_rank": i, "host": h, "run_id": f"{p}-n{i}"} for i, h in enumerate(("a", "b"))
        ]}  # fmt: skip

    def watch(self, run_id, opts):
        if run_id.removesuffix("-n0") in self.crash:
            return StepOutcome("CRASHED", {"category": "OOM", "root_cause": "CUDA out of "
                                           "memory", "node_rank": 1, "host": "b"})  # fmt: skip
        return StepOutcome("READY", {"state": "READY"})

    def bench(self, run_id, mode, opts):
        if run_id.removesuffix("-n0") == self.interrupt_bench:
            raise KeyboardInterrupt
        return {"version": 1, "mode": "decode", "levels": [], "decode_tok_s": 40.0}

    def stop(self, run_id):
        p = run_id.removesuffix("-n0")
        self.calls.append(f"stop group {p}")
        self.live -= {f"{p}-n0", f"{p}-n1"}


def test_group_sweep_records_the_crashing_node_and_ctrl_c_stops_every_node_then_resumes():
    opts = SweepOptions()
    sw = start_sweep(["crashy", "good"], None, True, opts, ["a", "b"])
    be = GroupScripted(crash={"crashy"}, interrupt_bench="good")
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sw, opts, be)
    assert not be.live and be.calls[-1] == "stop group good"
    saved = load_sweep(sw.sweep_id)
    assert saved.nodes == ["a", "b"]
    assert [e.status for e in saved.entries] == [CRASHED, INTERRUPTED]
    crashed = saved.entries[0]
    assert (crashed.run_id, crashed.group_id) == ("crashy-n0", "g-crashy")
    assert [n["run_id"] for n in crashed.nodes or []] == ["crashy-n0", "crashy-n1"]
    be2 = GroupScripted(crash={"crashy"})
    run_sweep(saved, resume_options(saved), be2)
    assert be2.calls == ["launch good", "stop group good"] and not be2.live
    rows = {r["profile"]: r for r in sweep_rows(saved)}
    assert rows["crashy"]["diagnosis"] == "node 1 (b): OOM: CUDA out of memory"
    assert (rows["good"]["status"], rows["good"]["nodes"]) == (OK, ["a", "b"])
    md = render_markdown(saved)
    assert "host: nodes a, b" in md
    assert "- **good**: group g-good: node 0 a (run good-n0), node 1 b (run good-n1)" in md


def test_group_summary_lists_nodes_in_rank_order(tmp_path):
    runs = _group(tmp_path, [b"", b""])
    assert group_summary(runs) == {
        "group_id": "g1234567",
        "nnodes": 2,
        "dist_init_addr": None,
        "nodes": [
            {"node_rank": 0, "host": "la", "run_id": "r0"},
            {"node_rank": 1, "host": "lb", "run_id": "r1"},
        ],
    }


# -- data is never rich markup in the lifecycle tables ------------------------------------------
def test_runs_and_status_print_markup_in_profiles_and_root_causes_literally(capsys):
    store = RunStore.open()
    now = time.time()
    store.add_run(
        RunRecord(
            "abc123", "local", "[red]hot", 30000, "/nonexistent/run", state="CRASHED",
            category="CRASH", root_cause="boom [/red] in [bold]worker", created_at=now,
            ended_at=now,
        )
    )  # fmt: skip
    for args in (["runs"], ["status", "--all"]):
        rc = main([*args])
        out = capsys.readouterr()
        assert rc in (0, None), out.err
        assert "[red]hot" in out.out, out.out
    assert "boom [/red] in [bold]worker" in out.out.replace("\n", "")


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--nodes", "a"], "error: --nodes: expected at least 2 host names like a,b, got 'a'"),
        (["--nodes", "a,b", "--host", "a"], "error: give --host or --nodes, not both"),
    ],
)
def test_sweep_nodes_option_errors_are_one_line(capsys, extra, message):
    rc = main(["sweep", "--simulate", "--profiles", "cutlass_mla", *extra])
    assert rc == 2
    assert capsys.readouterr().err.strip() == message
