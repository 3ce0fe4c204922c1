"""Planning: a single host is a group of one, a host group's per-node argv (pure), the rules
for --host / --nodes / a profile's ``nodes:``, and the simulator's node options."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from glmserve.config.spec import ArgOrigin, LaunchSpec
from glmserve.deploy.plan import (
    drop_flags,
    format_addr,
    node_specs,
    parse_nodes,
    plan,
    plan_spec,
    ssh_hostname,
)
from glmserve.errors import ConfigError


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


# -- the planner: a single host is a group of one ------------------------------------------------
def _hosts(text: str = "hosts:\n  la:\n    workdir: /tmp/a\n  lb:\n    workdir: /tmp/b\n") -> None:
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "hosts.yaml").write_text(text)


def _two_node_profile() -> None:
    prof = Path(os.environ["GLMSERVE_CONFIG_DIR"]) / "profiles"
    prof.mkdir(parents=True, exist_ok=True)
    (prof / "two-node.yaml").write_text("extends: trtllm_mla\nnodes: [la, lb]\n")


def _no_address(_host: object) -> str:
    raise AssertionError("a single host needs no rendezvous address")


def test_a_single_host_is_a_group_of_one_with_the_hosts_own_python():
    _hosts("hosts:\n  la:\n    workdir: /tmp/a\n    venv: /opt/sgl\n")
    p = plan("trtllm_mla", host="la", overrides=["server.port=30123"], address=_no_address)
    assert not p.grouped and p.names == ["la"] and p.dist_init_addr is None
    (node,) = p.nodes
    assert (node.rank, node.host.name, node.spec.port) == (0, "la", 30123)
    assert node.spec.venv == "/opt/sgl" and p.spec.venv != "/opt/sgl"  # the host's, per node
    assert node.spec.argv == p.spec.argv and node.spec.flag_value("--node-rank") is None
    assert plan("trtllm_mla").names == ["local"]  # no --host: this machine


def test_a_group_plan_gives_each_node_its_rank_flags_and_node0s_address():
    _hosts()
    p = plan(
        "trtllm_mla",
        nodes=["la", "lb"],
        overrides=["server.port=30000"],
        address=lambda h: f"{h.name}.example",
    )
    assert p.grouped and p.names == ["la", "lb"] and p.spec.nodes == ["la", "lb"]
    assert p.dist_init_addr == "la.example:31000"
    assert [flags(n.spec) for n in p.nodes] == [
        ("2", "0", "la.example:31000"),
        ("2", "1", "la.example:31000"),
    ]
    assert [n.host.resolved_workdir for n in p.nodes] == ["/tmp/a", "/tmp/b"]


def test_the_profiles_nodes_are_used_without_host_and_refused_with_host():
    _hosts()
    _two_node_profile()
    assert plan("two-node", address=lambda h: "10.0.0.1").names == ["la", "lb"]
    with pytest.raises(ConfigError, match=r"targets nodes la, lb; drop --host \(or pass --nodes\)"):
        plan("two-node", host="la")
    # The sweep's --host is only a default: a profile that names its nodes runs on them.
    assert plan("two-node", host="la", host_is_default=True, address=str).names == ["la", "lb"]
    # --nodes beats the profile's nodes.
    assert plan("two-node", nodes=["lb", "la"], address=str).names == ["lb", "la"]


def test_host_and_nodes_rules_and_their_messages():
    _hosts()
    with pytest.raises(ConfigError, match=r"^give --host or --nodes, not both$"):
        plan("trtllm_mla", host="la", nodes=["la", "lb"])
    with pytest.raises(ConfigError, match="at least 2 nodes, got 1"):
        plan("trtllm_mla", nodes=["la"])
    assert parse_nodes(None) is None and parse_nodes(" la, lb ") == ["la", "lb"]
    with pytest.raises(ConfigError, match=r"^--nodes: an empty list \(expected a comma list"):
        parse_nodes("")
    for bad in (" , ", " la, lb ,"):  # an empty item is refused, not dropped (commalist)
        with pytest.raises(ConfigError, match=f"^--nodes: an empty item in {bad!r}"):
            parse_nodes(bad)


def test_the_simulator_runs_on_node0s_python_and_the_spec_plans_like_the_profile():
    _hosts("hosts:\n  la:\n    workdir: /tmp/a\n  lb:\n    workdir: /tmp/b\n    python: /x/py\n")
    p = plan("trtllm_mla", nodes=["la", "lb"], simulate=True, address=str)
    assert {n.spec.launcher for n in p.nodes} == {"simulator"}
    assert p.nodes[0].spec.python == p.nodes[1].spec.python  # local node 0: this interpreter
    assert plan_spec(p.spec, address=str).names == p.names  # a loaded spec plans the same
