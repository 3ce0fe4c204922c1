"""The search strategies: which configs to run next. ``grid`` runs every config when the budget
holds them all; otherwise ``coordinate`` starts from the profile's own values and, one flag at a
time, tries that flag's other values (in parallel) and moves to the best config found so far,
until a whole pass improves nothing or the budget is spent."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from glmserve.tune import state as st
from glmserve.tune.space import Budget, grid, starting_config


def choose_strategy(n_configs: int, n_loads: int, budget: Budget | None, requested: str) -> str:
    """``grid`` when the whole grid fits the trial budget (or there is no budget), else
    ``coordinate``; a duration budget cannot promise the grid, so it gets ``coordinate``."""
    if requested != "auto":
        return requested
    if budget is None:
        return "grid"
    if budget.trials is not None and budget.trials >= n_configs * n_loads:
        return "grid"
    return "coordinate"


class Search:
    """Drives a strategy over ``tune``; ``evaluate`` runs configs through the pool."""

    def __init__(self, tune: st.Tune, evaluate: Callable[[list[dict[str, str]]], None]) -> None:
        self.tune = tune
        self.evaluate = evaluate
        b = tune.budget or {}
        self.trial_budget: int | None = b.get("trials")
        self.deadline: float | None = (time.time() + b["seconds"]) if b.get("seconds") else None

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.time() >= self.deadline

    def _spent(self) -> int:
        return len(self.tune.trials)

    def affordable(self, configs: list[dict[str, str]]) -> list[dict[str, str]]:
        """The configs (in order) that still fit the trial budget; known ones are free."""
        if self.trial_budget is None:
            return configs
        left = self.trial_budget - self._spent()
        out = []
        for c in configs:
            if self._known(c):
                out.append(c)
            elif left >= len(self.tune.loads):
                out.append(c)
                left -= len(self.tune.loads)
        return out

    def _known(self, config: dict[str, str]) -> bool:
        return self.tune.trial(config, self.tune.loads[0]) is not None

    def run(self, profile_server: dict[str, Any]) -> None:
        if self.tune.strategy == "grid":
            self.evaluate(self.affordable(grid(self.tune.space)))
        else:
            self._coordinate(profile_server)

    def _coordinate(self, profile_server: dict[str, Any]) -> None:
        """Start at the profile's values; each pass runs every one-flag change of the best
        config so far (concurrently: they are independent), then moves to the best config
        found. Ends when a pass improves nothing, or the budget is spent."""
        best = starting_config(self.tune.space, profile_server)
        self.evaluate(self.affordable([best]))
        while not self.out_of_time():
            cands = [
                {**best, k: v} for k, values in self.tune.space for v in values if v != best[k]
            ]
            todo = [c for c in self.affordable(cands) if not self._done(c)]
            if todo:
                self.evaluate(todo)
            new = self._best_config() or best
            if new == best:
                return
            best = new

    def _done(self, config: dict[str, str]) -> bool:
        ts = [self.tune.trial(config, load) for load in self.tune.loads]
        return all(t is not None and t.finished for t in ts)

    def _best_config(self) -> dict[str, str] | None:
        """The config whose best feasible trial has the highest objective."""
        top = st.best_trial(self.tune)
        return dict(top.config) if top is not None else None
