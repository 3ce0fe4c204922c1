"""The simulator with the mla_fp8_decode patch: active on every rank where the real patch
applies, and killed with the patch's own FAILED line where the real workers would be."""

from __future__ import annotations

import signal

import httpx
from tests.fixtures.simulator import FAST

KILLED = -signal.SIGKILL  # the launcher SIGKILLs its own tree, as after any scheduler crash
MLA = "glmserve patch mla_fp8_decode"
ENV = {"GLMSERVE_PATCHES": "mla_fp8_decode"}


def test_active_on_every_rank_and_the_kernel_term_replaces_triton(start_simulator):
    sim = start_simulator("--tp-size", "8", "--attention-backend", "triton", *FAST, env=ENV)
    log = sim.log_text()
    assert log.count(f"{MLA} active (sglang 0.5.9, pid ") == 8
    cfg = httpx.get(sim.url + "/sim/config").json()
    plain = start_simulator("--attention-backend", "triton", *FAST)
    cfg0 = httpx.get(plain.url + "/sim/config").json()
    ours, theirs = cfg["single_stream_terms_s"], cfg0["single_stream_terms_s"]
    assert 0 < ours["attention"] < theirs["attention"]


def test_an_unsupported_release_is_killed_at_import_with_the_real_line(start_simulator):
    from glmserve.diagnose import Category, diagnose_text

    sim = start_simulator(
        "--tp-size", "8", "--attention-backend", "triton", "--sim-sglang-version", "0.5.16",
        *FAST, env=ENV, wait_ready=False,
    )  # fmt: skip
    assert sim.wait_exit(30) == KILLED
    log = sim.log_text()
    line = f"{MLA} FAILED: unsupported sglang 0.5.16 (supported: 0.5.9, 0.5.23)"
    assert sum(line in ln for ln in log.splitlines()) >= 8, log[-3000:]
    assert f"{MLA} active" not in log
    assert "The server is fired up and ready to roll!" not in log
    assert diagnose_text(log).category is Category.PATCH_FAILED
