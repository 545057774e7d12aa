"""A process on the peer ports that claims a server id: the hello, then any quorum packets
(``zabby.core.messages``), as zabby's transport frames them; and what the tests of the peer
ports look at (issues 43 and 56)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import msgpack

from zabby.core.messages import Message, encode
from zabby.wire.framing import encode_frame


def send_as(port: int, claimed_sid: int, messages: list[Message], *, hold_s: float = 0.5) -> None:
    """Connect to ``port`` (a quorum or election port) as server ``claimed_sid`` and send
    ``messages``; hold the connection ``hold_s`` so they are read, then close."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        hello = [claimed_sid, "127.0.0.1", 1, 1, False]
        sock.sendall(encode_frame(msgpack.packb(hello)) + b"".join(encode_frame(encode(m)) for m in messages))
        time.sleep(hold_s)


def open_as(port: int, claimed_sid: int, *, source: str = "127.0.0.1") -> socket.socket:
    """A link to ``port`` from ``source`` that says it is server ``claimed_sid`` and stays open."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    sock.sendall(encode_frame(msgpack.packb([claimed_sid, source, 1, 1, False])))
    return sock


def closed_by_peer(sock: socket.socket, wait_s: float = 3.0) -> bool:
    """Whether the other end closed ``sock`` within ``wait_s`` (it never writes on a link)."""
    sock.settimeout(wait_s)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def listening(port: int) -> bool:
    """Whether something accepts connections on ``port`` of 127.0.0.1."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def vm_kb(pid: int, key: str) -> int:
    """A process's memory figure from /proc (VmRSS, VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} for process {pid}")
