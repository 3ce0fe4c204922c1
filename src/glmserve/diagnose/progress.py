"""What is not progress for stall detection: retry/wait chatter and lines that only repeat an
earlier one apart from their time stamps and rank tags. One rule for the launch watcher's
stall budgets (:mod:`glmserve.deploy.watch`) and offline ``diagnose``'s "last progress"
(:class:`glmserve.diagnose.LogDiagnoser`), so both name the same line."""

from __future__ import annotations

import re

from glmserve.diagnose.normalise import is_progress_line

# Retry and wait chatter: a process repeating that it is still trying, whatever its counters
# say. Texts as written by:
# - torch c10d socket.cpp (strings of libtorch_cpu 2.13: "The client socket has failed to
#   connect to {} {}.", "... cannot be initialized to connect to ...", "... to any network
#   address of ..."); as logged, e.g. "[W427 01:04:16.149509694 socket.cpp:752] [c10d] The
#   client socket has failed to connect to [::ffff:198.18.0.1]:3254 (errno: 110 - Connection
#   timed out)." (gensyn-ai/rl-swarm#197; hpcaitech/Open-Sora#667; pytorch/PiPPy#158);
# - torch distributed_c10d.py _store_based_barrier: "Waiting in store based barrier to
#   initialize process group for %s seconds rank: ...";
# - NCCL src/misc/socket.cc: "%s: connect to %s returned %s, retrying (%d/%ld) after sleep for
#   %u msec" and "Call to accept returned %s, retrying" (older: "Call to connect returned %s,
#   retrying"; retried on ECONNREFUSED/ETIMEDOUT, NVIDIA/nccl#1515).
_CHATTER = re.compile(
    r"\[c10d\] The client socket (?:has failed to connect|cannot be initialized to connect)"
    r"|Waiting in store based barrier to initialize process group"
    r"|\breturned [^,]*, retrying\b"
    r"|\bCall to (?:connect|accept) returned\b",
    re.IGNORECASE,
)
# A line's time and rank decorations: SGLang's "[2026-12-01 08:23:26 TP3] " (also DP/EP/PP
# tags), torch's glog "[rank3]:[W1204 21:30:00.123456789 socket.cpp:752] ", NCCL's
# "host:pid:tid [3] NCCL INFO", a "(pid=123)" Ray prefix; and any time stamp left in the text.
_STAMPS = re.compile(
    r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?"
    r"|\b[IWEF]\d{4} \d\d:\d\d:\d\d(?:\.\d+)?"
    r"|\b\d\d:\d\d:\d\d(?:[.,]\d+)?"
    r"|\b(?:TP|DP|EP|PP|CP|rank)\d+\b"
    r"|^\S+:\d+:\d+ \[\d+\]"
    r"|\(pid=\d+(?:, ip=[^)]*)?\)",
    re.IGNORECASE,
)
_MAX_SEEN = 100_000  # distinct lines remembered; past that the memory starts over


def is_chatter(line: str) -> bool:
    """A retry/wait line (see ``_CHATTER``): never progress, however its counters change."""
    return bool(_CHATTER.search(line))


def line_key(line: str) -> str:
    """``line`` without its time stamps and rank tags: two lines with one key say the same."""
    return " ".join(_STAMPS.sub("", line).split())


class NewLines:
    """Remembers lines by :func:`line_key`: a line is new once."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def new(self, line: str) -> bool:
        key = hash(line_key(line))
        if key in self.seen:
            return False
        if len(self.seen) >= _MAX_SEEN:
            self.seen.clear()
        self.seen.add(key)
        return True


def moves_on(line: str, seen: NewLines) -> bool:
    """Is ``line`` progress by the stall rules: a line the server itself wrote (no HTTP access
    line, no echo of our probes: :func:`is_progress_line`), no retry chatter, and not a repeat
    of a line ``seen`` already holds (a repeat is remembered too)? A phase change is progress
    whatever the line; callers check that first."""
    return is_progress_line(line) and not is_chatter(line) and seen.new(line)
