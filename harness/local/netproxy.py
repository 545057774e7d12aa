"""TCP proxies on 127.0.0.1 whose links a test or a nemesis can cut, hold, blackhole and reset:
the one link proxy of the harnesses (``harness.local.proxied.ProxiedEnsemble``, the fault harness's
``harness.jepsen.cluster``, the tests that cut a client's link).

Theory of operation
-------------------
A ``LinkProxy`` listens on a port of its own and forwards every connection it accepts to one
target port.  All proxies of a ``ProxyHub`` run as trio tasks in one background thread; the
nemesis changes them from ordinary threads (every call is handed to the trio thread, so the
proxy's state is only ever touched there).

A connection carries bytes in two directions: FORWARD (from the side that connected to the
target) and BACKWARD.  Faults, as a network would show them to the servers:

* ``cut``: live connections are closed (FIN both ways); new ones are reset at once.
* ``reset``: live connections are reset (RST, ``SO_LINGER`` 0) both ways; so are new ones.
* ``blackhole``: connections stay open and new ones are accepted, but no byte gets through in
  either direction; a new connection reaches the target only after the heal.
* ``hold(direction)``: one way only -- bytes going that way are held (the proxy stops
  reading, so TCP's own flow control holds the rest in the sender's buffers) while the other
  direction passes.  Held bytes are delivered after the heal, in order, like a TCP stream
  whose packets were delayed: discarding bytes instead would corrupt the stream, which no
  network does.
* ``heal``: back to passing every byte; what was held is delivered.
"""

from __future__ import annotations

import enum
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import trio

CHUNK_BYTES = 65536
CONNECT_TIMEOUT_S = 5.0
HUB_START_TIMEOUT_S = 10.0
HUB_STOP_TIMEOUT_S = 10.0

T = TypeVar("T")


class Mode(enum.Enum):
    PASS = "pass"
    CUT = "cut"
    RESET = "reset"
    BLACKHOLE = "blackhole"


class Direction(enum.Enum):
    FORWARD = "forward"  # connector -> target
    BACKWARD = "backward"  # target -> connector


@dataclass(eq=False)
class _Connection:
    """One accepted connection and (once connected) its upstream; owned by the trio thread."""

    downstream: trio.SocketStream
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    upstream: trio.SocketStream | None = None


def _abort(stream: trio.SocketStream | None, rst: bool) -> None:
    """Close a socket now: with RST (``SO_LINGER`` 0) or with a FIN."""
    if stream is None:
        return
    try:
        if rst:
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        stream.socket.close()
    except OSError:
        pass


