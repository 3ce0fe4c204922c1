"""GPU telemetry over the real ssh transport (the sshd fixture): the sampler starts the
stand-in nvidia-smi loop on the "remote" host, reads its lines per level window, and stops it
by its process group; a remote without nvidia-smi gives a note."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from glmserve.bench.gpu_telemetry import GpuSampler, LevelGpu
from glmserve.remote.hosts import get_host
from glmserve.remote.transport import SshTransport

FAKE_SMI = Path(__file__).resolve().parents[1] / "fixtures" / "bin" / "nvidia-smi"

pytestmark = [pytest.mark.sshd, pytest.mark.slow]


def test_sampler_over_ssh_reads_and_stops(ssh_host):
    t = SshTransport(get_host(ssh_host))
    s = GpuSampler(t, command=str(FAKE_SMI)).start()
    assert s.pid is not None, s.note
    lg = LevelGpu(s)
    with lg:
        time.sleep(1.3)  # the loop prints every 0.5 s: at least two readings per GPU
    doc = lg.doc(output_tokens=620)
    assert doc["power_w_mean"] == pytest.approx(610.0) and len(doc["gpus"]) == 2
    assert all(g["samples"] >= 2 for g in doc["gpus"])
    pid, path = s.pid, s.path
    s.stop()
    # gone or a zombie awaiting its reaper (state Z: it runs no more), temp file removed
    probe = t.run(
        f"s=$(cut -d' ' -f3 /proc/{pid}/stat 2>/dev/null); "
        f'[ -n "$s" ] && [ "$s" != Z ] && echo "alive $s"; test -e {path} && echo file'
    )
    assert probe.stdout.strip() == "", probe.stdout


def test_remote_without_nvidia_smi_is_a_note(ssh_host):
    s = GpuSampler(SshTransport(get_host(ssh_host)), command="nvidia-smi-absent").start()
    assert s.pid is None and "no nvidia-smi" in (s.note or "")


def test_keeper_stops_the_remote_loop_when_the_bench_is_gone(ssh_host):
    """The bench's end of the keeper's pipe closing (what a SIGKILLed bench does) makes the
    keeper stop the loop over ssh: no nvidia-smi left on the remote host."""
    t = SshTransport(get_host(ssh_host))
    s = GpuSampler(t, command=str(FAKE_SMI)).start()
    assert s.pid is not None and s.keeper is not None, s.note
    pid, path, keeper = s.pid, s.path, s.keeper
    s.pid = None  # as if the bench died: it never calls stop()
    keeper.stdin.close()
    keeper.wait(timeout=30)
    probe = t.run(
        f"s=$(cut -d' ' -f3 /proc/{pid}/stat 2>/dev/null); "
        f'[ -n "$s" ] && [ "$s" != Z ] && echo "alive $s"; test -e {path} && echo file'
    )
    assert probe.stdout.strip() == "", probe.stdout
