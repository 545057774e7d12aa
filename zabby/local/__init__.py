"""Helpers for servers on this machine: free ports, four-letter-word probes (``srvr`` parsed),
process liveness.

One place for what the tests, the demo's local ensemble, ``scripts/ensemble.py``, the fault
harness and ``zabby-cli -servers-status`` all need.  The harness that starts real servers
lives beside it, imported only by the tests, the scripts and the other harnesses:
``zabby.local.processes`` (``ServerProcess``, ``Ensemble``), ``zabby.local.netproxy``
(``ProxyHub`` and its ``LinkProxy``: links to cut, hold or blackhole) and ``zabby.local.backup_drill``.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

REPLY_BYTES_MAX = 4 * 1024 * 1024
PORT_LOW = 20000
CHECKOUT = Path(__file__).resolve().parents[2]  # the folder holding this zabby package: servers started from here run its code
_PORTS_TAKEN: set[int] = set()


def four_letter(port: int, word: str, timeout_s: float = 5.0, host: str = "127.0.0.1") -> str:
    """Send ``word`` on a fresh connection and read the reply until the server closes it.

    Raises:
        OSError: the server is not there, or did not answer within ``timeout_s``.
    """
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.settimeout(timeout_s)
        sock.sendall(word.encode("ascii"))
        chunks: list[bytes] = []
        size = 0
        while size < REPLY_BYTES_MAX:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def parse_srvr(text: str) -> dict[str, str]:
    """``Key: value`` lines of ``srvr``/``stat`` (the ``Clients:`` block is skipped): Mode, Zxid,
    Connections, Node count...  A server not serving answers without them."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith((" ", "\t")) and value.strip():
            out.setdefault(key.strip(), value.strip())
    return out


def srvr(port: int, timeout_s: float = 5.0) -> dict[str, str]:
    """The server's ``srvr`` fields.

    Raises:
        OSError: the server is not there, or did not answer within ``timeout_s``.
    """
    return parse_srvr(four_letter(port, "srvr", timeout_s))


def srvr_zxid(port: int, timeout_s: float = 5.0) -> int | None:
    """srvr's Zxid, None while the server does not serve or does not answer."""
    try:
        text = srvr(port, timeout_s).get("Zxid", "")
    except OSError:
        return None
    return int(text, 16) if text else None


def mntr(port: int, timeout_s: float = 5.0) -> dict[str, str]:
    """The ``key<TAB>value`` lines of ``mntr`` (``zk_server_state``, ``zk_znode_count``...).

    Raises:
        OSError: the server is not there, or did not answer within ``timeout_s``.
    """
    return dict(line.split("\t", 1) for line in four_letter(port, "mntr", timeout_s).splitlines() if "\t" in line)


def server_mode(port: int, timeout_s: float = 5.0) -> str:
    """srvr's Mode (leader, follower, observer, standalone, read-only), "not serving" while it
    answers without one, or "down" while it does not answer."""
    try:
        return srvr(port, timeout_s).get("Mode", "not serving")
    except OSError:
        return "down"


def free_port() -> int:
    """A free port below the kernel's ephemeral range, so no outgoing connection can take it
    while a server that will listen on it is down (a restart must find its ports free).
    Ports handed out once are not handed out again by this process."""
    rng = random.Random()
    high = min(_ephemeral_low(), 32768)
    for _ in range(1000):
        port = rng.randrange(PORT_LOW, high)
        if port in _PORTS_TAKEN:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PORTS_TAKEN.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range")


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def process_alive(pid: int) -> bool:
    """Running, not a zombie.  A server killed but not yet reaped (because it is not our child,
    or its parent does not reap) lingers as a zombie, which ``kill(pid, 0)`` misses."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc: trust kill(pid, 0)
    return state not in ("Z", "X")


# ZooKeeper 3.8 (Debian's jars) logs to one file in its log dir: the fault harness and the
# benchmarks read it.
ZOOKEEPER_LOG4J = """\
log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File=${zookeeper.log.dir}/zookeeper.log
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
"""
