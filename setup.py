"""Build hook only (all metadata is in pyproject.toml): the wheel carries ``configs/`` (the
shipped profiles and the hosts.yaml template) as package data under
``glmserve/data/configs``, so ``pip install .`` lists the same profiles as a checkout.

``configs/`` stays the one copy in the source tree; an editable install reads it in place
(``glmserve.paths.shipped_configs_dir``), so nothing is copied then.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

CONFIGS = Path(__file__).resolve().parent / "configs"
PACKAGED = Path("glmserve") / "data" / "configs"  # keep in step with glmserve.paths


class BuildPyWithConfigs(build_py):
    """``build_py`` plus a copy of every ``configs/**/*.yaml`` into the built package."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        dest = Path(self.build_lib) / PACKAGED
        for src in sorted(CONFIGS.rglob("*.yaml")):
            target = dest / src.relative_to(CONFIGS)
            self.mkpath(str(target.parent))
            self.copy_file(str(src), str(target))


setup(cmdclass={"build_py": BuildPyWithConfigs})
