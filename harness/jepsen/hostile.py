"""Hostile clients: what a buggy, malicious or flooding client does to a server's client port.

Each attack is a blocking function of the server's address that runs for a bounded count or
time (``stop`` ends it early) and returns what it saw, as a ``Outcome``.  The same functions
serve the regression tests (``tests/server/test_hostile_clients.py``), the measurement script
(``scripts/hostile.py``) and the fault harness's ``clients`` nemesis family
(``harness.jepsen.nemesis``), so the fault model is one list (``ATTACKS``).

What the server must keep, whatever these do (docs/reliability.md, "Hostile clients"): the
attacker's own connection is the only casualty; the process stays up; other clients keep
being served; memory stays within ``client.memoryBudget``; the outstanding-request count
returns to zero once the attacker leaves.
"""

from __future__ import annotations

import multiprocessing
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.local.jute_session import OPEN_ACL, JuteSession
from zabby.opcodes import OpCode
from zabby.wire import jute

Address = tuple[str, int]
CONNECT_TIMEOUT_S = 5.0
FRAME_BYTES_MAX = 0xFFFFF  # jute.maxbuffer's default: the largest frame a server takes


@dataclass(slots=True)
class Outcome:
    """What one attack saw: connections made, refused (the server was not there) or closed
    by the server, replies read, and the error codes among them."""

    attack: str
    connections: int = 0
    refused: int = 0
    closed_by_server: int = 0
    replies: int = 0
    errors: dict[int, int] = field(default_factory=dict)
    elapsed_s: float = 0.0

    def error(self, code: int) -> None:
        self.errors[code] = self.errors.get(code, 0) + 1


_SOURCE = threading.local()  # the source address of this thread's attack connections


def _connect(address: Address, timeout_s: float = CONNECT_TIMEOUT_S) -> socket.socket:
    source = getattr(_SOURCE, "host", None)
    return socket.create_connection(address, timeout=timeout_s, source_address=(source, 0) if source else None)


def _open(address: Address, outcome: Outcome) -> socket.socket | None:
    """A connection, counted in ``outcome`` (None, counted as refused, if the server refused it)."""
    try:
        sock = _connect(address)
    except OSError:
        outcome.refused += 1
        return None
    outcome.connections += 1
    return sock


def _open_maybe_in_session(address: Address, outcome: Outcome, in_session: bool) -> socket.socket | None:
    """A connection, after a handshake (a session) or before any; None if refused."""
    if not in_session:
        return _open(address, outcome)
    session = _session(address, outcome)
    return None if session is None else session.sock


def attack_from(host: str | None) -> None:
    """This thread's attacks connect from ``host`` (on loopback, 127.0.0.2 and up are distinct
    client IPs to the server: an attacker's maxClientCnxns is not the bystander's)."""
    _SOURCE.host = host


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), as a crashed or hostile client does."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def _session(address: Address, outcome: Outcome, timeout_ms: int = 10_000) -> JuteSession | None:
    """A jute session, or None if the server refused the connection."""
    try:
        session = JuteSession(sock=_connect(address))
        session.connect(timeout_ms=timeout_ms)
    except OSError:
        outcome.refused += 1
        return None
    outcome.connections += 1
    return session


