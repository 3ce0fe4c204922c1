"""The ``slurm:`` block of a ``kind: slurm`` host: what ``sbatch`` is asked for.

Every value reaches ``sbatch`` as an ``#SBATCH --key=value`` line of the job script, which
sbatch parses itself (no shell), but a few options make things run or land elsewhere, so the
same trust rules as ssh options hold:

- the named fields (partition, account, qos, gres, time, constraint) and ``sbatch_options``
  are checked for shape: plain words, lists, counts and durations, one line, no spaces,
  quotes, ``$`` or ``;``;
- ``sbatch_options`` is an allow-list; options that run something (``--wrap``,
  ``--prolog``-like hooks, ``--get-user-env``), change who runs it (``--uid``, ``--gid``),
  where its output and files go (``--output``, ``--error``, ``--chdir``, ``--export``: glmserve
  sets those itself) are refused with their own reason;
- ``clusters`` sends the job to another cluster than the login host's own: only the user's
  own hosts.yaml may name one (a project file must not make a job run anywhere but where the
  user named).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

_WORD = r"[A-Za-z0-9_.-]+"
_WORDS = re.compile(rf"^{_WORD}(,{_WORD})*$")
# gres: gpu:8, gpu:a100:4, gpu:h100:8,shard:2
_GRES_ONE = r"[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+){0,2}"
_GRES = re.compile(rf"^{_GRES_ONE}(,{_GRES_ONE})*$")
# time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or UNLIMITED/INFINITE
_TIME = re.compile(r"^(\d{1,7}(:\d{1,2}){0,2}|\d{1,4}-\d{1,2}(:\d{1,2}){0,2}|UNLIMITED|INFINITE)$")
# constraint: features joined by & | , with optional [ ] ( ) and *count
_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.\[\]()&|,*!-]+$")
_UINT = re.compile(r"^\d{1,7}$")
_MEM = re.compile(r"^\d{1,9}[KMGT]?$")

# The extra #SBATCH options a hosts file may set, each with the shape its value must have.
ALLOWED_SBATCH_OPTIONS: dict[str, re.Pattern[str]] = {
    "cpus-per-task": _UINT,
    "cpus-per-gpu": _UINT,
    "exclusive": re.compile(r"^(|user|mcs|topo)$"),
    "exclude": _WORDS,
    "gpus": re.compile(r"^([A-Za-z0-9_.-]+:)?\d{1,5}$"),
    "gpus-per-node": re.compile(r"^([A-Za-z0-9_.-]+:)?\d{1,5}$"),
    "gpus-per-task": re.compile(r"^([A-Za-z0-9_.-]+:)?\d{1,5}$"),
    "hint": re.compile(r"^(compute_bound|memory_bound|multithread|nomultithread)$"),
    "licenses": re.compile(r"^[A-Za-z0-9_.@:-]+(,[A-Za-z0-9_.@:-]+)*$"),
    "mem": _MEM,
    "mem-per-cpu": _MEM,
    "mem-per-gpu": _MEM,
    "nice": re.compile(r"^-?\d{1,5}$"),
    "nodelist": re.compile(r"^[A-Za-z0-9_.,\[\]-]+$"),
    "ntasks-per-node": _UINT,
    "priority": _UINT,
    "reservation": _WORDS,
    "signal": re.compile(r"^(R:|B:)?[A-Z0-9]{1,8}(@\d{1,5})?$"),
    "switches": re.compile(r"^\d{1,4}(@\d{1,7}(:\d{1,2}){0,2})?$"),
    "time-min": _TIME,
    "tmp": _MEM,
    "wckey": _WORDS,
}
# Refused with their own reason: glmserve sets them, or they run/hand over something.
_OWN = {
    "job-name", "output", "error", "chdir", "parsable", "open-mode", "input", "requeue",
    "no-requeue",
}  # fmt: skip
_DANGER = {
    "wrap": "runs a command line of its own",
    "export": "decides the job's environment (glmserve exports the submitting one)",
    "export-file": "reads an environment file",
    "get-user-env": "runs a login shell for the environment",
    "uid": "runs the job as another user",
    "gid": "runs the job as another group",
    "clusters": "sends the job to another cluster; use the slurm.clusters field (your own "
    "hosts.yaml only)",
    "burst-buffer": "stages files by a script",
    "bbf": "stages files by a script",
    "container": "runs an OCI container",
    "mail-user": "mails job events to an address",
    "dependency": "ties the job to other jobs",
    "array": "submits many jobs",
    "nodes": "a multi-node run is the profile's (--set server.nnodes=N), not a host option",
}


def sbatch_option_refusal(key: str, value: str) -> str | None:
    """Why ``key: value`` may not come from a hosts file, or None if it may."""
    if key in _OWN:
        return (
            f"--{key} is set by glmserve itself (job name, server.log, the run folder; "
            "--no-requeue: a lost job is judged, and relaunched by glmserve, not by Slurm)"
        )
    if key in _DANGER:
        return f"--{key} {_DANGER[key]}; it cannot come from a hosts file"
    if key not in ALLOWED_SBATCH_OPTIONS:
        return (
            f"--{key} is not an sbatch option a hosts file may set (allowed: "
            f"{', '.join(sorted(ALLOWED_SBATCH_OPTIONS))})"
        )
    if len(value) > 256 or not ALLOWED_SBATCH_OPTIONS[key].match(value):
        return f"--{key}: {value[:80]!r} is not a value sbatch takes for this option"
    return None


def _shape(v: str | None, pattern: re.Pattern[str], what: str) -> str | None:
    if v is not None and (len(v) > 256 or not pattern.match(v)):
        raise ValueError(f"{v[:80]!r} is not a valid {what}")
    return v


class SlurmOptions(BaseModel):
    """What each job of a ``kind: slurm`` host asks the scheduler for."""

    model_config = ConfigDict(extra="forbid")

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    gres: str | None = Field(None, description="e.g. gpu:8")
    time: str | None = Field(None, description="the job's time limit (sbatch --time)")
    constraint: str | None = None
    clusters: str | None = Field(None, description="sbatch --clusters; user's hosts.yaml only")
    sbatch_options: dict[str, str] = Field(default_factory=dict)
    reach: Literal["auto", "direct", "forward"] = Field(
        "auto",
        description="how glmserve reaches a job's server when login is an ssh target: "
        "direct to the node's address, an ssh forward via the login host, or auto (direct "
        "when the node's address:port answers a TCP connect from here, else the forward)",
    )

    @field_validator("partition", "account", "qos", "clusters", mode="before")
    @classmethod
    def _words(cls, v: Any) -> Any:
        if v is None:
            return v
        return _shape(str(v), _WORDS, "name (letters, digits, . _ -; comma-separated)")

    @field_validator("gres")
    @classmethod
    def _gres(cls, v: str | None) -> str | None:
        return _shape(v, _GRES, "gres (e.g. gpu:8 or gpu:h100:8)")

    @field_validator("time", mode="before")
    @classmethod
    def _time(cls, v: Any) -> Any:
        if v is None:
            return v
        return _shape(str(v), _TIME, "time limit (minutes, HH:MM:SS or D-HH:MM:SS)")

    @field_validator("constraint")
    @classmethod
    def _constraint(cls, v: str | None) -> str | None:
        return _shape(v, _CONSTRAINT, "constraint (features joined by & | ,)")

    @field_validator("sbatch_options", mode="before")
    @classmethod
    def _option_values(cls, v: Any) -> Any:
        """``mem: 64G``, ``cpus-per-task: 8``, ``exclusive: true`` mean "64G", "8", ""."""
        if isinstance(v, dict):
            return {
                str(k).removeprefix("--"): "" if x is True or x is None else str(x)
                for k, x in v.items()
                if x is not False
            }
        return v

    @field_validator("sbatch_options")
    @classmethod
    def _options(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            why = sbatch_option_refusal(key, value)
            if why:
                raise ValueError(why)
        return v

    def header_options(self) -> list[tuple[str, str]]:
        """(option, value) pairs for the job script's ``#SBATCH`` lines ('' = no value)."""
        named = [
            ("partition", self.partition),
            ("account", self.account),
            ("qos", self.qos),
            ("gres", self.gres),
            ("time", self.time),
            ("constraint", self.constraint),
            ("clusters", self.clusters),
        ]
        return [(k, v) for k, v in named if v is not None] + list(self.sbatch_options.items())
