"""What a sweep saves: entries and options as ``sweep.json`` in ``$GLMSERVE_HOME/sweeps/<id>/``.

The file is rewritten atomically after every step and linked to the run store by run ids, so
a sweep interrupted by Ctrl-C (its running server stopped first) continues with ``--resume``:
finished profiles are kept, the interrupted one runs again. A multi-node profile's entry keeps
node 0's run id (where its bench results are stored) plus the group id and every node.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from glmserve.bench.options import DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN, STAGE_REPEAT
from glmserve.errors import ConfigError, RunNotFound
from glmserve.statedir import StateDir, dataclass_from
from glmserve.sweep.options import STAGE_STALL_TIMEOUT, SWEEP_LEVELS

SWEEP_VERSION = 1

# Entry statuses. "ok" = benchmarked; the others carry a diagnosis or an error line.
PENDING = "pending"
RUNNING = "running"
OK = "ok"
CRASHED = "crashed"
STALLED = "stalled"
FAILED = "failed"  # check/launch/bench error that is not a server crash
INTERRUPTED = "interrupted"
SKIPPED = "skipped"  # not run because --until-first-success already succeeded
# Finished entries are kept by --resume; FAILED (a tool error) and INTERRUPTED run again.
FINISHED = frozenset({OK, CRASHED, STALLED, SKIPPED})


@dataclass
class SweepEntry:
    """One profile's outcome in a sweep."""

    profile: str
    status: str = PENDING
    run_id: str | None = None
    diagnosis: dict[str, Any] | None = None  # {state, category, root_cause, hint}
    error: str | None = None
    bench: list[dict[str, Any]] = field(default_factory=list)  # BenchResult dicts
    trace: dict[str, Any] | None = None  # profiler summary (top kernels/ops, findings)
    group_id: str | None = None  # a multi-node profile's group (run_id is its node 0)
    nodes: list[dict[str, Any]] | None = None  # [{node_rank, host, run_id}] of the group
    started_at: float | None = None
    ended_at: float | None = None
    # --probe: the output verdict against the reference (sweep.agreement.judge_all)
    output: dict[str, Any] | None = None
    queued_s: float | None = None  # a Slurm job's wait in the queue (not the profile's time)
    requeued: list[str] = field(default_factory=list)  # jobs the cluster took (NODE_FAIL...)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def decode_result(self) -> dict[str, Any] | None:
        return next((b for b in self.bench if b.get("mode") == "decode"), None)

    def _decode_figure(self, key: str) -> float | None:
        """``key`` of the decode bench, else its p50 at the lowest concurrency level measured
        (the nearest a concurrency-only bench comes to single-stream decode)."""
        d = self.decode_result()
        if d and d.get(key) is not None:
            return float(d[key])
        levels = [lv for b in self.bench for lv in b.get("levels", [])]
        if not levels:
            return None
        low = min(levels, key=lambda lv: lv.get("concurrency", 0))
        v = (low.get(key) or {}).get("p50")
        return float(v) if v is not None else None

    def decode_tok_s(self) -> float | None:
        return self._decode_figure("decode_tok_s")

    def ttft_ms(self) -> float | None:
        return self._decode_figure("ttft_ms")

    def aggregate_tok_s(self) -> dict[int, float]:
        """Output tok/s per concurrency level of the concurrency bench(es)."""
        out: dict[int, float] = {}
        for b in self.bench:
            if b.get("mode") != "concurrency":
                continue
            for lv in b.get("levels", []):
                if lv.get("output_tok_s") is not None:
                    out[int(lv["concurrency"])] = float(lv["output_tok_s"])
        return dict(sorted(out.items()))