def _drain(session: JuteSession, outcome: Outcome, expected: int, op: int, wait_s: float) -> None:
    """Read replies until ``expected`` came, the server closed the connection, or ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while outcome.replies < expected and time.monotonic() < deadline:
        session.sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            header, _ = jute.decode_reply(session.receive_frame(), op)
        except (ConnectionError, OSError):
            outcome.closed_by_server += 1
            return
        if header.xid == jute.XID_NOTIFICATION:
            continue
        outcome.replies += 1
        if header.err:
            outcome.error(header.err)


def _timed(name: str, body: Callable[[Outcome], None]) -> Outcome:
    outcome = Outcome(name)
    started = time.monotonic()
    body(outcome)
    outcome.elapsed_s = time.monotonic() - started
    return outcome


# ----------------------------------------------------------------------------- the attacks
def reset_storm(address: Address, count: int = 2000, stop: threading.Event | None = None) -> Outcome:
    """Connect and reset at once, ``count`` times; every third sends half a connect first."""
    half_connect = jute.frame(jute.ConnectRequest(0, 0, 10_000, 0, bytes(16), False).encode())[:20]

    def body(outcome: Outcome) -> None:
        for i in range(count):
            if stop is not None and stop.is_set():
                return
            sock = _open(address, outcome)
            if sock is None:
                continue
            if i % 3 == 2:
                try:
                    sock.sendall(half_connect)
                except OSError:
                    pass
            _reset(sock)

    return _timed("reset-storm", body)


def _ensure_node(session: JuteSession, path: str, data: bytes) -> None:
    session.call(OpCode.CREATE, jute.CreateRequest(path, data, OPEN_ACL, 0))  # NODEEXISTS is fine


def repeated_xids(address: Address, count: int = 1001, path: str = "/hostile-xids", decreasing: bool = False,
                  wait_s: float = 10.0) -> Outcome:  # fmt: skip
    """Pipeline ``count`` setData requests that all carry xid 42 (or, ``decreasing``, the xids
    count..1), then read what comes back until the server closes the connection."""

    def body(outcome: Outcome) -> None:
        session = _session(address, outcome)
        if session is None:
            return
        with session:
            _ensure_node(session, path, b"")
            base = 10 * count
            frames = b"".join(
                jute.encode_request(base - i if decreasing else 42, OpCode.SET_DATA, jute.SetDataRequest(path, b"x", -1))
                for i in range(count)
            )  # fmt: skip
            try:
                session.sock.sendall(frames)
            except OSError:
                outcome.closed_by_server += 1
                return
            _drain(session, outcome, count, OpCode.SET_DATA, wait_s)

    return _timed("decreasing-xids" if decreasing else "duplicate-xids", body)


def never_read(address: Address, clients: int = 8, path: str = "/hostile-big", data_bytes: int = 1_000_000,
               requests: int = 200, hold_s: float = 5.0, stop: threading.Event | None = None) -> Outcome:  # fmt: skip
    """``clients`` connections each pipeline ``requests`` reads of a ``data_bytes`` znode and
    never read a reply, for ``hold_s``; then they reset."""

    def body(outcome: Outcome) -> None:
        setup = _session(address, outcome)
        if setup is None:
            return
        with setup:
            _ensure_node(setup, path, b"x" * data_bytes)
        sessions = []
        try:
            for _ in range(clients):
                session = _session(address, outcome)
                if session is None:
                    continue
                session.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                request = jute.encode_request(1, OpCode.GET_DATA, jute.GetDataRequest(path, False))
                frames = b"".join(jute.encode_request(xid, OpCode.GET_DATA, jute.GetDataRequest(path, False)) for xid in range(1, requests + 1))
                assert len(frames) == requests * len(request)
                session.sock.settimeout(1.0)
                try:
                    session.sock.sendall(frames)
                except OSError:  # the server stopped reading us (or closed us): that is its right
                    pass
                sessions.append(session)
            _hold(hold_s, stop)
        finally:
            for session in sessions:
                _reset(session.sock)

    return _timed("never-read", body)


def _hold(seconds: float, stop: threading.Event | None) -> None:
    if stop is None:
        time.sleep(seconds)
    else:
        stop.wait(seconds)


def slowloris(address: Address, connections: int = 20, hold_s: float = 10.0, stop: threading.Event | None = None) -> Outcome:
    """``connections`` connections each announce a frame of jute.maxbuffer bytes and send it one
    byte every 0.2 s; half do so after a handshake, half instead of one."""

    def body(outcome: Outcome) -> None:
        socks: list[socket.socket] = []
        try:
            for i in range(connections):
                sock = _open_maybe_in_session(address, outcome, in_session=bool(i % 2))
                if sock is None:
                    continue
                sock.settimeout(0.5)
                try:
                    sock.sendall(FRAME_BYTES_MAX.to_bytes(4, "big"))
                except OSError:
                    outcome.closed_by_server += 1
                    continue
                socks.append(sock)
            _trickle(socks, outcome, hold_s, stop)
        finally:
            for sock in socks:
                _reset(sock)

    return _timed("slowloris", body)


def _trickle(socks: list[socket.socket], outcome: Outcome, hold_s: float, stop: threading.Event | None) -> None:
    deadline = time.monotonic() + hold_s
    while socks and time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        for sock in list(socks):
            try:
                sock.send(b"\x00")
            except OSError:
                outcome.closed_by_server += 1
                socks.remove(sock)
                sock.close()
        _hold(0.2, stop)


def oversized_frames(address: Address, count: int = 50, stop: threading.Event | None = None) -> Outcome:
    """Frames that announce 2 GiB, before and after a handshake; each read until the close."""

    def body(outcome: Outcome) -> None:
        for i in range(count):
            if stop is not None and stop.is_set():
                return
            sock = _open_maybe_in_session(address, outcome, in_session=bool(i % 2))
            if sock is None:
                continue
            try:
                sock.sendall((2**31 - 1).to_bytes(4, "big") + b"\x00" * 64)
                while sock.recv(65536):
                    outcome.replies += 1
                outcome.closed_by_server += 1
            except OSError:
                outcome.closed_by_server += 1
            finally:
                sock.close()

    return _timed("oversized-frames", body)


def connection_flood(address: Address, connections: int = 200, hold_s: float = 3.0, stop: threading.Event | None = None) -> Outcome:
    """Open ``connections`` connections at once (past maxClientCnxns), hold them, reset them."""

    def body(outcome: Outcome) -> None:
        socks: list[socket.socket] = []
        try:
            for _ in range(connections):
                if stop is not None and stop.is_set():
                    break
                try:
                    socks.append(_connect(address, timeout_s=1.0))
                    outcome.connections += 1
                except OSError:
                    outcome.refused += 1
            _hold(hold_s, stop)
            for sock in socks:
                sock.settimeout(0.01)
                try:
                    if sock.recv(1) == b"":
                        outcome.closed_by_server += 1
                except (TimeoutError, BlockingIOError):
                    pass
                except OSError:
                    outcome.closed_by_server += 1
        finally:
            for sock in socks:
                _reset(sock)

    return _timed("connection-flood", body)


def watch_hoard(address: Address, watches: int = 100_000, hold_s: float = 1.0, stop: threading.Event | None = None,
                timeout_ms: int = 10_000) -> Outcome:  # fmt: skip
    """One session (of ``timeout_ms``, as the server grants it) sets ``watches`` exists-watches
    (setWatches, in frames under jute.maxbuffer), holds them, then disconnects: the server
    forgets them all.  It never pings: a hold longer than its timeout ends in its expiry."""

    def body(outcome: Outcome) -> None:
        session = _session(address, outcome, timeout_ms)
        if session is None:
            return
        with session:
            batch = 20_000
            for start in range(0, watches, batch):
                paths: list[str | None] = [f"/hostile-watch/{i}" for i in range(start, min(watches, start + batch))]
                header, _ = session.call(OpCode.SET_WATCHES, jute.SetWatches(0, [], paths, []), xid=jute.XID_SET_WATCHES)
                outcome.replies += 1
                if header.err:
                    outcome.error(header.err)
            _hold(hold_s, stop)

    return _timed("watch-hoard", body)


ATTACKS: dict[str, Callable[..., Outcome]] = {
    "reset-storm": reset_storm,
    "duplicate-xids": repeated_xids,
    "decreasing-xids": lambda address, **kw: repeated_xids(address, decreasing=True, **kw),
    "never-read": never_read,
    "slowloris": slowloris,
    "oversized-frames": oversized_frames,
    "connection-flood": connection_flood,
    "watch-hoard": watch_hoard,
}


# ----------------------------------------------------------------------------- the well-behaved client
@dataclass(frozen=True, slots=True)
class BystanderFigures:
    """What a well-behaved client saw meanwhile: its successful reads' latencies (ms), its
    failed reads (counted apart), and how long the slowest fresh connect-and-read took."""

    reads: int
    failures: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    fresh_connects: int
    fresh_failures: int
    fresh_max_ms: float


def _percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _fresh_read(address: Address) -> float:
    """A new connection, a session, one exists("/"): seconds (raises OSError on failure)."""
    started = time.perf_counter()
    with JuteSession(address[1], host=address[0], timeout_s=5.0) as session:
        session.connect(timeout_ms=10_000)
        header, _ = session.call(OpCode.EXISTS, jute.ExistsRequest("/", False))
        if header.err:
            raise OSError(f"exists answered {header.err}")
    return time.perf_counter() - started


def _fresh_reads(address: Address, every_s: float, stop: Any, times: list[float], failures: list[int]) -> None:
    """A fresh connection's read every ``every_s``, on a thread of its own: a slow one must not
    hold back the session's reads, whose gaps are the stall being measured."""
    while not stop.wait(every_s):
        try:
            times.append(_fresh_read(address))
        except (OSError, AssertionError):
            failures[0] += 1


