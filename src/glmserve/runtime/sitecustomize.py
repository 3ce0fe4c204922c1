"""glmserve runtime bootstrap, loaded by Python at start-up in every process of a launch.

``glmserve launch`` uploads this directory to ``<run dir>/runtime`` and puts it first on
``PYTHONPATH``, so Python imports this file as ``sitecustomize`` in the launcher and in every
SGLang worker it spawns. It does two things:

1. If ``GLMSERVE_PATCHES`` names patches, arm them (``glmserve_runtime.arm``): an import hook
   patches the target module when it is imported. An unknown name is fatal (exit 3 after
   the FAILED line): a launch that asked for a patch never runs without it.
2. Always: run the ``sitecustomize`` this file shadows (the next one on ``sys.path``), so a
   venv's or distribution's own start-up customisation still happens.

Without ``GLMSERVE_PATCHES`` it changes nothing but (2).
"""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _arm_patches() -> None:
    if not os.environ.get("GLMSERVE_PATCHES", "").strip():
        return
    if _HERE not in sys.path:
        sys.path.insert(0, _HERE)
    import glmserve_runtime

    try:
        glmserve_runtime.arm()
    except glmserve_runtime.PatchError:
        sys.stderr.flush()
        os._exit(3)  # site.py would swallow an exception here and run on unpatched


def _chain_shadowed_sitecustomize() -> None:
    """Find and run the sitecustomize that this one hides (first other one on sys.path)."""
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    if spec.origin and os.path.abspath(spec.origin) == os.path.abspath(__file__):
        return
    alias = "_glmserve_chained_sitecustomize"  # loaders check names: load it under an alias
    spec = importlib.util.spec_from_file_location(
        alias, spec.origin, submodule_search_locations=spec.submodule_search_locations
    )
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # same leniency as site.py gives a failing sitecustomize
        sys.stderr.write(f"Error in chained sitecustomize {spec.origin}: {exc!r}\n")


_arm_patches()
_chain_shadowed_sitecustomize()
