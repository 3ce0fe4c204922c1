"""The stored 0.5.23 ``server_args=`` line (tests/data/sglang_lines/server_args_0.5.23.log, which
the unit tests of 0.5.2x log formats read) is what that release's own code prints.

Integration, not unit: it runs SGLang 0.5.23's source (downloaded once, then cached) with the
light packages it imports (``.ci/sglang-cpu-deps.txt``), which a venv with only ``.[test]`` lacks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from glmserve.diagnose import diagnose_text

DATA = Path(__file__).resolve().parents[1] / "data" / "sglang_lines"
ARGS_0523 = next(
    ln for ln in (DATA / "server_args_0.5.23.log").read_text().splitlines() if ln.startswith("[")
)


@pytest.mark.sglang
def test_stored_server_args_line_is_what_the_release_prints(tmp_path: Path) -> None:
    """Regenerate the stored line with sglang 0.5.23's own code (pure-Python wheel)."""
    from tests.fixtures.sglang_releases import sglang_source

    root = sglang_source("0.5.23")
    script = tmp_path / "print_args.py"
    script.write_text(
        "from sglang.srt.sampling.watermarking.core import redact_watermark_secrets\n"
        "from sglang.srt.server_args import ServerArgs\n"
        "sa = ServerArgs(model_path='zai-org/GLM-5-FP8', tp_size=8, port=30000,\n"
        "                mem_fraction_static=0.9, max_running_requests=64,\n"
        "                cuda_graph_max_bs_decode=64)\n"
        "print('server_args=' + repr(redact_watermark_secrets(sa.resolved_dict())))\n"
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = proc.stdout.strip()
    assert ARGS_0523.split("] ", 1)[1] == printed
    assert diagnose_text("[2026-03-02 10:00:00] " + printed + "\n").tp_size == 8