def _bystander_main(address: Address | None, interval_s: float, fresh_every_s: float, stop: Any, results: Any,
                    aimed: Any, ready: Any) -> None:  # fmt: skip
    """Reads on one session, each timed from when it was due (a read held up behind a stalled
    one counts the wait); failed reads are counted apart, not as latencies.  Without an
    ``address`` it waits for one on ``aimed`` (started early, its interpreter is warm when
    the server is up); ``ready`` is set once its first read is answered.  Opening the
    session is no read (its createSession is a write, queued behind every write ahead of
    it): the fresh connections' figures count that."""
    if address is None:
        address = aimed.recv()
        if address is None:
            return
    latencies: list[float] = []
    fresh: list[float] = []
    fresh_failures = [0]
    failures = 0
    fresher = threading.Thread(target=_fresh_reads, args=(address, fresh_every_s, stop, fresh, fresh_failures), daemon=True)
    fresher.start()
    session: JuteSession | None = None
    due = time.perf_counter()
    while not stop.is_set():
        try:
            if session is None:
                session = JuteSession(address[1], host=address[0], timeout_s=5.0)
                session.connect(timeout_ms=10_000)
                due = time.perf_counter()
            header, _ = session.call(OpCode.EXISTS, jute.ExistsRequest("/", False))
            if header.err:
                raise OSError(f"exists answered {header.err}")
            latencies.append(time.perf_counter() - due)
            ready.set()
        except (OSError, AssertionError):
            failures += 1
            if session is not None:
                session.close()
            session = None
        stop.wait(interval_s)
        due = time.perf_counter()
    if session is not None:
        session.close()
    fresher.join(10.0)
    results.send(BystanderFigures(
        reads=len(latencies), failures=failures, p50_ms=1000 * _percentile(latencies, 0.5), p99_ms=1000 * _percentile(latencies, 0.99),
        max_ms=1000 * max(latencies, default=0.0), fresh_connects=len(fresh), fresh_failures=fresh_failures[0],
        fresh_max_ms=1000 * max(fresh, default=0.0),
    ))  # fmt: skip