@dataclass
class Sweep:
    """A sweep's whole state; ``sweep.json`` is ``to_dict()``."""

    sweep_id: str
    profiles: list[str]
    host: str | None = None
    simulate: bool = False
    nodes: list[str] = field(default_factory=list)  # --nodes: every profile on this group
    bench: list[str] = field(default_factory=lambda: ["decode"])
    options: dict[str, Any] = field(default_factory=dict)
    entries: list[SweepEntry] = field(default_factory=list)
    status: str = RUNNING  # running | done | interrupted | stopped
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    version: int = SWEEP_VERSION

    def entry(self, profile: str) -> SweepEntry:
        for e in self.entries:
            if e.profile == profile:
                return e
        raise KeyError(profile)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        from glmserve.sweep.summary import sweep_rows, winner  # the table reads this state

        d["rows"] = sweep_rows(self)
        d["winner"] = winner(self)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "sweep.json") -> Sweep:
        return SWEEPS.decode(cls, d, where, entries=SweepEntry)


# --------------------------------------------------------------------------- storage


SWEEPS = StateDir(
    noun="sweep",
    id_prefix="sw",
    busy="sweep {ident} is being run by another glmserve process (pid {holder})",
    version=SWEEP_VERSION,
)


def sweep_dir(sweep_id: str) -> Path:
    return SWEEPS.dir(sweep_id)


def list_sweep_ids() -> list[str]:
    return SWEEPS.ids()


def load_sweep(sweep_id: str) -> Sweep:
    found = SWEEPS.read(sweep_id)
    if found is None:
        known = ", ".join(list_sweep_ids()[-5:]) or "none"
        raise RunNotFound(f"unknown sweep {sweep_id!r} (recent: {known})")
    data, where = found
    return Sweep.from_dict(data, where)


_SAVE_LOCK = threading.RLock()


def save_sweep(sweep: Sweep) -> Path:
    """Write sweep.json (atomically: a Ctrl-C mid-write never leaves half a file) and sweep.md."""
    from glmserve.sweep.summary import render_markdown

    with _SAVE_LOCK:  # --max-parallel: the workers share one sweep.json
        sweep.updated_at = time.time()
        return SWEEPS.write(sweep.sweep_id, sweep.to_dict(), render_markdown(sweep))


# --------------------------------------------------------------------------- running


@dataclass
class SweepOptions:
    """How each profile is exercised; stored in sweep.json so ``--resume`` repeats it."""

    bench: list[str] = field(default_factory=lambda: ["decode"])  # decode | concurrency
    # defaults: the options models' (bench.options, sweep.options), declared once there
    concurrency: list[int] = field(default_factory=lambda: positive_ints(SWEEP_LEVELS, "-"))
    input_len: int = DEFAULT_INPUT_LEN
    output_len: int = DEFAULT_OUTPUT_LEN
    num_prompts: int | None = None
    overrides: list[str] = field(default_factory=list)  # --set, applied to every profile
    until_first_success: bool = False
    continue_on_error: bool = False
    capture_steps: int = 0  # >0: torch-profiler capture of that many steps after the bench
    timeout_s: float | None = None  # READY deadline per profile (None: the watcher's default)
    stall_timeout_s: float = STAGE_STALL_TIMEOUT  # bench: a stream silent this long fails
    stall_budgets: list[str] = field(default_factory=list)  # start-up: --stall-budget PHASE=S
    sglang_version: str | None = None
    repeat: int = STAGE_REPEAT  # each bench N times on the server: medians, 95% intervals
    probe: bool = False  # send the probe set after the benches and judge output agreement
    reference: str | None = None  # --reference PROFILE or bench result id (default: first)
    max_excess_nll: float | None = None
    min_greedy_agreement: float | None = None
    max_parallel: int = 1  # Slurm host: profiles' jobs at once (sweep.parallel)

    def check_probe(self, profiles: list[str]) -> None:
        """``--reference`` names one of the sweep's profiles or a stored result id with probe
        outputs; the thresholds are in range (a ConfigError names the flag)."""
        from glmserve.bench.probe import load_reference, thresholds

        thresholds(self.max_excess_nll, self.min_greedy_agreement)
        if not self.probe and (
            self.max_excess_nll is not None or self.min_greedy_agreement is not None
        ):
            raise ConfigError("--max-excess-nll/--min-greedy-agreement need --probe")
        ref = self.reference
        if ref is None:
            return
        if ref.isdigit():
            load_reference(int(ref))
        elif ref not in profiles:
            raise ConfigError(f"--reference {ref}: not one of --profiles {','.join(profiles)}")

    @classmethod
    def from_cli(
        cls, bench: list[str], concurrency: str, stall_budgets: list[str], **values: Any
    ) -> SweepOptions:
        """A new sweep's options from the command line (``bench`` empty: decode only); a
        wrong bench mode, level list or stall budget is a ConfigError naming its flag, raised
        before anything is launched."""
        from glmserve.deploy.stall_budgets import parse_stall_budgets  # lazy: pulls in diagnose

        modes = list(bench) or ["decode"]
        bad = [m for m in modes if m not in ("decode", "concurrency")]
        if bad:
            raise ConfigError(f"--bench: expected decode or concurrency, got {', '.join(bad)}")
        levels = positive_ints(concurrency, "--concurrency")
        parse_stall_budgets(stall_budgets)
        opts = cls(bench=modes, concurrency=levels, stall_budgets=list(stall_budgets), **values)
        if opts.capture_steps < 0:
            raise ConfigError(f"--profile-steps: expected 0 or more, got {opts.capture_steps}")
        opts.check_bench()
        return opts

    def bench_settings(self, mode: str) -> Any:  # -> bench.settings.BenchSettings
        """The bench of ``mode`` every profile gets (``decode``: one stream; ``concurrency``:
        each level), written once for the backend that runs it and the check that refuses it
        before a server is launched."""
        from glmserve.bench.settings import BenchSettings

        return BenchSettings(
            base_url="",
            mode=mode,
            concurrency=[1] if mode == "decode" else list(self.concurrency),
            input_len=self.input_len,
            output_len=self.output_len,
            num_prompts=self.num_prompts,
            stall_timeout=self.stall_timeout_s,
        )

    def check_bench(self) -> None:
        """Refuse (ConfigError naming the flag: ``--output-len``, ``--num-prompts``,
        ``--stall-timeout``...) what the bench would refuse only after a server was launched,
        watched to READY and stopped again: the same checks as ``glmserve bench``."""
        from glmserve.bench.settings import Gates
        from glmserve.bench.validate import validate_settings

        for mode in self.bench:
            validate_settings(self.bench_settings(mode), Gates())


