"""The host a recorded run is on: the entry it was launched with, and a transport to it."""

from __future__ import annotations

import sys

from glmserve.errors import GlmserveError
from glmserve.remote.host_config import HostConfig
from glmserve.remote.hosts import recorded_host
from glmserve.remote.transport import Transport, transport_for
from glmserve.store import RunRecord


def transport_for_run(run: RunRecord) -> Transport:
    """The transport to the host ``run`` is on: the entry it was launched with (see
    :func:`run_host`)."""
    return transport_for(run_host(run))


_said: set[str] = set()


def run_host(run: RunRecord) -> HostConfig:
    """The host entry ``run`` was launched with (recorded in the store), not whatever
    hosts.yaml says today; when today's entry differs, is gone, or the run predates the
    recording, one line on stderr says so (once per process), and the recorded entry (or,
    for an older run, today's) is used."""
    host, note = recorded_host(run.host, run.host_config, run.run_id)
    if note and note not in _said:
        _said.add(note)
        word = "note" if run.host_config is None else "warning"
        sys.stderr.write(f"{word}: {note}\n")
    return host


def host_note(run: RunRecord) -> str | None:
    """What :func:`run_host` says about ``run``'s host (for ``--json`` output), or None."""
    try:
        return recorded_host(run.host, run.host_config, run.run_id)[1]
    except GlmserveError:
        return None  # no host to act on: the verb's own error says so
