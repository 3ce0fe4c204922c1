"""Multi-node: per-node argv (pure), group lookup in the store, the simulator's node options."""

from __future__ import annotations

import pytest

from glmserve.config.spec import ArgOrigin, LaunchSpec
from glmserve.deploy.group import (
    drop_flags,
    format_addr,
    group_runs,
    node_specs,
    resolve_runs,
    ssh_hostname,
)
from glmserve.errors import ConfigError, RunNotFound
from glmserve.store import RunRecord, RunStore


def spec(*argv: str, nodes: tuple[str, ...] = ("a", "b"), **kw: object) -> LaunchSpec:
    base = ["--model-path", "m", "--tp-size", "8", "--port", "30000"]
    return LaunchSpec(profile="p", argv=[*base, *argv], nodes=list(nodes), **kw)  # type: ignore[arg-type]


def flags(s: LaunchSpec) -> tuple[object, object, object]:
    return s.flag_value("--nnodes"), s.flag_value("--node-rank"), s.flag_value("--dist-init-addr")


def test_node_specs_add_rank_flags_and_node0_address_with_port_offset():
    out = node_specs(spec("--kv-cache-dtype", "fp8_e4m3"), ["10.0.0.5", "10.0.0.6"])
    assert [flags(s) for s in out] == [
        ("2", "0", "10.0.0.5:31000"),
        ("2", "1", "10.0.0.5:31000"),
    ]
    # Everything else is unchanged and in order; the input is not mutated.
    assert out[1].argv[:8] == spec("--kv-cache-dtype", "fp8_e4m3").argv
    assert [s.extra["node_rank"] for s in out] == [0, 1]


def test_node_specs_keep_explicit_dist_init_addr_and_matching_nnodes():
    s = spec("--nnodes", "2", "--dist-init-addr=head:5000")
    out = node_specs(s, ["ignored", ""])
    assert [flags(x) for x in out] == [("2", "0", "head:5000"), ("2", "1", "head:5000")]
    assert all(x.argv.count("--nnodes") == 1 for x in out)
    assert not any(t.startswith("--dist-init-addr=") for t in out[0].argv)
    # The legacy option string is the same option: kept, not duplicated.
    legacy = node_specs(spec("--nccl-init-addr", "h2:7000"), ["x", "y"])
    assert flags(legacy[1])[2] == "h2:7000" and "--nccl-init-addr" not in legacy[1].argv


def test_node_specs_three_nodes_ipv6_head():
    s = LaunchSpec(profile="p", argv=["--model-path", "m", "--tp", "6"], nodes=["a", "b", "c"])
    out = node_specs(s, ["fe80::1", "", ""])
    assert [flags(x) for x in out] == [("3", str(i), "[fe80::1]:31000") for i in range(3)]


def test_node_specs_errors_name_the_profile_key():
    origin = {"--node-rank": ArgOrigin("server.node-rank", "/p/x.yaml", 7)}
    with pytest.raises(ConfigError, match=r"/p/x\.yaml:7: server\.node-rank.*per node"):
        node_specs(spec("--node-rank", "1", origins=origin), ["a", "b"])
    with pytest.raises(ConfigError, match=r"--nnodes 4 but .* 2 nodes"):
        node_specs(spec("--nnodes", "4"), ["a", "b"])
    with pytest.raises(ConfigError, match="does not split over 3 nodes"):
        node_specs(spec(nodes=("a", "b", "c")), ["a", "b", "c"])
    with pytest.raises(ConfigError, match="at least 2 nodes"):
        node_specs(spec(nodes=("a",)), ["a"])
    with pytest.raises(ConfigError, match="twice"):
        node_specs(spec(nodes=("a", "a")), ["a", "a"])


def test_drop_flags_forms():
    argv = ["--a", "1", "--nnodes=2", "--b", "--node-rank", "0", "--c", "x"]
    assert drop_flags(argv, ("--nnodes", "--node-rank", "--b")) == ["--a", "1", "--c", "x"]
    assert format_addr("10.1.2.3", 5) == "10.1.2.3:5"
    assert format_addr("[::1]", 5) == "[::1]:5"


def test_ssh_hostname_from_ssh_g_output():
    assert ssh_hostname("user root\nhostname 10.1.230.174\nport 22\n") == "10.1.230.174"
    assert ssh_hostname("user root\n") is None


def _rec(store: RunStore, rid: str, group: str | None, rank: int = 0) -> None:
    meta = {"group_id": group, "node_rank": rank} if group else {}
    store.add_run(RunRecord(rid, f"h{rank}", "p", 30000, f"/r/{rid}", meta=meta))


def test_group_lookup_by_group_id_prefix_or_a_node_run():
    store = RunStore.open()
    _rec(store, "aaaa0001", "g1234567", 1)
    _rec(store, "aaaa0002", "g1234567", 0)
    _rec(store, "bbbb0001", None)
    _rec(store, "cccc0001", "g1299999", 0)
    assert [r.run_id for r in group_runs(store, "g1234567")] == ["aaaa0002", "aaaa0001"]
    assert [r.run_id for r in resolve_runs(store, "g1234")] == ["aaaa0002", "aaaa0001"]
    assert [r.run_id for r in resolve_runs(store, "aaaa0001")] == ["aaaa0002", "aaaa0001"]
    assert [r.run_id for r in resolve_runs(store, "bbbb")] == ["bbbb0001"]
    with pytest.raises(RunNotFound, match="ambiguous"):
        resolve_runs(store, "g12")
    with pytest.raises(RunNotFound):
        resolve_runs(store, "g7777777")


def test_simulator_node_options_and_fault_targeting():
    from glmserve.simulator.options import parse

    base = ["--model-path", "m", "--tp", "8", "--nnodes", "2", "--dist-init-addr", "h:1"]
    fault = ["--sim-crash-at", "kv", "--sim-fault-node-rank", "1"]
    on1 = parse([*base, "--node-rank", "1", *fault])
    on0 = parse([*base, "--node-rank", "0", *fault])
    assert (on1.server.nnodes, on1.server.node_rank, on1.server.dist_init_addr) == (2, 1, "h:1")
    assert (on1.crash_at, on1.crash_kind) == ("kv", "oom")
    assert (on0.crash_at, on0.crash_kind) == (None, None)
    assert on0.unknown == []


def test_simulator_follower_ranks():
    from glmserve.simulator.options import parse
    from glmserve.simulator.server import SimServer

    s = SimServer(parse(["--model-path", "m", "--tp", "8", "--nnodes", "2", "--node-rank", "1"]))
    assert s.ranks == [4, 5, 6, 7]
    assert SimServer(parse(["--model-path", "m", "--tp", "8"])).ranks == list(range(8))
