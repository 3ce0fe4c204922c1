"""Output agreement in a sweep: every profile is probed and judged against a reference.

The reference is ``--reference PROFILE`` (one of the sweep's profiles), a stored bench result
id (digits), or by default the first profile that starts and probes. A profile benched after
the reference is judged teacher-forced at bench time (``bench.probe.probe_step``); one benched
before it is judged at the end from the two stored outputs (the agreed-prefix estimate). A
``WRONG_OUTPUT`` profile keeps its figures but gets no speedup and is never the winner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from glmserve.bench.agreement import WRONG_OUTPUT, ProbeOutput, Thresholds, agree, unconfirmed
from glmserve.sweep.state import OK

if TYPE_CHECKING:
    from glmserve.bench.probe import ProbeSpec
    from glmserve.sweep.state import Sweep, SweepEntry, SweepOptions


def entry_probe(entry: SweepEntry) -> dict[str, Any] | None:
    """The probe of the entry's first bench result that has one."""
    return next((b["probe"] for b in entry.bench if b.get("probe")), None)


def _outputs(entry: SweepEntry) -> list[ProbeOutput] | None:
    p = entry_probe(entry)
    if not p or not p.get("outputs"):
        return None
    return [ProbeOutput.from_dict(o) for o in p["outputs"]]


def thresholds_of(opts: SweepOptions) -> Thresholds:
    from glmserve.bench.probe import thresholds

    return thresholds(opts.max_excess_nll, opts.min_greedy_agreement)


def reference_entry(sweep: Sweep, opts: SweepOptions) -> SweepEntry | None:
    """The entry whose outputs are the reference (None: not probed yet, or a stored id)."""
    ref = opts.reference
    if ref is not None and ref.isdigit():
        return None
    for e in sweep.entries:
        if e.status == OK and _outputs(e) is not None and (ref is None or e.profile == ref):
            return e
    return None


def reference_outputs(sweep: Sweep, opts: SweepOptions) -> tuple[Any, list[ProbeOutput] | None]:
    """(name, outputs) of the reference: a profile of the sweep or a stored result."""
    if opts.reference is not None and opts.reference.isdigit():
        from glmserve.bench.probe import load_reference

        return int(opts.reference), load_reference(int(opts.reference))
    e = reference_entry(sweep, opts)
    return (e.profile, _outputs(e)) if e else (opts.reference, None)


def probe_spec_for(sweep: Sweep, entry: SweepEntry, opts: SweepOptions) -> ProbeSpec | None:
    """How ``entry`` is probed: with the reference's outputs when they exist already."""
    if not opts.probe:
        return None
    from glmserve.bench.probe import ProbeSpec

    name, outs = reference_outputs(sweep, opts)
    if name == entry.profile:
        outs = None  # the reference itself: probe only
    return ProbeSpec(outs, name, thresholds_of(opts))


def judge_all(sweep: Sweep, opts: SweepOptions) -> None:
    """Give every probed profile its verdict (``entry.output``); those probed before the
    reference existed are judged from the stored outputs."""
    if not opts.probe:
        return
    name, ref = reference_outputs(sweep, opts)
    for e in sweep.entries:
        probe = entry_probe(e)
        if e.status != OK or probe is None:
            continue
        if e.profile == name and not str(name).isdigit():
            e.output = {"verdict": "reference"}
            continue
        if probe.get("agreement"):
            e.output = probe["agreement"]
        elif probe.get("error"):
            e.output = {"verdict": WRONG_OUTPUT, "reasons": [f"probe failed: {probe['error']}"]}
        elif ref is not None and _outputs(e) is not None:
            a = agree(ref, _outputs(e) or [], None, thresholds_of(opts))
            # agreed-prefix: "agrees" only for identical outputs (bench.agreement.unconfirmed)
            e.output = {**unconfirmed(a.to_dict(), name), "reference": name}
            probe["agreement"] = e.output  # the stored result says so too (report, compare)
        else:
            e.output = {"verdict": None, "note": f"reference {name} has no probe outputs"}


def is_wrong(entry: SweepEntry) -> bool:
    return bool(entry.output) and entry.output.get("verdict") == WRONG_OUTPUT  # type: ignore[union-attr]
