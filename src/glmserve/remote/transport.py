"""Run commands and move bytes on a host: one small interface, a local and an ssh implementation.

``SshTransport`` drives the system OpenSSH client (so ``~/.ssh/config`` aliases, agents, jump
hosts and ``known_hosts`` all behave as the user expects). It never prompts (``BatchMode=yes``),
never weakens host-key checking, and multiplexes every call over one ControlMaster connection so
a watch that polls every second does not pay a TCP+auth handshake per poll. The master is
started explicitly (``-M -N -f``) with its stderr in a file: a ControlPersist master that
inherits a pipe would keep that pipe open and hang the caller. When the master dies (network
drop, killed), the next call notices the missing socket and starts a new one.

Every command returns a :class:`glmserve.errors.Result`; ssh's own failures (exit 255: connect,
auth, host key) become :class:`TransportError` carrying ssh's error line (exit 5).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path

from glmserve.errors import ConfigError, RemoteCommandError, Result, TransportError
from glmserve.paths import glmserve_home
from glmserve.remote.host_config import HostConfig, ssh_option_refusal

READ_CHUNK = 4 * 1024 * 1024  # most bytes one read_from returns
CONTROL_PERSIST_S = 600
SSH_FAILED = 255  # ssh's own exit status for connection/auth failures
# Unix socket paths are limited to ~104-108 bytes; ssh also appends a temp suffix while binding.
MAX_CONTROL_PATH = 90
# ssh tokenizes an -o value (spaces, quotes) and expands '%' tokens and a leading '~' in
# ControlPath: a control path holds only these characters, whatever GLMSERVE_HOME is.
_PLAIN_PATH_RE = re.compile(r"^/[A-Za-z0-9_./-]+$")
# One argv string is limited to 128 KiB (MAX_ARG_STRLEN) on Linux, locally and on the host's
# sshd; a longer command goes over stdin ahead of the command's own input.
ARGV_SCRIPT_MAX = 64 * 1024


def shell_path(path: str) -> str:
    """Quote a path for a remote shell, keeping a leading ``~/`` expandable."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def log_read_script(path: str, offset: int, limit: int) -> str:
    """Shell that prints ``<start> <count>`` then ``count`` bytes of ``path`` from ``start``.

    ``start`` falls back to 0 when the file shrank below ``offset`` (truncated/rotated), so the
    caller re-reads from the top instead of waiting forever past the end.
    """
    f = shell_path(path)
    return (
        f"f={f}; o={int(offset)}; "
        'if [ ! -e "$f" ]; then echo missing; exit 0; fi; '
        's=$(stat -c %s -- "$f"); if [ "$s" -lt "$o" ]; then o=0; fi; '
        f'n=$((s - o)); if [ "$n" -gt {int(limit)} ]; then n={int(limit)}; fi; '
        'echo "$o $n"; if [ "$n" -gt 0 ]; then tail -c +$((o + 1)) -- "$f" | head -c "$n"; fi'
    )


def parse_log_read(out: bytes, offset: int, cmd: str) -> tuple[bytes, int]:
    head, _, body = out.partition(b"\n")
    if head.strip() == b"missing":
        return b"", offset
    try:
        start, count = (int(x) for x in head.split())
    except ValueError as exc:
        raise TransportError(f"unexpected reply reading a log ({cmd[:60]}...): {head!r}") from exc
    body = body[:count]
    return body, start + len(body)


def free_local_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for forwards and tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def argv_safe(cmd: str, stdin: bytes | None) -> tuple[str, bytes]:
    """``(cmd, stdin)`` for ``bash -c``: a command too long for one argv string is sent as the
    first bytes of stdin and read back by ``head -c`` (which reads exactly that many bytes,
    leaving the rest of stdin to the command)."""
    data = stdin if stdin is not None else b""
    script = cmd.encode()
    if len(shlex.quote(cmd)) <= ARGV_SCRIPT_MAX:
        return cmd, data
    return f'eval "$(head -c {len(script)})"', script + data


