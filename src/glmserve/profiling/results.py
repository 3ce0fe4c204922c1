"""What the analysis says of a capture: per-rank kernel and op shares of the decode step.

These are the shapes ``glmserve profile --json`` prints (``TraceAnalysis.to_dict``) and that
``analysis.summarize_analysis`` cuts down for the run store; a field renamed here changes both.
Shares are of the decode step time: the profiled steps' total, the window.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from glmserve.profiling.findings import Finding

ANALYSIS_VERSION = 1


@dataclass
class KernelStat:
    """One GPU kernel name: its time over the profiled steps and who launched it."""

    name: str
    short_name: str
    category: str  # kernel | gpu_memcpy | gpu_memset
    total_us: float
    count: int
    share: float  # of decode step time (total over steps / window)
    launched_by: str  # most common launching op label, "" when unknown
    kind: str  # cast|gemm|attention|norm|allreduce|memcpy_htod|memcpy|elementwise|other


@dataclass
class OpStat:
    """One op (name + dtype label): GPU time of the kernels it launched, or CPU self time."""

    name: str
    label: str  # e.g. "fp8_e4m3 -> bf16 elementwise"
    total_us: float
    count: int
    share: float
    kernels: list[str] = field(default_factory=list)  # short kernel names it launched
    example_dims: list[Any] = field(default_factory=list)  # Input Dims of one call
    cast: tuple[str, str] | None = None  # (src, dst) dtype when the op is a dtype cast


@dataclass
class RankProfile:
    """One rank's decode step: how long it takes, and which kernels and ops fill it."""

    rank: int
    source: str
    steps: int
    step_us: float  # mean decode step time
    window_us: float  # steps * step time: what shares are measured against
    step_source: str  # "ProfilerStep" | "gpu busy span" | "cpu span"
    gpu_busy_us: float
    has_gpu: bool
    kernels: list[KernelStat]
    ops: list[OpStat]
    event_count: int
    label: str = ""  # e.g. "TP-1" or "TP01-DP00": where the rank number came from
    devices: list[int] = field(default_factory=list)  # GPU device ids seen in the kernels
    notes: list[str] = field(default_factory=list)  # what was guessed or left out, and why

    def top_kernels(self, n: int = 10) -> list[KernelStat]:
        return self.kernels[:n]

    def top_ops(self, n: int = 10) -> list[OpStat]:
        return self.ops[:n]


@dataclass
class TraceAnalysis:
    """Every rank of a capture and the findings drawn across them."""

    ranks: list[RankProfile]
    findings: list[Finding]
    version: int = ANALYSIS_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return asdict(self)