class LinkProxy:
    """One listening port forwarding to ``target_port``; change it only through the hub's thread
    (the public methods do that for you)."""

    def __init__(self, hub: ProxyHub, target_port: int, name: str) -> None:
        self.hub = hub
        self.target_port = target_port
        self.name = name
        self.port = 0
        self.mode = Mode.PASS
        self.held: frozenset[Direction] = frozenset()
        self.accepted = 0
        self._connections: set[_Connection] = set()
        self._changed = trio.Event()

    # -- called from any thread ---------------------------------------------------------------

    def set_mode(self, mode: Mode) -> None:
        self.hub.call(self._set_mode, mode)

    def hold(self, direction: Direction) -> None:
        self.hub.call(self._set_held, self.held | {direction})

    def heal(self) -> None:
        self.hub.call(self._heal)

    def reset_connections(self) -> int:
        """RST every live connection once (the mode stays); how many there were."""
        return self.hub.call(self._drop_all, True)

    def connection_count(self) -> int:
        return self.hub.call(lambda: len(self._connections))

    # -- the trio thread ----------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _set_mode(self, mode: Mode) -> None:
        self.mode = mode
        if mode in (Mode.CUT, Mode.RESET):
            self._drop_all(rst=mode is Mode.RESET)
        self._notify()

    def _set_held(self, held: frozenset[Direction]) -> None:
        self.held = held
        self._notify()

    def _heal(self) -> None:
        self.mode = Mode.PASS
        self.held = frozenset()
        self._notify()

    def _drop_all(self, rst: bool) -> int:
        connections, self._connections = self._connections, set()
        for conn in connections:
            conn.scope.cancel()
            _abort(conn.downstream, rst)
            _abort(conn.upstream, rst)
        return len(connections)

    def _is_held(self, direction: Direction) -> bool:
        return self.mode is Mode.BLACKHOLE or direction in self.held

    async def _wait_released(self, direction: Direction) -> None:
        while self._is_held(direction):
            await self._changed.wait()

    async def serve(self, listener: trio.SocketListener) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                stream = await listener.accept()
                self.accepted += 1
                if self.mode in (Mode.CUT, Mode.RESET):
                    _abort(stream, rst=True)  # refused: the connector sees a reset at once
                    continue
                nursery.start_soon(self._handle, _Connection(downstream=stream))

    async def _handle(self, conn: _Connection) -> None:
        self._connections.add(conn)
        try:
            with conn.scope:
                while self.mode is Mode.BLACKHOLE:  # the target sees nothing until the heal
                    await self._changed.wait()
                with trio.fail_after(CONNECT_TIMEOUT_S):
                    conn.upstream = await trio.open_tcp_stream("127.0.0.1", self.target_port)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pipe, conn, conn.downstream, conn.upstream, Direction.FORWARD)
                    nursery.start_soon(self._pipe, conn, conn.upstream, conn.downstream, Direction.BACKWARD)
        except (OSError, trio.TooSlowError):
            pass  # the target is down: the connector sees its connection closed
        finally:
            if conn in self._connections:
                self._connections.discard(conn)
                _abort(conn.downstream, rst=False)
                _abort(conn.upstream, rst=False)

    async def _pipe(self, conn: _Connection, source: trio.SocketStream, dest: trio.SocketStream, direction: Direction) -> None:
        """Copy one direction until EOF; a held direction stops reading (TCP holds the rest).
        A broken socket ends the whole connection."""
        try:
            while True:
                await self._wait_released(direction)
                data = await source.receive_some(CHUNK_BYTES)
                await self._wait_released(direction)  # a read begun before the fault: held too, EOF included
                if not data:
                    await dest.send_eof()
                    return
                await dest.send_all(data)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            conn.scope.cancel()


class ProxyHub:
    """The trio thread that runs every proxy of a run.  ``close()`` always; it is bounded."""

    def __init__(self) -> None:
        self.proxies: list[LinkProxy] = []
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="link-proxies", daemon=True)
        self._thread.start()
        if not self._ready.wait(HUB_START_TIMEOUT_S) or self._token is None:
            raise RuntimeError(f"proxy thread did not start: {self._error!r}")

    def _main(self) -> None:
        async def run() -> None:
            async with trio.open_nursery() as nursery:
                self._token, self._nursery = trio.lowlevel.current_trio_token(), nursery
                self._ready.set()
                await trio.sleep_forever()

        try:
            trio.run(run)
        except BaseException as exc:  # noqa: BLE001 - reported by __init__ or close()
            self._error = exc
            self._ready.set()

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in the trio thread and return its result."""
        return trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    def add(self, target_port: int, name: str = "", port: int = 0) -> LinkProxy:
        """A new proxy to ``target_port``, listening on ``port`` of 127.0.0.1 (0: one the
        kernel picks)."""
        proxy = LinkProxy(self, target_port, name)

        async def open_listener() -> None:
            listeners = await trio.open_tcp_listeners(port, host="127.0.0.1", backlog=128)
            proxy.port = listeners[0].socket.getsockname()[1]
            assert self._nursery is not None
            self._nursery.start_soon(proxy.serve, listeners[0])

        trio.from_thread.run(open_listener, trio_token=self._token)
        self.proxies.append(proxy)
        return proxy

    def heal_all(self) -> None:
        for proxy in self.proxies:
            proxy.heal()

    def close(self) -> None:
        """Stop every proxy and the thread (closing every socket)."""
        if self._thread.is_alive() and self._nursery is not None:
            try:
                for proxy in self.proxies:
                    self.call(proxy._drop_all, False)
                self.call(self._nursery.cancel_scope.cancel)
            except trio.RunFinishedError:
                pass
        self._thread.join(HUB_STOP_TIMEOUT_S)