class Transport(ABC):
    """What lifecycle/watch need from a host. Paths are host paths (``~/`` allowed)."""

    host: HostConfig

    @abstractmethod
    def run_bytes(
        self, cmd: str, timeout: float | None = 60, stdin: bytes | None = None
    ) -> tuple[int, bytes, bytes, float]:
        """Run ``cmd`` in bash on the host; (rc, stdout, stderr, seconds)."""

    def run(
        self,
        cmd: str,
        *,
        check: bool = False,
        timeout: float | None = 60,
        stdin: bytes | None = None,
        what: str = "",
    ) -> Result:
        """Run ``cmd`` in bash; ``check`` raises RemoteCommandError (with stderr) on rc != 0."""
        rc, out, errb, dur = self.run_bytes(cmd, timeout=timeout, stdin=stdin)
        res = Result(
            cmd=cmd,
            rc=rc,
            stdout=out.decode("utf-8", "replace"),
            stderr=errb.decode("utf-8", "replace"),
            duration_s=dur,
            extra={"host": self.host.name},
        )
        if check and not res.ok:
            raise RemoteCommandError(res, what=f"{what or 'command'} on {self.host.name}")
        return res

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` to ``path`` on the host (parent dirs created)."""
        q = shell_path(path)
        cmd = (
            f'mkdir -p -- "$(dirname -- {q})" && cat > {q}.tmp$$ && chmod {mode:o} {q}.tmp$$ '
            f"&& mv -f -- {q}.tmp$$ {q}"
        )
        self.run(cmd, check=True, stdin=data, what=f"upload {path}")

    def put_tree(self, base: str, files: dict[str, bytes], mode: int = 0o644) -> None:
        """Write several files under ``base`` in one round trip (a tar stream on stdin)."""
        import io
        import tarfile

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for rel, data in files.items():
                if rel.startswith("/") or ".." in Path(rel).parts:
                    raise TransportError(f"refusing to upload outside {base}: {rel}")
                info = tarfile.TarInfo(rel)
                info.size, info.mode, info.mtime = len(data), mode, int(time.time())
                tar.addfile(info, io.BytesIO(data))
        q = shell_path(base)
        cmd = f"mkdir -p -- {q} && tar -x -m --no-same-owner -C {q} -f -"
        self.run(cmd, check=True, stdin=buf.getvalue(), what=f"upload {len(files)} files to {base}")

    def read_from(self, path: str, offset: int, limit: int = READ_CHUNK) -> tuple[bytes, int]:
        """New bytes of ``path`` since ``offset`` and the offset after them.

        Missing file: ``(b"", offset)``. File shorter than ``offset`` (truncated): read from 0.
        """
        cmd = log_read_script(path, offset, limit)
        rc, out, errb, _ = self.run_bytes(cmd, timeout=30)
        if rc != 0:
            res = Result(cmd, rc, out.decode("utf-8", "replace"), errb.decode("utf-8", "replace"))
            raise RemoteCommandError(res, what=f"read {path} on {self.host.name}")
        return parse_log_read(out, offset, cmd)

    @abstractmethod
    def forward(
        self, remote_port: int, remote_host: str = "127.0.0.1"
    ) -> contextlib.AbstractContextManager[int]:
        """Context manager: a local port reaching ``remote_host:remote_port`` on the host."""

    @abstractmethod
    def endpoint(
        self, remote_port: int, remote_host: str = "127.0.0.1"
    ) -> contextlib.AbstractContextManager[str]:
        """Context manager: a base URL (``http://H:P``) reaching ``remote_host:remote_port``
        as the host sees it: the address itself here, an ssh forward to it remotely."""


class LocalTransport(Transport):
    """This machine: same commands, no ssh."""

    def __init__(self, host: HostConfig) -> None:
        self.host = host

    def run_bytes(
        self, cmd: str, timeout: float | None = 60, stdin: bytes | None = None
    ) -> tuple[int, bytes, bytes, float]:
        t0 = time.perf_counter()
        script, data = argv_safe(cmd, stdin)
        try:
            p = subprocess.run(
                ["bash", "-c", script],
                input=data,
                capture_output=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raise TransportError(f"local command timed out after {timeout}s: {cmd[:80]}") from exc
        return p.returncode, p.stdout, p.stderr, time.perf_counter() - t0

    def read_from(self, path: str, offset: int, limit: int = READ_CHUNK) -> tuple[bytes, int]:
        p = Path(os.path.expanduser(path))
        try:
            with p.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                start = offset if size >= offset else 0
                f.seek(start)
                data = f.read(min(limit, size - start))
        except FileNotFoundError:
            return b"", offset
        except OSError as exc:
            raise TransportError(f"cannot read {p}: {exc}") from exc
        return data, start + len(data)

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None:
        p = Path(os.path.expanduser(path))
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_name(p.name + f".tmp{os.getpid()}")
            tmp.write_bytes(data)
            tmp.chmod(mode)
            tmp.replace(p)
        except OSError as exc:
            raise TransportError(f"cannot write {p}: {exc}") from exc

    @contextlib.contextmanager
    def forward(self, remote_port: int, remote_host: str = "127.0.0.1") -> Iterator[int]:
        yield remote_port  # connect to remote_host itself: see endpoint()

    @contextlib.contextmanager
    def endpoint(self, remote_port: int, remote_host: str = "127.0.0.1") -> Iterator[str]:
        from glmserve.remote.address import url_host

        yield f"http://{url_host(remote_host)}:{int(remote_port)}"


class SshTransport(Transport):
    """A host reached with the system ``ssh`` over a persistent ControlMaster connection."""

    def __init__(self, host: HostConfig) -> None:
        if host.target is None:
            raise TransportError(f"host {host.name!r} has no ssh target")
        self.host = host
        self.target: str = host.target
        self.control_path = self._control_path()
        self.reconnects = 0  # masters restarted after one died (for watch reports and tests)
        self._had_master = False

    def _control_path(self) -> str:
        """A short hashed socket path of plain characters: ssh neither splits nor expands it
        (GLMSERVE_HOME may hold spaces, quotes or '%'), and it fits the socket-path limit.
        The hash covers every field that changes the connection, and the home, so two hosts
        or two homes never share a master."""
        fields = self.host.model_dump(
            exclude={"source", "workdir", "python", "venv", "address", "project_local_code"}
        )
        key = json.dumps([str(glmserve_home()), fields], sort_keys=True, default=str)
        digest = hashlib.sha256(key.encode()).hexdigest()[:20]
        uid = os.getuid()
        candidates = [
            glmserve_home() / "ssh",
            Path(tempfile.gettempdir()) / f"glmserve-ssh-{uid}",
            Path("/tmp") / f"glmserve-ssh-{uid}",
        ]
        for d in candidates:
            path = str(d / digest)
            if _PLAIN_PATH_RE.match(path) and len(path) <= MAX_CONTROL_PATH and _private_dir(d):
                return path
        raise ConfigError(
            "no private directory for ssh control sockets: tried "
            + ", ".join(str(d) for d in candidates)
            + " (a path of plain characters, short enough for a socket, owned by you)"
        )

    def ssh_base(self, master: str = "no") -> list[str]:
        """The ssh argv up to (not including) the target: options shared by every call."""
        h = self.host
        argv = [ssh_client(h.name)]
        if h.ssh_config:
            argv += ["-F", os.path.expanduser(h.ssh_config)]
        opts = {
            "BatchMode": "yes",
            "ConnectTimeout": str(h.connect_timeout),
            "ControlMaster": master,
            "ControlPath": self.control_path,
            "ServerAliveInterval": "5",
            "ServerAliveCountMax": "3",
            "LogLevel": "ERROR",
        }
        if master == "yes":
            opts["ControlPersist"] = str(CONTROL_PERSIST_S)
        if h.port:
            opts["Port"] = str(h.port)
        if h.identity_file:
            # As written: ssh expands a leading ~ itself, and an expanded $HOME with a space
            # would be split by ssh's -o parser.
            opts["IdentityFile"] = h.identity_file
            opts["IdentitiesOnly"] = "yes"
        if h.jump:
            opts["ProxyJump"] = h.jump
        for k, v in h.ssh_options.items():
            why = ssh_option_refusal(k, str(v))  # checked at load; again for a built HostConfig
            if why:
                raise ConfigError(f"host {h.name}: ssh_options: {why}")
            opts[k] = str(v)
        for k, v in opts.items():
            argv += ["-o", f"{k}={v}"]
        return argv

    # -- the master connection ------------------------------------------------------------
    def _socket_live(self) -> bool:
        """Cheap check (no subprocess) that a master listens on the control socket."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(2)
            s.connect(self.control_path)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def master_alive(self) -> bool:
        if not os.path.exists(self.control_path):
            return False
        p = subprocess.run(
            [*self.ssh_base(), "-O", "check", self.target],
            capture_output=True,
            timeout=10,
        )
        return p.returncode == 0

    def master_pid(self) -> int | None:
        """PID of the running master (``ssh -O check`` says ``Master running (pid=N)``)."""
        if not os.path.exists(self.control_path):
            return None
        p = subprocess.run(
            [*self.ssh_base(), "-O", "check", self.target], capture_output=True, text=True
        )
        text = p.stdout + p.stderr
        if p.returncode == 0 and "pid=" in text:
            return int(text.split("pid=", 1)[1].split(")", 1)[0])
        return None

    def connect(self) -> None:
        """Make sure a master connection is up; TransportError with ssh's error line if not."""
        if self.master_alive():
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.control_path)  # stale socket of a dead master
        errfile = Path(self.control_path + ".err")
        with errfile.open("wb") as ef:
            try:
                p = subprocess.run(
                    [*self.ssh_base("yes"), "-N", "-f", self.target],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=ef,
                    timeout=self.host.connect_timeout + 20,
                )
            except subprocess.TimeoutExpired as exc:
                raise TransportError(f"ssh {self.host.name}: connection timed out") from exc
        if p.returncode != 0:
            _raise_config_error(self.host.name, errfile.read_bytes() if errfile.exists() else b"")
            raise TransportError(f"ssh {self.host.name} ({self.target}): {_ssh_error(errfile)}")
        if self._had_master:
            self.reconnects += 1
        self._had_master = True
        # -f returns once authenticated; the socket appears a moment later.
        deadline = time.monotonic() + 5
        while not os.path.exists(self.control_path) and time.monotonic() < deadline:
            time.sleep(0.02)

    def disconnect(self) -> None:
        """Stop the master (ssh -O exit)."""
        if os.path.exists(self.control_path):
            subprocess.run(
                [*self.ssh_base(), "-O", "exit", self.target], capture_output=True, timeout=10
            )

    # -- commands -------------------------------------------------------------------------
    def run_bytes(
        self, cmd: str, timeout: float | None = 60, stdin: bytes | None = None
    ) -> tuple[int, bytes, bytes, float]:
        """Run over the master; if ssh itself fails (255), reconnect once and retry."""
        for attempt in (0, 1):
            if self._socket_live():
                self._had_master = True
            else:  # missing, or a dead master's stale socket
                self.connect()
            t0 = time.perf_counter()
            # --norc: bash run by sshd would source ~/.bashrc again (slow pyenv/conda inits).
            script, data = argv_safe(cmd, stdin)
            remote = "bash --norc --noprofile -c " + shlex.quote(script)
            argv = [*self.ssh_base(), self.target, "--", remote]
            try:
                p = subprocess.run(
                    argv,
                    input=data,
                    capture_output=True,
                    timeout=timeout,
                )
            except subprocess.TimeoutExpired as exc:
                raise TransportError(
                    f"ssh {self.host.name}: command timed out after {timeout}s: {cmd[:80]}"
                ) from exc
            dur = time.perf_counter() - t0
            if p.returncode == SSH_FAILED and _is_ssh_failure(p.stderr):
                _raise_config_error(self.host.name, p.stderr)
                if attempt == 0:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.control_path)
                    continue
                line = _last_line(p.stderr) or "ssh failed"
                raise TransportError(f"ssh {self.host.name} ({self.target}): {line}")
            return p.returncode, p.stdout, p.stderr, dur
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def endpoint(self, remote_port: int, remote_host: str = "127.0.0.1") -> Iterator[str]:
        with self.forward(remote_port, remote_host) as local:
            yield f"http://127.0.0.1:{local}"

    @contextlib.contextmanager
    def forward(self, remote_port: int, remote_host: str = "127.0.0.1") -> Iterator[int]:
        """``-L`` forward added to the master (``ssh -O forward``), cancelled on exit; its
        destination ``remote_host`` is resolved and reached by the host's sshd."""
        from glmserve.remote.address import url_host

        self.connect()
        local = free_local_port()
        if not re.match(r"^[A-Za-z0-9_.:%\[\]-]+$", remote_host):  # ssh re-parses the spec
            raise TransportError(f"not an address to forward to: {remote_host!r}")
        spec = f"127.0.0.1:{local}:{url_host(remote_host)}:{int(remote_port)}"
        p = subprocess.run(
            [*self.ssh_base(), "-O", "forward", "-L", spec, self.target],
            capture_output=True,
            timeout=15,
        )
        if p.returncode != 0:
            _raise_config_error(self.host.name, p.stderr)
            why = _last_line(p.stderr)
            raise TransportError(f"ssh {self.host.name}: port forward failed: {why}")
        try:
            yield local
        finally:
            subprocess.run(
                [*self.ssh_base(), "-O", "cancel", "-L", spec, self.target],
                capture_output=True,
                timeout=15,
            )


def ssh_client(host: str) -> str:
    """The ``ssh`` program on PATH; without one, every verb that reaches ``host`` says so in
    one line (exit 5, like any host it cannot reach) instead of subprocess's FileNotFoundError
    escaping as an internal error. Every ssh argv starts here (``ssh_base``), so the check
    covers commands, the master, forwards, ``ssh -G`` and the GPU telemetry's keeper."""
    if shutil.which("ssh") is None:
        raise TransportError(
            f"ssh client not found on PATH: host {host} is reached with ssh; install the "
            "OpenSSH client or add its directory to PATH"
        )
    return "ssh"


def _private_dir(d: Path) -> bool:
    """Make ``d`` (mode 0700) or accept it if it is already a real directory owned by us; make
    it private if it is not. False for a symlink or someone else's directory: a socket there
    could be swapped for theirs."""
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            return False
        if st.st_mode & 0o077:
            os.chmod(d, 0o700)
    except OSError:
        return False
    return True


# ssh's own complaints about its configuration (an -o value, a line of an -F file or of
# ~/.ssh/config): a configuration error (exit 2), not a connection failure. A bad file line
# is always followed by "<file>: terminating, N bad configuration options"; -o errors name
# "command-line". A remote command's own stderr never matches these.
_CONFIG_ERROR_RE = re.compile(
    r"^(command-line line \d+: .*|Can't open user config file .*"
    r"|.* not supported as a command-line option|.+: terminating, \d+ bad configuration .*)$"
)
_FILE_LINE_RE = re.compile(r"^.+:? line \d+: .*$")


def _raise_config_error(host: str, stderr: bytes) -> None:
    """ConfigError with ssh's configuration complaint in ``stderr``, if there is one (for a
    config file: its first ``<file> line N: ...`` line, which says what is wrong)."""
    lines = [ln.strip() for ln in stderr.decode("utf-8", "replace").splitlines()]
    found = [ln for ln in lines if _CONFIG_ERROR_RE.match(ln)]
    if not found:
        return
    if "terminating" in found[0]:
        found = [ln for ln in lines if _FILE_LINE_RE.match(ln)] or found
    raise ConfigError(f"ssh {host}: ssh refused its configuration: {found[0]}")


def _last_line(stderr: bytes) -> str:
    lines = [ln.strip() for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _ssh_error(errfile: Path) -> str:
    try:
        return _last_line(errfile.read_bytes()) or "ssh failed without a message"
    except OSError:
        return "ssh failed"


_SSH_MARKERS = (
    "ssh:",
    "Permission denied",
    "Host key verification failed",
    "Connection refused",
    "Connection closed",
    "Connection reset",
    "Control socket",
    "mux_client",
    "kex_exchange_identification",
    "Could not resolve",
    "No route to host",
    "timed out",
    "Broken pipe",
)


def _is_ssh_failure(stderr: bytes) -> bool:
    """255 + an ssh-looking message: ssh failed (a remote command's own 255 is passed through)."""
    text = stderr.decode("utf-8", "replace")
    return not text.strip() or any(m in text for m in _SSH_MARKERS)


# One transport per host entry (and GLMSERVE_HOME, which holds its control socket) for the
# life of the process: a command's preflight, launch, watch and stop of one node share it (and
# its reconnect count) instead of each building its own.
_transports: dict[str, Transport] = {}
_transports_lock = threading.Lock()


def transport_for(host: HostConfig) -> Transport:
    """The transport for ``host``: local when it has no ssh target; the same object for the
    same entry every time (threads included)."""
    key = json.dumps([str(glmserve_home()), host.model_dump(mode="json")], default=str)
    with _transports_lock:
        t = _transports.get(key)
        if t is None:
            t = LocalTransport(host) if host.is_local else SshTransport(host)
            _transports[key] = t
    return t
