"""LaunchSpec: the resolved, I/O-free description of one server launch.

Produced by ``profiles.build_launch_spec`` from a profile; consumed by ``render`` (script,
argv, JSON), ``lifecycle`` (what to upload and start) and the run store (what was run).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from glmserve.errors import ConfigError

SGLANG_MODULE = "sglang.launch_server"
SIMULATOR_MODULE = "glmserve.simulator"
# Env var naming the runtime patches the shipped sitecustomize.py activates in every worker.
PATCHES_ENV = "GLMSERVE_PATCHES"
# Attention backends whose decode kernels exist for SM100-class GPUs (B200/GB200) only: on
# SM120 (RTX PRO 6000) the first decode fails (sources in simulator/faults.py). The simulator
# crashes them off sm100; diagnose says "switch backend", not "rebuild", when they fail.
SM100_ONLY_ATTENTION_BACKENDS = ("trtllm_mla", "cutlass_mla")


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

    def flag_value(self, flag: str) -> str | bool | None:
        """Value of ``--flag`` in argv (True for a bare flag, None if absent)."""
        for i, tok in enumerate(self.argv):
            if tok == flag:
                nxt = self.argv[i + 1] if i + 1 < len(self.argv) else None
                return nxt if nxt is not None and not nxt.startswith("--") else True
            if tok.startswith(flag + "="):
                return tok.split("=", 1)[1]
        return None

    @property
    def port(self) -> int:
        v = self.flag_value("--port")
        if v is None:
            return 30000  # SGLang's default port
        return self._int_flag("--port", v, 1, 65535)

    @property
    def tp_size(self) -> int:
        flag = "--tp-size" if self.flag_value("--tp-size") is not None else "--tp"
        v = self.flag_value(flag)
        return 1 if v is None else self._int_flag(flag, v, 1, 1 << 16)

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