def positive_ints(text: str, flag: str) -> list[int]:
    """``"1,4,16"`` -> ``[1, 4, 16]``: concurrency levels of a sweep or a tune (ConfigError
    naming ``flag`` for anything else)."""
    from glmserve.commalist import comma_list

    items = comma_list(text, flag, "1,4,16")  # "1,,2": a typo, not two levels
    try:
        vals = [int(x) for x in items]
    except ValueError as exc:
        raise ConfigError(f"{flag}: expected comma-separated integers, got {text!r}") from exc
    if not vals or any(v <= 0 for v in vals):
        raise ConfigError(f"{flag}: expected positive integers, got {text!r}")
    return vals


def sweep_lock(sweep_id: str) -> contextlib.AbstractContextManager[None]:
    """One process per sweep: a second ``--resume`` of a running sweep is refused."""
    return SWEEPS.lock(sweep_id)


def start_sweep(
    profiles: list[str],
    host: str | None,
    simulate: bool,
    opts: SweepOptions,
    nodes: list[str] | None = None,
) -> Sweep:
    """A new sweep (saved, nothing run yet); ``nodes``: run every profile on that group."""
    if not profiles:
        raise ConfigError("--profiles: give at least one profile, e.g. flashinfer_gtc,trtllm_mla")
    dupes = {p for p in profiles if profiles.count(p) > 1}
    if dupes:
        raise ConfigError(f"--profiles: listed twice: {', '.join(sorted(dupes))}")
    sweep = Sweep(
        sweep_id=SWEEPS.new_id(),
        profiles=list(profiles),
        host=host,
        simulate=simulate,
        nodes=list(nodes or []),
        bench=list(opts.bench),
        options=asdict(opts),
        entries=[SweepEntry(profile=p) for p in profiles],
    )
    save_sweep(sweep)
    return sweep


def resume_options(sweep: Sweep) -> SweepOptions:
    return dataclass_from(SweepOptions, sweep.options)
