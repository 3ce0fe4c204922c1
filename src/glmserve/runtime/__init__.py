"""What glmserve ships to the GPU host for runtime patches, and where it lives locally.

The directory holding this file *is* the runtime tree: ``sitecustomize.py`` (the bootstrap
Python runs at start-up) and the ``glmserve_runtime`` package (import hook, patches,
kernels). ``launch`` uploads ``runtime_files()`` into ``<run dir>/runtime/`` and the rendered
script puts that directory first on ``PYTHONPATH`` with ``GLMSERVE_PATCHES`` set. Only the
shipped files matter on the host: they import nothing from ``glmserve``.
"""

from __future__ import annotations

from pathlib import Path

# Module names of the shipped tree; everything else in this directory stays local.
_SHIPPED_TOP = ("sitecustomize.py", "glmserve_runtime")


def runtime_root() -> Path:
    """Local directory whose contents are uploaded as ``<run dir>/runtime``."""
    return Path(__file__).resolve().parent


def runtime_files() -> dict[str, bytes]:
    """Relative POSIX path -> file bytes for everything to upload into ``<run dir>/runtime``.

    Python sources only (no ``__pycache__``), in a stable order.
    """
    root = runtime_root()
    files: dict[str, bytes] = {}
    for top in _SHIPPED_TOP:
        path = root / top
        candidates = [path] if path.is_file() else sorted(path.rglob("*.py"))
        for file in candidates:
            if "__pycache__" in file.parts:
                continue
            files[file.relative_to(root).as_posix()] = file.read_bytes()
    return files
