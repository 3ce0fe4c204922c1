"""LaunchSpec: the resolved, I/O-free description of one server launch.

Produced by ``profiles.build_launch_spec`` from a profile; consumed by ``render`` (script,
argv, JSON), ``lifecycle`` (what to upload and start) and the run store (what was run).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from glmserve.config.flags import Flags
from glmserve.errors import ConfigError

SGLANG_MODULE = "sglang.launch_server"
SIMULATOR_MODULE = "glmserve.simulator"
# Env var naming the runtime patches the shipped sitecustomize.py activates in every worker.
PATCHES_ENV = "GLMSERVE_PATCHES"
# Attention backends whose decode kernels exist for SM100-class GPUs (B200/GB200) only: on
# SM120 (RTX PRO 6000) the first decode fails (sources in simulator/faults.py). The simulator
# crashes them off sm100; diagnose says "switch backend", not "rebuild", when they fail.
SM100_ONLY_ATTENTION_BACKENDS = ("trtllm_mla", "cutlass_mla")
# Option strings of one SGLang dest: whichever is written last wins (sglang 0.5.9
# server_args.py:3302-3303 ``--tensor-parallel-size``/``--tp-size``, ``--tp`` being an
# abbreviation argparse expands; :2894-2895 ``--model-path``/``--model``).
TP_SIZE_FLAGS = ("--tp-size", "--tp", "--tensor-parallel-size")
MODEL_FLAGS = ("--model-path", "--model")


@dataclass(frozen=True)
class ArgOrigin:
    """Where one server flag came from, so validation errors can name file, line and key."""

    key: str  # profile key path, e.g. "server.attention-backend"
    file: str  # profile file that set it last ("<--set>" for overrides)
    line: int | None  # 1-based line in that file, when known


@dataclass
class LaunchSpec:
    profile: str
    argv: list[str]  # server flags only: ["--model", "x", "--tp-size", "8", ...]
    env: dict[str, str] = field(default_factory=dict)
    venv: str | None = None  # directory to `source <venv>/bin/activate`
    python: str = "python3"
    launcher: str = "sglang"  # "sglang" | "simulator"
    patches: list[str] = field(default_factory=list)
    sglang_range: str | None = None  # PEP 440 specifier the profile targets, e.g. ">=0.5.8,<0.5.10"
    nodes: list[str] = field(default_factory=list)  # multi-node host group, empty = single node
    origins: dict[str, ArgOrigin] = field(default_factory=dict)  # "--flag" -> origin
    sources: list[str] = field(default_factory=list)  # profile files, base first
    sim_args: list[str] = field(default_factory=list)  # --sim-* flags, only when simulating
    extra: dict[str, Any] = field(default_factory=dict)  # notes, metadata

    @property
    def module(self) -> str:
        return SIMULATOR_MODULE if self.launcher == "simulator" else SGLANG_MODULE

    def command(self) -> list[str]:
        """The full process argv: ``python3 -u -m <module> <flags...>``."""
        sim = self.sim_args if self.launcher == "simulator" else []
        return [self.python, "-u", "-m", self.module, *self.argv, *sim]

    @property
    def flags(self) -> Flags:
        """``argv`` read once with argparse's semantics (``config/flags.py``): every stage
        asks this, none scans ``argv`` itself. Built on each call, as ``argv`` is a list a
        caller may still replace."""
        return Flags.parse(self.argv)

    def flag_value(self, flag: str) -> str | bool | None:
        """Value of ``--flag`` (the last one, as argparse; True for a bare flag, None if
        absent)."""
        return self.flags.get(flag)

    @property
    def port(self) -> int:
        v = self.flags.get("--port")
        if v is None:
            return 30000  # SGLang's default port
        return self._int_flag("--port", v, 1, 65535)

    @property
    def tp_size(self) -> int:
        item = self.flags.last_of(TP_SIZE_FLAGS)
        return 1 if item is None else self._int_flag(str(item.name), item.value, 1, 1 << 16)

    def _int_flag(self, flag: str, value: str | bool, low: int, high: int) -> int:
        """An integer flag glmserve itself needs (where to connect, how many GPUs): a bad one
        is the profile's error, named with its file:line, not a crash later."""
        try:
            number = int(value) if isinstance(value, str) else None
        except ValueError:
            number = None
        if number is None or not low <= number <= high:
            origin = self.origins.get(flag)
            where = f"profile {self.profile}"
            if origin is not None:
                where = f"{origin.file}:{origin.line}" if origin.line else origin.file
                where += f" ({origin.key})"
            raise ConfigError(
                f"{where}: {flag} must be an integer from {low} to {high}, got {value!r}"
            )
        return number

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["command"] = self.command()
        d["origins"] = {k: asdict(v) for k, v in self.origins.items()}
        return d
