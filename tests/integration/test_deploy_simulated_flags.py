"""A simulated launch checks its flags with the host's simulator before anything starts.

Found by a new-user audit (2026-12-02): ``launch --simulate --set sim.bogus=1`` (or
``sim.speed=abc``) started a run that died at once, recorded as CRASHED BAD_ARGS (exit 3),
and ``check --simulate`` showed the flags as "skip". A bad ``--set`` is a usage error: exit 2,
nothing recorded, nothing started.
"""

from __future__ import annotations

import pytest

from glmserve.config.profiles import load_profile, simulate
from glmserve.deploy.deployment import Deployment
from glmserve.deploy.plan import plan_spec
from glmserve.deploy.preflight import check_simulated
from glmserve.errors import ConfigError
from glmserve.remote.hosts import get_host
from glmserve.remote.transport import transport_for
from glmserve.simulator import check_args
from glmserve.store import RunStore


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["sim.bogus=1"], "unknown simulator option --sim-bogus"),
        (["sim.speed=abc"], "argument --sim-speed: invalid float value: 'abc'"),
        (["sim.crash-kind=nope"], "argument --sim-crash-kind: invalid choice: 'nope'"),
        (["server.tp-size=two"], "--tp-size/--tp: invalid int value: 'two'"),
        # audit round 2: argparse's float takes nan/inf; they started (a NaN speed benched
        # at 68,498 tok/s) or died later with a wrong hint
        (["sim.speed=nan"], "--sim-speed: expected a finite number > 0, got nan"),
        (["sim.speed=inf"], "--sim-speed: expected a finite number > 0, got inf"),
        (["sim.load-seconds=-5"], "--sim-load-seconds: expected a finite number >= 0"),
        (["sim.bandwidth-gbps=0"], "--sim-bandwidth-gbps: bad value '0' (bandwidth_gbps: must"),
        (["sim.bandwidth-gbps=nan"], "bandwidth_gbps: expected a finite number >= 0"),
        (["server.mem-fraction-static=nan"], "--mem-fraction-static: expected a finite number"),
    ],
)
def test_bad_simulated_flags_fail_check_and_launch_starts_nothing(sets, needle):
    spec = simulate(load_profile("flashinfer", sets))
    row = check_simulated(transport_for(get_host("local")), spec)
    assert row.status == "fail" and needle in row.detail
    store = RunStore.open()
    with pytest.raises(ConfigError, match="simulator refuses the argv") as exc:
        Deployment.launch(plan_spec(spec, get_host("local")), store=store)
    assert needle in str(exc.value) and "\n" not in str(exc.value)
    assert store.list_runs() == []


def test_good_simulated_flags_pass_the_check():
    spec = simulate(load_profile("flashinfer", ["sim.speed=4", "sim.gpu-arch=sm100"]))
    row = check_simulated(transport_for(get_host("local")), spec)
    assert (row.status, row.detail) == ("ok", "argv accepted by the simulator (simulate)")


def test_check_args_parses_without_starting(capsys):
    assert check_args(["--model-path", "m", "--sim-speed", "2"]) == 0
    assert check_args(["--tp-size", "2"]) == 2
    assert capsys.readouterr().out.splitlines()[-1] == (
        "error: the following arguments are required: --model-path/--model"
    )
