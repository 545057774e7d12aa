"""Hostile processes on the peer ports (quorum and election) and the admin HTTP port: what an
outsider without the quorum secret or the administrator's password does to a server there.

Each attack is a blocking function of the port it aims at, bounded in count or time (``stop``
ends it early), that returns an ``Outcome`` (``harness.jepsen.hostile``): connections made,
refused, closed by the server, answers read, and for HTTP the statuses among them.  The same
functions serve the regression tests (``tests/ensemble/test_peer_ports.py``,
``tests/server/test_admin_port.py``) and the measurement script (``scripts/hostile.py
--ports``); ``PORT_ATTACKS`` lists them with the port each aims at.

What the server must keep (docs/resource-model.md): it stays up and serves its clients with
their usual latency; members still link to each other; its memory stays bounded.
"""

from __future__ import annotations

import base64
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import msgpack

from harness.jepsen.hostile import Outcome, _timed
from zabby.wire.framing import encode_frame

CONNECT_TIMEOUT_S = 5.0
ATTACKER_HOSTS = tuple(f"127.0.0.{i}" for i in range(2, 34))  # 32 source addresses, none a member's host (127.0.0.1)


def _connect(port: int, source: str | None, timeout_s: float = CONNECT_TIMEOUT_S) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout_s, source_address=(source, 0) if source else None)


def _closed(sock: socket.socket, wait_s: float) -> bool:
    """Whether the server closed ``sock`` within ``wait_s`` (what it sent before is skipped)."""
    sock.settimeout(wait_s)
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except TimeoutError:
        return False
    except OSError:
        return True
    return False


def _stopped(stop: threading.Event | None) -> bool:
    return stop is not None and stop.is_set()


# ----------------------------------------------------------------------------- the peer ports
def hello_payload(sid: int, *, host: str = "127.0.0.1", nonce: object = None, mac: object = None) -> bytes:
    """A hello frame's payload (``zabby.server.peering.peer_auth``): with ``nonce`` and ``mac`` the
    authenticated form, whatever their types."""
    fields: list[object] = [sid, host, 1, 1, False]
    if nonce is not None or mac is not None:
        fields += [nonce, mac]
    return msgpack.packb(fields)


def peer_slot_hold(port: int, sources: tuple[str, ...] = ATTACKER_HOSTS, per_source: int = 8, hold_s: float = 10.0,
                   stop: threading.Event | None = None) -> Outcome:  # fmt: skip
    """From each of ``sources``, hold ``per_source`` connections to a peer port that never say
    who they are, opening each again as soon as the server closes it (its hello deadline), for
    ``hold_s``: the slots for links that have not said who they are, taken from the members."""
    return _timed("peer-slot-hold", lambda outcome: _hold(port, sources, per_source, hold_s, stop, outcome, b""))


def _hold(port: int, sources: tuple[str, ...], per_source: int, hold_s: float, stop: threading.Event | None, outcome: Outcome,
          greeting: bytes) -> None:  # fmt: skip
    """Keep ``per_source`` connections open from each source for ``hold_s``, each sending
    ``greeting`` once, opening each again when the server closes it."""
    held: list[tuple[str, socket.socket]] = []
    deadline = time.monotonic() + hold_s
    try:
        while time.monotonic() < deadline and not _stopped(stop):
            before = len(held)
            _top_up(port, sources, per_source, held, outcome)
            for _, sock in held[before:] if greeting else ():
                try:
                    sock.sendall(greeting)
                except OSError:
                    pass
            _reap_closed(held, outcome)
            time.sleep(0.05)
    finally:
        for _, sock in held:
            sock.close()


def _top_up(port: int, sources: tuple[str, ...], per_source: int, held: list[tuple[str, socket.socket]], outcome: Outcome) -> None:
    for source in sources:
        for _ in range(per_source - sum(1 for s, _ in held if s == source)):
            try:
                held.append((source, _connect(port, source, timeout_s=1.0)))
                outcome.connections += 1
            except OSError:
                outcome.refused += 1


def _reap_closed(held: list[tuple[str, socket.socket]], outcome: Outcome) -> None:
    for entry in list(held):
        sock = entry[1]
        sock.setblocking(False)
        try:
            ended = sock.recv(65536) == b""  # the challenge (with quorum.auth) is read and dropped
        except BlockingIOError:
            ended = False
        except OSError:
            ended = True
        if ended:
            outcome.closed_by_server += 1
            held.remove(entry)
            sock.close()


def peer_hello_flood(port: int, count: int = 20_000, host_chars: int = 255, stop: threading.Event | None = None) -> Outcome:
    """``count`` hellos one after another, each claiming a new server id and a ``host_chars``
    host, with a MAC that is wrong: each is read and refused, and nothing of it should stay."""
    hellos = (hello_payload(1000 + index, host="h" * host_chars, nonce=os.urandom(16), mac=os.urandom(32)) for index in range(count))
    return _timed("peer-hello-flood", lambda outcome: _one_by_one(port, hellos, stop, outcome, 5.0))