class Bystander:
    """A well-behaved jute client in a process of its own (so the attacker's threads and the
    caller's GIL do not count in its latency): one exists("/") every ``interval_s`` on one
    session, and a fresh connection's read every ``fresh_every_s``.  ``stop()`` returns the
    figures.  Started without an address, it waits for ``aim(address)``: a process started
    while the server restarts is ready to read the moment it serves."""

    def __init__(self, address: Address | None, interval_s: float = 0.005, fresh_every_s: float = 0.5) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._ready = context.Event()
        self._results, child_end = context.Pipe(duplex=False)
        aimed, self._aim = context.Pipe(duplex=False)
        self._process = context.Process(target=_bystander_main, args=(address, interval_s, fresh_every_s, self._stop, child_end, aimed, self._ready),
                                        name="bystander", daemon=True)  # fmt: skip
        self._aimed = address is not None

    def start(self, ready_s: float | None = 30.0) -> Bystander:
        """Start it; one made with an address is waited for until its session is open and
        answered a first read (an interpreter that starts late under load must not open its
        session in the middle of an attack), unless ``ready_s`` is None.

        Raises:
            TimeoutError: no read was answered within ``ready_s`` (the process is stopped).
        """
        self._process.start()
        if self._aimed and ready_s is not None:
            try:
                self.wait_ready(ready_s)
            except TimeoutError:
                self._process.kill()
                raise
        return self

    def aim(self, address: Address) -> Bystander:
        """Start reading from ``address`` (a bystander made without one)."""
        self._aim.send(address)
        return self

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Until its first read is answered.

        Raises:
            TimeoutError: none in ``timeout_s``.
        """
        if not self._ready.wait(timeout_s):
            raise TimeoutError(f"the bystander's first read was not answered within {timeout_s} s")

    def discard(self) -> None:
        """End a bystander never aimed (or whose figures are not wanted)."""
        self._stop.set()
        self._aim.send(None)
        self._process.join(5.0)
        if self._process.is_alive():
            self._process.kill()

    def stop(self, timeout_s: float = 30.0) -> BystanderFigures:
        self._stop.set()
        try:
            if not self._results.poll(timeout_s):
                raise TimeoutError("the bystander did not report within its time")
            figures: BystanderFigures = self._results.recv()
            return figures
        finally:
            self._process.join(5.0)
            if self._process.is_alive():
                self._process.kill()
