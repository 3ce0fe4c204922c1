"""Create a new tune or reopen a stored one (``glmserve tune``, ``--resume``)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from glmserve.errors import ConfigError
from glmserve.tune import state as st
from glmserve.tune.runner import TuneOptions
from glmserve.tune.search import choose_strategy
from glmserve.tune.space import OBJECTIVES, Budget, grid

STRATEGIES = ("auto", "grid", "coordinate")


def start_tune(
    profile: str,
    space: list[tuple[str, list[str]]],
    loads: list[int],
    objective: str,
    slo: dict[str, float],
    hosts: list[str],
    budget: Budget | None,
    simulate: bool,
    opts: TuneOptions,
    strategy: str = "auto",
) -> tuple[st.Tune, dict[str, Any]]:
    """A new, saved tune (nothing run yet) and the profile's server section (the seed)."""
    from glmserve.config import profiles
    from glmserve.remote.hosts import get_host

    if objective not in OBJECTIVES:
        raise ConfigError(f"--objective {objective!r}: choose from {', '.join(OBJECTIVES)}")
    if strategy not in STRATEGIES:
        raise ConfigError(f"--strategy {strategy!r}: choose from {', '.join(STRATEGIES)}")
    if len(set(hosts)) != len(hosts):
        raise ConfigError("--hosts: a host is listed twice")
    for h in hosts:
        get_host(h)  # unknown host: one line naming hosts.yaml
    opts.check(loads)
    resolved = profiles.resolve_profile(profile, list(opts.overrides))
    if resolved.data.get("nodes"):
        raise ConfigError(f"--profile {profile}: multi-node profiles are not tuned yet")
    server = dict(resolved.data.get("server") or {})
    if server.get("port") is not None:
        opts.base_port = int(server["port"])
    speed = (resolved.data.get("sim") or {}).get("speed")
    if simulate and speed is not None:
        try:
            opts.sim_speed = float(speed)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"sim.speed {speed!r}: not a number") from exc
    if simulate:
        _check_simulated_space(profile, space, opts, hosts)
    chosen = choose_strategy(len(grid(space)), len(loads), budget, strategy)
    if budget is not None and budget.trials is not None and budget.trials < len(loads):
        raise ConfigError(
            f"--budget {budget.trials}: one config costs {len(loads)} trials (one per load)"
        )
    tune = st.Tune(
        tune_id=st.new_tune_id(),
        profile=profile,
        search=[[k, list(v)] for k, v in space],
        loads=list(loads),
        objective=objective,
        slo=dict(slo),
        budget=None if budget is None else asdict(budget),
        hosts=list(hosts),
        simulate=simulate,
        options=asdict(opts),
        strategy=chosen,
    )
    st.save_tune(tune)
    return tune, server


def _check_simulated_space(
    profile: str, space: list[tuple[str, list[str]]], opts: TuneOptions, hosts: list[str]
) -> None:
    """Under ``--simulate`` the host's simulator parses the profile with the overrides before
    the tune exists: a bad ``--set sim.*`` is exit 2 now, not every trial skipped and "no
    trial met the SLOs". A searched value the server refuses stays a trial of its own that
    crashes with BAD_ARGS and its diagnosis, as with a real SGLang."""
    from glmserve.deploy.plan import plan
    from glmserve.sweep.backend import check_simulated_plans

    host = hosts[0] if hosts else None
    check_simulated_plans(
        [plan(profile, host=host, overrides=list(opts.overrides), simulate=True,
              host_is_default=True)]
    )  # fmt: skip


def resume_tune(tune_id: str) -> tuple[st.Tune, dict[str, Any]]:
    from glmserve.config import profiles

    tune = st.load_tune(tune_id)
    tune.lost_hosts = []  # a resume gives every host of the pool another chance
    overrides = list(tune.options.get("overrides", []))
    server = dict(profiles.resolve_profile(tune.profile, overrides).data.get("server") or {})
    return tune, server
