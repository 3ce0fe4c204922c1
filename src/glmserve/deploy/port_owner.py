"""Who holds a run's port: READY is only ever this run's, since any server on the port answers
``/health``; the listener must be held by the run's verified processes wherever ``/proc`` shows
it (the watcher and ``status`` both ask)."""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass, field

from glmserve.diagnose import Category, Diagnosis, State
from glmserve.remote.address import run_probe_host
from glmserve.remote.process import stat_loop
from glmserve.remote.transport import Transport
from glmserve.store import RunRecord


def port_owner_script(pgid: int, port: int) -> str:
    """Shell printing ``listen: INODE@ADDR ...`` (the TCP sockets listening on ``port``, each
    with its local address in /proc/net/tcp's hex, so a probe's address can pick the ones it
    reaches; ``listen: ?`` when /proc/net/tcp cannot be read), then ``fd PID INODE`` for each
    of those sockets that a member of process group ``pgid`` holds open. Our own processes'
    fds are readable, so a listener missing from them belongs to someone else. The socket
    table is read once: the fds are matched against the very list printed."""
    hexport = f"{int(port):04X}"
    listen = (
        "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null "
        f'| awk \'$4 == "0A" && $2 ~ /:{hexport}$/ '
        '{split($2, a, ":"); printf " %s@%s", $10, a[1]}\''
    )
    # Split after the last ')' of each stat: a newline in some process's name cannot forge
    # a member (only verified members' fds count anyway, see parse_port_view).
    members = stat_loop(f'[ "$3" = {int(pgid)} ] && echo "$p"', end=False)
    fds = (
        'ls -l /proc/$p/fd 2>/dev/null | awk -v p=$p -v l="$l" '
        "'match($0, /socket:\\[[0-9]+\\]/) "
        '{ i = substr($0, RSTART + 8, RLENGTH - 9); if (index(l, " " i "@")) print "fd", p, i }\''
    )
    return (
        "if [ -r /proc/net/tcp ]; then "
        f'l=$({listen}); echo "listen:$l"; '
        f"for p in $({members}); do {fds}; done; "
        "else echo 'listen: ?'; fi"
    )


@dataclass
class PortView:
    """Who listens on the run's port: ``state`` is ``ours`` (every listener held by a
    verified process of the run), ``foreign`` (a listener that is not), ``free`` (nothing
    listens) or ``unknown`` (the host does not show sockets)."""

    state: str
    listeners: list[int] = field(default_factory=list)
    holders: list[int] = field(default_factory=list)  # our pids holding a listener


def port_taken(d: Diagnosis, port: int) -> Diagnosis:
    """The verdict when the log says ready but another process listens on the run's port:
    the ready line came from SGLang's warmup thread warming up that other server (see
    diagnose's PORT_IN_USE note); this run is not serving."""
    return dataclasses.replace(
        d,
        state=State.CRASHED,
        category=Category.PORT_IN_USE,
        root_cause=f"the log says ready but port {port} is held by a process outside this run",
        hint=(
            f"another server owns port {port}: its answers are not this run's. Find it with "
            f"`ss -ltnp 'sport = :{port}'`, stop it or pick another port (--set server.port=N)"
        ),
    )


def _reached(hexaddr: str, host: str | None) -> bool:
    """Would a connection to ``host`` reach a listener on ``hexaddr`` (a /proc/net/tcp local
    address)? A wildcard listener answers its whole family (and ``::`` IPv4 too); a name
    cannot be told apart here, so every listener counts. The kernel writes the address in
    host byte order per 32-bit word: both byte orders are tried."""
    if host is None or not hexaddr:
        return True
    try:
        ip = ipaddress.ip_address(host)
        raw = bytes.fromhex(hexaddr)
    except ValueError:
        return True
    if not any(raw):
        return len(raw) == 16 or ip.version == 4
    words = [raw[i : i + 4] for i in range(0, len(raw), 4)]
    forms = {raw, b"".join(w[::-1] for w in words)}
    want = {ip.packed}
    if ip.version == 4:
        want.add(ipaddress.IPv6Address(f"::ffff:{ip}").packed)  # a v6 socket's mapped form
    return bool(forms & want)


def parse_port_view(text: str, pids: list[int], host: str | None = None) -> PortView:
    """Read :func:`port_owner_script` output; only ``pids`` (verified ours) count as ours,
    and only listeners a probe of ``host`` (the address the run binds) reaches count at all:
    another server on the same port at another address answers none of our probes."""
    listeners: list[int] = []
    held: dict[int, int] = {}
    seen = False
    for line in text.splitlines():
        head, _, rest = line.partition(":")
        if head == "listen":
            seen = True
            if rest.strip() == "?":
                return PortView("unknown")
            listeners = []
            for tok in rest.split():
                inode, _, hexaddr = tok.partition("@")
                if inode.isdigit() and _reached(hexaddr, host):
                    listeners.append(int(inode))
        parts = line.split()
        fd = len(parts) == 3 and parts[0] == "fd" and parts[1].isdigit() and parts[2].isdigit()
        if fd and int(parts[1]) in pids:
            held[int(parts[2])] = int(parts[1])
    if not seen:
        return PortView("unknown")
    if not listeners:
        return PortView("free")
    holders = sorted(set(held.values()))
    state = "ours" if all(i in held for i in listeners) else "foreign"
    return PortView(state, listeners, holders)


def port_view(t: Transport, run: RunRecord, pids: list[int]) -> PortView:
    """:class:`PortView` of ``run``'s port on its host (one command)."""
    if run.pgid is None:
        return PortView("unknown")
    res = t.run(port_owner_script(run.pgid, run.port), timeout=30)
    host = run_probe_host(run.spec)
    return parse_port_view(res.stdout, pids, host) if res.ok else PortView("unknown")