def peer_number_fields(port: int, count: int = 4, size: int = 2**28, stop: threading.Event | None = None) -> Outcome:
    """Hellos of about 60 bytes whose nonce or MAC field is the integer ``size`` (it was taken
    as a length: ``bytes(size)`` allocated and HMAC-ed), each read until the server closes it."""
    fields = ((size, bytes(32)) if index % 2 == 0 else (bytes(16), size) for index in range(count))
    hellos = (hello_payload(90, nonce=nonce, mac=mac) for nonce, mac in fields)
    return _timed("peer-number-fields", lambda outcome: _one_by_one(port, hellos, stop, outcome, 10.0))


def _one_by_one(port: int, payloads: Iterable[bytes], stop: threading.Event | None, outcome: Outcome, wait_s: float) -> None:
    """Each payload as a frame on a connection of its own, read until the server closes it."""
    for payload in payloads:
        if _stopped(stop):
            return
        try:
            sock = _connect(port, None)
        except OSError:
            outcome.refused += 1
            continue
        outcome.connections += 1
        with sock:
            try:
                sock.sendall(encode_frame(payload))
            except OSError:
                pass
            outcome.closed_by_server += _closed(sock, wait_s)


# ----------------------------------------------------------------------------- the admin port
def admin_idle_flood(port: int, sources: tuple[str, ...] = ATTACKER_HOSTS[:8], per_source: int = 64, hold_s: float = 5.0,
                     stop: threading.Event | None = None) -> Outcome:  # fmt: skip
    """From each of ``sources``, ``per_source`` admin connections that send half a request
    head and nothing more, opened again when the server closes them, for ``hold_s``."""
    half_head = b"GET /commands/srvr HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    return _timed("admin-idle-flood", lambda outcome: _hold(port, sources, per_source, hold_s, stop, outcome, half_head))


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    status: int  # 0: no answer (the connection closed or timed out first)
    body: bytes
    seconds: float
    headers: dict[str, str] = field(default_factory=dict)  # names lower-cased


def http_request(port: int, method: str, path: str, headers: dict[str, str] | None = None, *, source: str | None = None,
                 timeout_s: float = 10.0) -> HttpAnswer:  # fmt: skip
    """One request on a connection of its own, read to the close (``Host: 127.0.0.1`` unless
    ``headers`` name one)."""
    headers = {"Host": f"127.0.0.1:{port}", **(headers or {})}
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
    started = time.perf_counter()
    try:
        with _connect(port, source, timeout_s) as sock:
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    except OSError:
        return HttpAnswer(0, b"", time.perf_counter() - started)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split()
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    fields = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in header_lines)}
    return HttpAnswer(status, body, time.perf_counter() - started, fields)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def admin_guess(port: int, seconds: float = 3.0, threads: int = 16, user: str = "admin", path: str = "/commands/cons",
                stop: threading.Event | None = None) -> Outcome:  # fmt: skip
    """Guess the administrator's password by HTTP Basic from ``threads`` connections at once
    for ``seconds``: ``replies`` counts the answers (``errors`` by HTTP status), so
    ``replies / elapsed_s`` is the guessing rate."""
    lock = threading.Lock()
    counter = iter(range(10**9))

    def guesser(outcome: Outcome, deadline: float) -> None:
        while time.monotonic() < deadline and not _stopped(stop):
            with lock:
                guess = f"guess-{next(counter)}"
            answer = http_request(port, "GET", path, {"Authorization": basic(user, guess)}, timeout_s=max(0.1, deadline - time.monotonic()))
            with lock:
                outcome.connections += 1
                if answer.status:
                    outcome.replies += 1
                    outcome.error(answer.status)
                else:
                    outcome.closed_by_server += 1

    def body(outcome: Outcome) -> None:
        deadline = time.monotonic() + seconds
        workers = [threading.Thread(target=guesser, args=(outcome, deadline), daemon=True) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(seconds + 15.0)

    return _timed("admin-guess", body)


def admin_listing(port: int, credentials: tuple[str, str], paths: tuple[str, ...] = ("/commands/wchc", "/commands/wchp", "/console/api/watches"),
                  rounds: int = 2, stop: threading.Event | None = None) -> Outcome:  # fmt: skip
    """The admin's watch listings, ``rounds`` times each, as the administrator: over a large
    watch set each was one long stall of the event loop."""

    def body(outcome: Outcome) -> None:
        for _ in range(rounds):
            for path in paths:
                if _stopped(stop):
                    return
                answer = http_request(port, "GET", path, {"Authorization": basic(*credentials)}, timeout_s=60.0)
                outcome.connections += 1
                outcome.replies += bool(answer.status)
                outcome.error(answer.status)

    return _timed("admin-listing", body)


PEER, ADMIN = "peer", "admin"
PORT_ATTACKS: dict[str, tuple[str, Callable[..., Outcome]]] = {
    "peer-slot-hold": (PEER, peer_slot_hold),
    "peer-hello-flood": (PEER, peer_hello_flood),
    "peer-number-fields": (PEER, peer_number_fields),
    "admin-idle-flood": (ADMIN, admin_idle_flood),
    "admin-guess": (ADMIN, admin_guess),
}
