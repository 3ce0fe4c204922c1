"""bash's own error in the launch script is the root cause (issue 20 #9).

The real script is tested end to end in tests/integration/test_deploy_launch_script_fails.py;
these pin the line shapes bash prints (``<script>: line N: <what>: <why>``).
"""

from __future__ import annotations

import pytest

from glmserve.diagnose import Category, State, diagnose_text


@pytest.mark.parametrize(
    ("log", "in_hint"),
    [
        ("launch.sh: line 6: /srv/venv/bin/activate: No such file or directory", "`venv:`"),
        ("launch.sh: line 10: exec: pythn3: not found", "`python:`"),
        ("/runs/r1/launch.sh: line 10: /etc/passwd: Permission denied", "`python:`"),
        ("launch.sh: line 8: CUDA_HOME: unbound variable", "failed before SGLang started"),
    ],
)
def test_bash_error_in_launch_script_is_launch_failed(log, in_hint):
    d = diagnose_text(log + "\n")
    assert (d.state, d.category, d.line) == (State.CRASHED, Category.LAUNCH_FAILED, 1)
    assert d.root_cause == log
    assert in_hint in d.hint and "glmserve check" in d.hint and "--simulate" in d.hint
    assert d.sglang_log  # `diagnose` does not refuse it as "not an SGLang server log"


def test_a_script_error_after_ready_is_not_a_crash_by_itself():
    log = (
        "[2026-01-01 10:00:00] The server is fired up and ready to roll!\n"
        "hook.sh: line 3: foo: command not found\n"
    )
    assert diagnose_text(log).state is State.READY
