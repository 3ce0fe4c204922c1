"""Reading the /proc probe (issue 20, item 8): only a whole probe proves anything."""

from __future__ import annotations

import pytest

from glmserve.errors import ProcessUnverified
from glmserve.remote.process import parse_probe, require_verified, verify_ownership
from glmserve.store import RunRecord


def _run() -> RunRecord:
    return RunRecord(
        run_id="r1", host="local", profile="p", port=1, run_dir="/x", pid=100, pgid=100,
        proc_start="5000", boot_id="boot-a",
    )  # fmt: skip


WHOLE = "boot-a\ng 100\n100 S 100 5000\n101 S 100 5100\nend 90\n"


def test_a_whole_probe_is_verified():
    own = verify_ownership(_run(), parse_probe(WHOLE))
    assert own.verified and own.pids == [100, 101] and own.group


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("boot-a\ng 100\n100 S 100 5000\n", "cut off"),  # no end line
        ("", "cut off"),
        ("boot-a\ng 100\nend 0\n", "cut off"),  # no stat read at all: /proc is not there
        ("boot-a\ng 100\n100 S 100 5000\n? 4242\nend 90\n", "/proc/4242/stat"),
    ],
)
def test_a_cut_off_or_unreadable_probe_is_unverified_never_gone(text, why):
    own = verify_ownership(_run(), parse_probe(text))
    assert not own.verified and why in own.reason
    with pytest.raises(
        ProcessUnverified, match=r"could not be verified.*neither stopped nor exited"
    ):
        require_verified(_run(), own)
