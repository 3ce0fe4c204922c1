"""glmserve's server-side runtime: patches applied inside SGLang's worker processes.

Shipped by ``glmserve launch`` into ``<run dir>/runtime/`` on the GPU host and put first on
``PYTHONPATH``; the ``sitecustomize.py`` beside this package calls :func:`arm` in every Python
process when ``GLMSERVE_PATCHES`` names patches. Why an import hook: SGLang starts its
scheduler/TP workers with multiprocessing *spawn*, so a monkeypatch in the launching process
never reaches them, while ``sitecustomize`` runs in each of them (PYTHONPATH is inherited).

Log contract (glmserve's log classifier and the simulator rely on these exact lines)::

    glmserve runtime: patches armed: <names> (pid N)            # every process, at start
    glmserve patch <name> active (sglang X, pid N)              # each process that imports
                                                                # the patched module
    glmserve patch <name> FAILED: <reason>                      # then the process dies

A patch that cannot apply never lets the process run on unpatched: the import of the target
module raises :class:`PatchError`, which kills the SGLang worker (CRASHED(PATCH_FAILED)).
This package must import without torch or sglang (it is armed in every process).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

PATCHES_ENV = "GLMSERVE_PATCHES"

# patch name -> module (relative to this package) defining TARGET and apply(module) -> str
KNOWN_PATCHES: dict[str, str] = {
    "flashinfer_mla_gather_cast": ".patches.flashinfer_mla_gather_cast",
    "mla_fp8_decode": ".patches.mla_fp8_decode",
}


class PatchError(RuntimeError):
    """A patch refused to apply; ``str()`` is the exact FAILED log line."""

    def __init__(self, patch: str, reason: str) -> None:
        super().__init__(f"glmserve patch {patch} FAILED: {reason}")
        self.patch = patch
        self.reason = reason


def log(line: str) -> None:
    """One line to stderr, flushed (SGLang workers' stderr goes to the server log)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def fail(patch: str, reason: str) -> PatchError:
    """Log the FAILED line now (before any traceback) and return the error to raise."""
    err = PatchError(patch, reason)
    log(str(err))
    return err


def parse_patch_names(value: str | None) -> list[str]:
    """``"a, b,,a"`` -> ``["a", "b"]`` (order kept, duplicates and blanks dropped)."""
    names: list[str] = []
    for raw in (value or "").split(","):
        name = raw.strip()
        if name and name not in names:
            names.append(name)
    return names


def _patch_module(name: str) -> ModuleType:
    return importlib.import_module(KNOWN_PATCHES[name], package=__name__)


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then applies the patches registered for the module."""

    def __init__(self, inner: Any, patches: Sequence[str]) -> None:
        self._inner = inner
        self._patches = list(patches)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        # Keep tools that ask the module's loader for source (inspect, linecache) working.
        module.__loader__ = self._inner
        if module.__spec__ is not None:
            module.__spec__.loader = self._inner
        for name in self._patches:
            apply_patch(name, module)

    def __getattr__(self, attr: str) -> Any:  # get_source, get_filename, is_package, ...
        return getattr(self._inner, attr)


class PatchFinder(importlib.abc.MetaPathFinder):
    """Meta-path hook: when a target module is imported, wrap its loader to patch it."""

    def __init__(self, targets: dict[str, list[str]]) -> None:
        self.targets = targets  # module name -> patch names
        self._busy = threading.local()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        patches = self.targets.get(fullname)
        if not patches or getattr(self._busy, "active", False):
            return None
        self._busy.active = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.active = False
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _PatchingLoader(spec.loader, patches)
        return spec


# (patch name, module name) -> sglang version it was applied for
_applied: dict[tuple[str, str], str] = {}
_finder: PatchFinder | None = None


def patch_targets(name: str) -> tuple[str, ...]:
    """The modules patch ``name`` patches: its ``TARGETS`` (a patch that changes several
    SGLang backends, e.g. mla_fp8_decode: triton and flashinfer MLA), else its ``TARGET``."""
    mod = _patch_module(name)
    return tuple(getattr(mod, "TARGETS", None) or (mod.TARGET,))


def apply_patch(name: str, module: ModuleType) -> str:
    """Apply patch ``name`` to the freshly imported ``module``; log active or FAILED."""
    key = (name, module.__name__)
    if key in _applied:
        return _applied[key]
    try:
        version = _patch_module(name).apply(module)
    except PatchError:
        raise  # already logged by fail()
    except Exception as exc:  # any surprise is a refusal too, never a silent skip
        raise fail(name, f"{type(exc).__name__}: {exc}") from exc
    _applied[key] = version
    log(f"glmserve patch {name} active (sglang {version}, pid {os.getpid()})")
    return version


def arm(value: str | None = None) -> list[str]:
    """Install the import hook for the patches named in ``value`` (default: the env var).

    Raises PatchError (after logging FAILED) for an unknown patch name. Targets that are
    already imported are patched at once; the others when they are first imported.
    """
    global _finder
    names = parse_patch_names(os.environ.get(PATCHES_ENV) if value is None else value)
    if not names:
        return []
    for name in names:
        if name not in KNOWN_PATCHES:
            known = ", ".join(sorted(KNOWN_PATCHES))
            raise fail(name, f"unknown patch (known: {known}); check {PATCHES_ENV}")
    targets: dict[str, list[str]] = {}
    for name in names:
        for target in patch_targets(name):
            targets.setdefault(target, []).append(name)
    if _finder is None:
        _finder = PatchFinder(targets)
        sys.meta_path.insert(0, _finder)
    else:
        for mod, pats in targets.items():
            current = _finder.targets.setdefault(mod, [])
            current.extend(p for p in pats if p not in current)
    log(f"glmserve runtime: patches armed: {','.join(names)} (pid {os.getpid()})")
    for mod_name, pats in targets.items():
        already = sys.modules.get(mod_name)
        if already is not None:
            for name in pats:
                apply_patch(name, already)
    return names


def applied_patches() -> dict[str, str]:
    """Patches applied in this process (name -> sglang version)."""
    return {name: version for (name, _module), version in _applied.items()}
