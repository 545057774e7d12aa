"""Each fault of ``harness.local.netproxy`` does what it says, seen from both ends of a link: a
target that greets every connection and echoes what it receives, and a client on the proxy."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from harness.local.netproxy import Direction, LinkProxy, Mode, ProxyHub

GREETING = b"hi\n"
WAIT_S = 5.0
QUIET_S = 0.5  # how long "nothing arrives" is watched


class EchoTarget:
    """Greets every connection, then echoes; remembers what it received and how many accepts."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.received = bytearray()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.sendall(GREETING)
                while data := conn.recv(4096):
                    with self._lock:
                        self.received += data
                    conn.sendall(data)
            except OSError:
                pass

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() of the other thread
        except OSError:
            pass
        self.listener.close()


@pytest.fixture
def link() -> Iterator[tuple[EchoTarget, LinkProxy]]:
    target = EchoTarget()
    hub = ProxyHub()
    try:
        yield target, hub.add(target.port, "test")
    finally:
        hub.close()
        target.close()


def _connect(proxy: LinkProxy) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=WAIT_S)
    sock.settimeout(WAIT_S)
    return sock


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _nothing_arrives(sock: socket.socket) -> bool:
    sock.settimeout(QUIET_S)
    try:
        sock.recv(1)
    except TimeoutError:
        return True
    finally:
        sock.settimeout(WAIT_S)
    return False


def _wait_for(predicate, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def _closed_or_reset(sock: socket.socket) -> str:
    """'eof' or 'reset' for a connection the proxy ended; fails if it stays open."""
    try:
        while sock.recv(4096):
            pass
        return "eof"
    except ConnectionResetError:
        return "reset"


def _refused(proxy: LinkProxy) -> bool:
    """Whether a new connection is reset: after its accept, or, when the reset comes first,
    at the connect itself (``create_connection`` reads the socket's error once connected)."""
    try:
        refused = _connect(proxy)
    except ConnectionResetError:
        return True
    with refused:
        return _closed_or_reset(refused) == "reset"


def test_pass_forwards_both_ways(link: tuple[EchoTarget, LinkProxy]) -> None:
    target, proxy = link
    with _connect(proxy) as sock:
        assert _read_exactly(sock, 3) == GREETING
        sock.sendall(b"ping")
        assert _read_exactly(sock, 4) == b"ping"
    assert target.received == b"ping"


def test_cut_closes_live_connections_and_refuses_new_ones_until_healed(link: tuple[EchoTarget, LinkProxy]) -> None:
    _target, proxy = link
    sock = _connect(proxy)
    assert _read_exactly(sock, 3) == GREETING
    proxy.set_mode(Mode.CUT)
    assert _closed_or_reset(sock) in ("eof", "reset")
    sock.close()
    assert _refused(proxy)
    proxy.heal()
    with _connect(proxy) as again:
        assert _read_exactly(again, 3) == GREETING


def test_reset_sends_rst_on_live_connections(link: tuple[EchoTarget, LinkProxy]) -> None:
    _target, proxy = link
    sock = _connect(proxy)
    assert _read_exactly(sock, 3) == GREETING
    assert proxy.reset_connections() == 1
    with pytest.raises(ConnectionResetError):
        sock.recv(4096)
        sock.recv(4096)  # (in case the first read raced the RST)
    sock.close()
    with _connect(proxy) as still_passing:
        assert _read_exactly(still_passing, 3) == GREETING
    proxy.set_mode(Mode.RESET)
    assert _refused(proxy)


def test_one_way_hold_passes_the_other_direction_and_delivers_after_heal(link: tuple[EchoTarget, LinkProxy]) -> None:
    target, proxy = link
    proxy.hold(Direction.FORWARD)
    with _connect(proxy) as sock:
        assert _read_exactly(sock, 3) == GREETING  # target -> connector still passes
        sock.sendall(b"held")
        assert _nothing_arrives(sock)
        assert target.received == b""
        proxy.heal()
        assert _read_exactly(sock, 4) == b"held"  # delivered late, in order
    assert target.received == b"held"


def test_backward_hold_lets_the_target_receive_but_not_answer(link: tuple[EchoTarget, LinkProxy]) -> None:
    target, proxy = link
    with _connect(proxy) as sock:
        assert _read_exactly(sock, 3) == GREETING
        proxy.hold(Direction.BACKWARD)
        sock.sendall(b"one-way")
        _wait_for(lambda: target.received == b"one-way", "the target to receive")
        assert _nothing_arrives(sock)
        proxy.heal()
        assert _read_exactly(sock, 7) == b"one-way"


def test_blackhole_holds_everything_and_keeps_connections_open(link: tuple[EchoTarget, LinkProxy]) -> None:
    target, proxy = link
    live = _connect(proxy)
    assert _read_exactly(live, 3) == GREETING
    proxy.set_mode(Mode.BLACKHOLE)
    live.sendall(b"lost?")
    assert _nothing_arrives(live)  # neither an echo nor an EOF: the connection looks alive
    assert target.received == b""
    accepted_before = target.accepted
    fresh = _connect(proxy)  # accepted by the proxy, but the target does not see it
    assert _nothing_arrives(fresh)
    assert target.accepted == accepted_before
    assert proxy.connection_count() == 2
    proxy.heal()
    assert _read_exactly(live, 5) == b"lost?"
    assert _read_exactly(fresh, 3) == GREETING
    live.close()
    fresh.close()


def test_connection_to_a_dead_target_is_closed(link: tuple[EchoTarget, LinkProxy]) -> None:
    target, proxy = link
    target.close()
    with _connect(proxy) as sock:
        assert _closed_or_reset(sock) in ("eof", "reset")
