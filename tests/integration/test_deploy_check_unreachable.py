"""``glmserve check`` over a host group with one node unreachable: every reachable node is
checked in full, then exit 5 names the unreachable one.

Integration, not unit: it runs the real OpenSSH client against a closed port.
"""

from __future__ import annotations

import os
from pathlib import Path

from glmserve.cli import main


def test_group_check_shows_every_reachable_node_then_exits_5_naming_the_unreachable(capsys):
    import json

    from glmserve.remote.transport import free_local_port

    closed = free_local_port()  # nothing listens there: ssh is refused at once
    cfg = Path(os.environ["GLMSERVE_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "hosts.yaml").write_text(
        "hosts:\n  la:\n    workdir: /tmp\n  dead:\n    target: 127.0.0.1\n"
        f"    port: {closed}\n    ssh_config: /dev/null\n    connect_timeout: 3\n"
    )
    rc = main(["check", "--profile", "trtllm_mla", "--nodes", "la,dead", "--simulate", "--json"])
    out = capsys.readouterr()
    assert rc == 5, out.err
    assert out.err.strip().splitlines()[-1] == "error: unreachable: dead"
    rows = {(r["host"], r["check"]): r for r in json.loads(out.out)["rows"]}
    assert rows[("dead", "reachable")]["status"] == "fail"
    assert "Connection refused" in rows[("dead", "reachable")]["detail"]
    assert [c for h, c in rows if h == "dead"] == ["reachable"]  # nothing else was asked
    assert rows[("la", "port")]["status"] == "ok"  # the reachable node was checked in full
    assert rows[(None, "same sglang")]["status"] == "skip"
    assert "not checked on dead" in rows[(None, "same sglang")]["detail"]
