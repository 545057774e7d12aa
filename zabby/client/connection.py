"""Host lists, the handshake and one live connection's send/receive loops (anyio: asyncio or trio).

Theory of operation
-------------------
A ``Connection`` wraps one TCP stream after a successful handshake.  Requests are
*submitted* synchronously: the request goes onto the protocol's ``pending`` deque and its
pre-packed frame onto ``out``; if the sender is idle it is woken.  The sender joins every
queued frame into one buffer and writes it with one ``send`` (so a burst of requests
costs one syscall); when nothing was sent for ``ping_interval_s`` it sends a ping.  The
receiver reads with a deadline of ``read_timeout_s`` (pings guarantee traffic), splits
frames, hands each to the protocol and completes the waiting request (``complete`` wakes
the task waiting in ``wait_for``).  Either loop ending ends the connection; the session
loop in ``aio.py`` then fails the requests in flight with ConnectionLoss and fails over.

Everything here runs under asyncio (uvloop included) and trio alike through anyio; the one
thing anyio lacks, a task that outlives its caller (kazoo's ``start()`` needs no nursery), is
``spawn_detached``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import anyio
import anyio.abc
import sniffio
from anyio.streams.tls import TLSStream

from zabby.errors import AuthFailedError, ConnectionDropped, Err, RemoteProtocolError
from zabby.opcodes import OpCode
from zabby.sasl import DigestMd5Client, SaslFailure
from zabby.wire.framing import FrameDecoder
from zabby.wire.messages import PROTOCOL_NAME, connect_request, pack_frame, unpack

from .protocol import ClientProtocol, Request, Watcher
from .states import WatchedEvent

log = logging.getLogger("zabby.client")

RECV_BYTES = 256 * 1024
DEFAULT_PORT = 2181


def parse_hosts(hosts: str | Sequence[str]) -> tuple[list[tuple[str, int]], str]:
    """``"h1:p1,h2:p2/chroot"`` → ([(h1, p1), (h2, p2)], "/chroot")."""
    if not isinstance(hosts, str):
        hosts = ",".join(hosts)
    hosts = hosts.strip()
    chroot = ""
    slash = hosts.find("/")
    if slash >= 0:
        hosts, chroot = hosts[:slash], hosts[slash:].rstrip("/")
    out: list[tuple[str, int]] = []
    for item in hosts.split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("["):  # [ipv6]:port
            host, _, port = item[1:].partition("]")
            out.append((host, int(port.lstrip(":") or DEFAULT_PORT)))
            continue
        host, _, port = item.rpartition(":") if item.count(":") == 1 else (item, "", "")
        out.append((host, int(port) if port else DEFAULT_PORT))
    if not out:
        raise ValueError(f"no hosts in {hosts!r}")
    return out, chroot


async def open_stream(host: tuple[str, int], context: ssl.SSLContext | None) -> anyio.abc.ByteStream:
    """A TCP connection to ``host``, over TLS when ``context`` is given (its handshake done).

    Raises:
        OSError: the host cannot be reached.
        ConnectionDropped: the TLS handshake failed; the message says why (OpenSSL's reason).
    """
    try:
        stream = await anyio.connect_tcp(*host)
    except OSError as exc:  # the message names the host (anyio's does not)
        raise OSError(f"all attempts to connect to {host[0]}:{host[1]} failed") from exc
    if context is None:
        return stream
    try:  # not standard_compatible: closing never waits for the server's close_notify
        return await TLSStream.wrap(stream, hostname=host[0], ssl_context=context, standard_compatible=False)
    except (ssl.SSLError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
        await anyio.aclose_forcefully(stream)
        raise ConnectionDropped(f"TLS handshake with {host[0]}:{host[1]} failed: {describe_failure(exc)} (is it a secure client port?)") from None


def describe_failure(exc: BaseException) -> str:
    """A failed connection attempt in words; a broken TLS stream tells what OpenSSL said (the
    server refusing our certificate, say)."""
    cause = exc.__cause__ if isinstance(exc, anyio.BrokenResourceError) else None
    if isinstance(exc, anyio.EndOfStream):
        return "the server closed the connection"
    return str(cause or exc) or type(exc).__name__


def running_asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or None under trio."""
    return None if sniffio.current_async_library() == "trio" else asyncio.get_running_loop()


def spawn_detached(fn: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
    """Run ``await fn()`` as a task of its own that outlives the caller (the event loop ends
    it): a trio system task, or an asyncio task.  ``fn`` must not raise."""
    loop = running_asyncio_loop()
    if loop is None:
        import trio

        trio.lowlevel.spawn_system_task(fn, name=name)
        return
    task = loop.create_task(fn(), name=name)
    _detached.add(task)  # asyncio keeps only a weak reference to a task
    task.add_done_callback(_detached.discard)


_detached: set[asyncio.Task[None]] = set()


class Signal:
    """Wakes every task waiting in ``wait()`` at the next ``fire()`` (an Event made anew each
    time, and only when someone waits, so firing with no waiter costs nothing).  Made outside
    any event loop, as a client is; usable under whichever loop the client runs in."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event: anyio.Event | None = None

    @property
    def waiting(self) -> bool:
        return self._event is not None

    def fire(self) -> None:
        event, self._event = self._event, None
        if event is not None:
            event.set()

    async def wait(self) -> None:
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()


def host_order(hosts: list[tuple[str, int]], randomize: bool) -> list[tuple[str, int]]:
    order = list(hosts)
    if randomize:
        random.shuffle(order)
    return order


def rebalance(old: list[tuple[str, int]], new: list[tuple[str, int]], current: tuple[str, int] | None,
              rng: random.Random | None = None) -> tuple[str, int] | None:  # fmt: skip
    """The server a client connected to ``current`` moves to when its host list changes from
    ``old`` to ``new`` (None: stay), as ZooKeeper's StaticHostProvider.updateServerList: a
    client whose server left moves to any new one; when servers were added, a client stays
    with probability (servers kept) / (servers now) and otherwise moves to an added one, so
    that the load spreads evenly without moving more clients than that needs."""
    if current is None or not new:
        return None
    choose = rng or random
    if current not in new:
        return choose.choice(new)
    added = [host for host in new if host not in old]
    kept = len(new) - len(added)
    if added and choose.random() < 1 - kept / len(new):
        return choose.choice(added)
    return None


class Handshake:
    """The server's answer to the connect request."""

    __slots__ = ("err", "timeout_ms", "session_id", "password", "server_zxid", "read_only", "message")

    def __init__(self, reply: list[Any]) -> None:
        if len(reply) < 8 or reply[0] != PROTOCOL_NAME:
            raise RemoteProtocolError(f"bad connect reply {reply[:3]!r}")
        _, _, self.err, self.timeout_ms, self.session_id, self.password, self.server_zxid, self.read_only = reply[:8]
        self.message = reply[8] if len(reply) > 8 else ""


async def handshake(
    stream: anyio.abc.ByteStream, decoder: FrameDecoder, last_zxid: int, timeout_ms: int, session_id: int, password: bytes, read_only: bool
) -> Handshake:
    await stream.send(pack_frame(connect_request(last_zxid, timeout_ms, session_id, password, read_only)))
    return Handshake(await _one_reply(stream, decoder, "the handshake"))


async def _one_reply(stream: anyio.abc.ByteStream, decoder: FrameDecoder, during: str) -> Any:
    """The one frame the server answers with before the connection runs (nothing else may come)."""
    for _ in range(10_000):  # bounded: the reply is one small frame
        try:
            data = await stream.receive(RECV_BYTES)
        except anyio.EndOfStream:
            raise ConnectionDropped(f"server closed the connection during {during}") from None
        frames = decoder.receive_data(data)
        if frames:
            if len(frames) > 1:
                raise RemoteProtocolError(f"server sent frames before the reply of {during}")
            return unpack(frames[0])
    raise RemoteProtocolError(f"no reply during {during}")


async def sasl_exchange(stream: anyio.abc.ByteStream, decoder: FrameDecoder, proto: ClientProtocol, client: DigestMd5Client) -> None:
    """Authenticate by SASL (op 102) before the connection runs, one step after the other, as
    ZooKeeper's clients do.  Raises: AuthFailedError (the server refused, or could not prove
    it knows the password); ConnectionDropped."""
    token = client.step(b"")
    for _ in range(8):  # DIGEST-MD5 is two round trips
        if token is None:
            return
        await stream.send(pack_frame([proto.next_xid(), OpCode.SASL, token]))
        reply = await _one_reply(stream, decoder, "SASL authentication")
        if not isinstance(reply, list) or len(reply) < 4 or reply[2] != 0:
            raise AuthFailedError(f"SASL authentication failed: {reply[3] if isinstance(reply, list) and len(reply) > 3 else reply!r}")
        try:
            token = client.step(reply[3])
        except SaslFailure as exc:
            raise AuthFailedError(f"SASL authentication failed: {exc}") from None
    raise AuthFailedError("SASL authentication did not finish")


def complete(request: Request) -> None:
    """Hand a finished request's outcome to whoever waits for it (task or callback)."""
    waiter = request.task
    if waiter is not None:
        request.task = None
        if isinstance(waiter, asyncio.Future):
            if not waiter.done():  # done: its task was cancelled meanwhile
                waiter.set_result(None)
        else:
            waiter.set()
    elif request.callback is not None:
        request.callback(request)


async def wait_for(request: Request, loop: asyncio.AbstractEventLoop | None) -> Any:
    """Suspend the current task until ``complete(request)``, then return its result or raise
    its error.  ``loop``: the asyncio loop the client runs in, whose bare future is the
    cheapest wake-up there (None under trio: an anyio Event).  Cancellation (a cancel scope,
    or asyncio's ``task.cancel()``) abandons the reply: it is read and dropped when it comes."""
    waiter: asyncio.Future[None] | anyio.Event = loop.create_future() if loop is not None else anyio.Event()
    request.task = waiter
    try:
        await waiter.wait() if isinstance(waiter, anyio.Event) else await waiter
    finally:
        request.task = None
    if request.ok:
        return request.result
    raise request.result


class Connection:
    """One established connection: the send buffer and the two loops."""

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        decoder: FrameDecoder,
        proto: ClientProtocol,
        timeout_ms: int,
        dispatch: Callable[[Watcher, WatchedEvent], None],
        host: tuple[str, int],
    ) -> None:
        self.stream = stream
        self.decoder = decoder
        self.proto = proto
        self.host = host
        self.ping_interval_s = max(timeout_ms / 3000.0, 0.01)
        self.read_timeout_s = max(timeout_ms * 2 / 3000.0, 0.02)
        self.dispatch = dispatch
        self.out: list[bytes] = []
        self.wake = Signal()
        self.error: BaseException | None = None
        self.closed = False
        self.on_drain: Callable[[], None] | None = None
        self._scope: anyio.CancelScope | None = None

    def submit(self, request: Request) -> None:
        self.proto.pending.append(request)
        self.out.append(request.frame)
        self.wake.fire()

    async def run(self) -> None:
        """Run both loops until either ends; ``self.error`` says why."""
        try:
            async with anyio.create_task_group() as tasks:
                self._scope = tasks.cancel_scope
                tasks.start_soon(self._guard, self._send_loop, tasks.cancel_scope)
                await self._guard(self._recv_loop, tasks.cancel_scope)
        finally:
            self.closed = True
            await anyio.aclose_forcefully(self.stream)  # shielded: never waits on the network

    def leave(self, reason: str) -> None:
        """End this connection on purpose (the session goes on, on another server)."""
        if self.error is None:
            self.error = ConnectionDropped(reason)
        if self._scope is not None:
            self._scope.cancel()

    async def _guard(self, loop: Callable[[], Awaitable[None]], scope: anyio.CancelScope) -> None:
        try:
            await loop()
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionDropped, RemoteProtocolError) as exc:
            if self.error is None:
                self.error = exc
        except Exception as exc:  # a protocol surprise: keep the cause, drop the link
            log.exception("connection to %s:%s failed", *self.host)
            if self.error is None:
                self.error = exc
        finally:
            scope.cancel()

    async def _send_loop(self) -> None:
        out, proto, stream = self.out, self.proto, self.stream
        while True:
            if not out:
                with anyio.move_on_after(self.ping_interval_s):
                    await self.wake.wait()
                if not out:
                    ping = proto.ping_request()
                    proto.pending.append(ping)
                    out.append(ping.frame)
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            await stream.send(data)

    async def _recv_loop(self) -> None:
        stream, decoder, proto, dispatch = self.stream, self.decoder, self.proto, self.dispatch
        while True:
            with anyio.move_on_after(self.read_timeout_s) as scope:
                try:
                    data = await stream.receive(RECV_BYTES)
                except anyio.EndOfStream:
                    raise ConnectionDropped(f"server {self.host[0]}:{self.host[1]} closed the connection") from None
            if scope.cancelled_caught:
                raise ConnectionDropped(f"no data from {self.host[0]}:{self.host[1]} for {self.read_timeout_s:.1f}s")
            for frame in decoder.receive_data(data):
                request, events = proto.handle_message(unpack(frame))
                if request is not None:
                    complete(request)
                    if request.ok is False and getattr(request.result, "code", None) == Err.SESSIONEXPIRED:
                        raise ConnectionDropped("server reports the session expired")
                for watchers, event in events:
                    for watcher in watchers:
                        dispatch(watcher, event)
            if self.on_drain is not None:
                self.on_drain()
