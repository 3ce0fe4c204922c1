"""Deployments found in the store: what an id names (a run, a group, a node of a group), and
what a single run and a group each answer (node 0, followers, the summary a result keeps)."""

from __future__ import annotations

import pytest

from glmserve.deploy.deployment import Deployment, group_runs
from glmserve.errors import RunNotFound
from glmserve.store import RunRecord, RunStore


def _rec(store: RunStore, rid: str, group: str | None, rank: int = 0) -> None:
    meta = {"group_id": group, "node_rank": rank} if group else {}
    store.add_run(RunRecord(rid, f"h{rank}", "p", 30000, f"/r/{rid}", meta=meta))


def _ids(dep: Deployment) -> list[str]:
    return [r.run_id for r in dep.runs]


def test_group_lookup_by_group_id_prefix_or_a_node_run():
    store = RunStore.open()
    _rec(store, "aaaa0001", "g1234567", 1)
    _rec(store, "aaaa0002", "g1234567", 0)
    _rec(store, "bbbb0001", None)
    _rec(store, "cccc0001", "g1299999", 0)
    assert [r.run_id for r in group_runs(store, "g1234567")] == ["aaaa0002", "aaaa0001"]
    assert _ids(Deployment.resolve(store, "g1234")) == ["aaaa0002", "aaaa0001"]
    assert _ids(Deployment.resolve(store, "aaaa0001")) == ["aaaa0002", "aaaa0001"]
    assert _ids(Deployment.resolve(store, "bbbb")) == ["bbbb0001"]
    with pytest.raises(RunNotFound, match="ambiguous"):
        Deployment.resolve(store, "g12")
    with pytest.raises(RunNotFound):
        Deployment.resolve(store, "g7777777")


def test_a_single_run_is_a_deployment_of_one():
    store = RunStore.open()
    _rec(store, "bbbb0001", None)
    dep = Deployment.resolve(store, "bbbb")
    assert not dep.grouped and dep.group_id is None and dep.id == "bbbb0001"
    assert dep.head.run_id == "bbbb0001" and dep.followers == []
    assert dep.named is not None and dep.named.run_id == "bbbb0001"
    assert dep.summary() is None


def test_a_group_id_names_the_group_and_a_node_run_id_names_its_node_within_it():
    store = RunStore.open()
    _rec(store, "aaaa0001", "g1234567", 1)
    _rec(store, "aaaa0002", "g1234567", 0)
    by_group = Deployment.resolve(store, "g1234567")
    assert by_group.grouped and by_group.id == "g1234567" and by_group.named is None
    assert by_group.head.run_id == "aaaa0002"
    assert [r.run_id for r in by_group.followers] == ["aaaa0001"]
    by_node = Deployment.resolve(store, "aaaa0001")  # node 1: the whole group, node 1 named
    assert by_node.id == "g1234567" and by_node.named is not None
    assert by_node.named.run_id == "aaaa0001" and by_node.head.run_id == "aaaa0002"
    summary = by_node.summary()
    assert summary is not None and summary["group_id"] == "g1234567"
    assert [(n["node_rank"], n["run_id"]) for n in summary["nodes"]] == [
        (0, "aaaa0002"),
        (1, "aaaa0001"),
    ]


def test_a_group_without_its_node0_cannot_serve():
    store = RunStore.open()
    _rec(store, "dddd0001", "g7654321", 1)
    _rec(store, "dddd0002", "g7654321", 2)
    dep = Deployment.resolve(store, "g7654321")
    with pytest.raises(RunNotFound, match="group g7654321 has no node 0 run recorded"):
        _ = dep.head


def test_an_id_is_never_read_as_a_group_unless_it_starts_with_g():
    store = RunStore.open()
    _rec(store, "abcd0001", None)
    with pytest.raises(RunNotFound, match="no run 'g'"):
        Deployment.resolve(store, "g")  # no group at all: read as a run id, not found
    with pytest.raises(RunNotFound):
        Deployment.resolve(store, "1234")
