"""``zabby.Client``: the async client with kazoo's API, for asyncio and trio alike.

Theory of operation
-------------------
The client is written against anyio, so the same code runs under ``asyncio.run`` (uvloop
included) and ``trio.run``, with each framework's cancellation: a call cancelled (a cancel
scope, ``asyncio.wait_for``, ``task.cancel()``) is abandoned, its reply read and dropped, and
the session goes on.  A client may be made outside any event loop; it binds to the loop that
starts it.

``start()`` spawns one detached task (a trio system task or an asyncio task, so no nursery
is needed from the caller, as with kazoo's ``start()``) that owns the session: it runs the
watch/listener dispatcher and the session loop.  The session loop walks the server list (shuffled once per round), connects
with a per-host timeout, and sends the handshake with the last zxid seen and the session
id/password; a server behind the client answers CONNECTIONLOSS and the next one is tried,
a server that does not know the session answers SESSIONEXPIRED and the session is reported
LOST (SessionExpiredError to every waiting call) -- it is never silently replaced by a new
one (``reconnect_after_expiry=True`` opts into kazoo's behaviour of opening a new session
after reporting LOST).  After a handshake the saved credentials (``add_auth``) and every
registered watch (one setWatches with the last zxid) are sent first, then state CONNECTED.
When the connection ends, requests in flight fail with ConnectionLoss, state becomes
SUSPENDED and the loop fails over while the session is still alive on the server.

A request call packs its frame, submits it to the live connection (pipelined: any number in
flight, bounded by ``max_in_flight``) and waits until the reader completes it.
Calls made while disconnected wait for a connection for at most the session timeout, then
raise ConnectionLoss.

Watch callbacks and state listeners run sequentially, in event order, in a dispatcher task
(an async callback is awaited there); ``watch()`` turns a persistent watch into an async
iterator (``watching.py``).  A subclass may override ``_dispatch`` (SyncClient runs
them on its callback thread).  The dispatcher queue is unbounded on purpose: the reader
must never block on a slow callback, or a callback calling the client would deadlock.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import ssl
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Literal, ParamSpec, TypeVar, overload

import anyio
import anyio.abc

from zabby.errors import (
    AuthFailedError,
    BadArgumentsError,
    ConfigurationError,
    ConnectionClosedError,
    ConnectionDropped,
    ConnectionLoss,
    Err,
    ForkedClientError,
    HistoryCompactedError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RemoteProtocolError,
    SessionExpiredError,
)
from zabby.membership import Membership, MembershipError
from zabby.opcodes import AddWatchMode, CreateMode, OpCode, WatcherType, TTL_MAX_MS
from zabby.sasl import DigestMd5Client
from zabby.wire.framing import FrameDecoder

from . import protocol as p
from .connection import (
    Connection, Signal, complete, describe_failure, handshake, host_order, open_stream, parse_hosts, rebalance, sasl_exchange,
    running_asyncio_loop, spawn_detached, wait_for,
)  # fmt: skip
from .exceptions import KazooTimeoutError
from .security import OPEN_ACL_UNSAFE, acl_to_wire
from .states import EventType, KazooState, KeeperState, WatchedEvent, ZnodeStat
from .watching import WatchStream

log = logging.getLogger("zabby.client")
_T = TypeVar("_T")
_P = ParamSpec("_P")
CONFIG_PATH = "/zookeeper/config"

MAX_IN_FLIGHT_DEFAULT = 20_000
CLOSE_SESSION_S_MAX = 5.0  # stop() waits this long at most for the server to close the session
_OPEN_ACL_WIRE = acl_to_wire(OPEN_ACL_UNSAFE)
_FORKED = "this zabby client was created before os.fork(); a client cannot be shared with a forked child. Create a new client in the child process."

_live_clients: "weakref.WeakSet[Any]" = weakref.WeakSet()


def _mark_forked() -> None:
    for client in list(_live_clients):
        client._forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mark_forked)


class TransactionRequest:
    """kazoo's transaction builder: add ops, then ``await commit()`` for per-op results."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.operations: list[list[Any]] = []
        self.committed = False

    def create(self, path: str, value: bytes = b"", acl: Sequence[Any] | None = None, ephemeral: bool = False, sequence: bool = False, *, container: bool = False, ttl: int | None = None) -> None:
        _check_bytes(value)
        op, flags, ttl_ms = _create_mode(ephemeral, sequence, container, ttl)
        op = OpCode.CREATE if op == OpCode.CREATE2 else op
        self._add([op, self.client._spath(path), value, self.client._wire_acl(acl), flags, ttl_ms])

    def delete(self, path: str, version: int = -1) -> None:
        self._add([OpCode.DELETE, self.client._spath(path), _check_int(version)])

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        _check_bytes(value)
        self._add([OpCode.SET_DATA, self.client._spath(path), value, _check_int(version)])

    def check(self, path: str, version: int) -> None:
        self._add([OpCode.CHECK, self.client._spath(path), _check_int(version)])

    async def commit(self) -> list[Any]:
        self._check_tx_state()
        self.committed = True
        return await self.client._call(OpCode.MULTI, [self.operations], p.decode_multi)

    def _add(self, op: list[Any]) -> None:
        self._check_tx_state()
        self.operations.append(op)

    def _check_tx_state(self) -> None:
        if self.committed:
            raise ValueError("Transaction already committed")

    async def __aenter__(self) -> TransactionRequest:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            await self.commit()


def _check_bytes(value: Any) -> None:
    if not isinstance(value, bytes):
        raise TypeError("Invalid type for 'value' (must be a byte string)")


def _check_int(value: Any) -> int:
    if not isinstance(value, int):
        raise TypeError("Invalid type for 'version' (int expected)")
    return value


def _create_mode(ephemeral: bool, sequence: bool, container: bool, ttl: int | None) -> tuple[int, int, int]:
    """(op, flags, ttl_ms) for the create flags; ``ttl`` is in milliseconds (ZooKeeper's unit)."""
    if container:
        if ephemeral or sequence or ttl:
            raise TypeError("a container node cannot be ephemeral, sequential or have a TTL")
        return OpCode.CREATE_CONTAINER, CreateMode.CONTAINER, 0
    if ttl:
        if ephemeral:
            raise TypeError("a TTL node cannot be ephemeral")
        if not (isinstance(ttl, int) and 0 < ttl <= TTL_MAX_MS):
            raise TypeError(f"ttl must be an int of milliseconds in 1..{TTL_MAX_MS}")
        mode = CreateMode.PERSISTENT_SEQUENTIAL_WITH_TTL if sequence else CreateMode.PERSISTENT_WITH_TTL
        return OpCode.CREATE_TTL, mode, ttl
    return OpCode.CREATE2, (1 if ephemeral else 0) | (2 if sequence else 0), 0



# why a connection attempt can fail (TimeoutError: anyio.fail_after; ssl.SSLError is an OSError)
_CONNECT_FAILURES = (OSError, TimeoutError, anyio.BrokenResourceError, anyio.EndOfStream, ConnectionDropped, RemoteProtocolError)

RW_PROBE_S_MIN = 0.1
RW_PROBE_S_MAX = 60.0


async def _answers_read_write(host: tuple[str, int]) -> bool:
    """Does ``host`` answer the four-letter word isro with rw (it serves writes)?"""
    try:
        with anyio.fail_after(RW_PROBE_S_MAX / 10):
            async with await anyio.connect_tcp(*host) as stream:
                await stream.send(b"isro")
                return (await stream.receive(16)).startswith(b"rw")
    except (OSError, anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        return False

class Client:
    """The async zabby client (asyncio or trio); see the module docstring."""

    def __init__(
        self,
        hosts: str = "127.0.0.1:2181",
        timeout: float = 10.0,
        client_id: tuple[int, bytes] | None = None,
        default_acl: Sequence[Any] | None = None,
        auth_data: Iterable[tuple[str, Any]] | None = None,
        read_only: bool = False,
        connection_retry: Any = None,
        command_retry: Any = None,
        *,
        randomize_hosts: bool = True,
        reconnect_after_expiry: bool = False,
        max_in_flight: int = MAX_IN_FLIGHT_DEFAULT,
        follow_config: bool = False,
        ssl_context: ssl.SSLContext | None = None,
        sasl_options: dict[str, Any] | None = None,
    ) -> None:
        """``ssl_context``: connect over TLS (the servers' secure client port).  Build it with
        ``zabby.tls.client_context``, which takes kazoo's ``ca``, ``certfile``, ``keyfile``,
        ``keyfile_password``, ``verify_certs`` and ``check_hostname`` (``SyncClient`` takes
        them as kazoo's ``KazooClient`` does, with ``use_ssl=True``).  ``sasl_options``:
        kazoo's, ``{"mechanism": "DIGEST-MD5", "username": ..., "password": ...}``: every
        connection authenticates by SASL before any request (docs/operations.md, *SASL*)."""
        self._sasl_credentials = _sasl_credentials(sasl_options)
        self.hosts, self.chroot = parse_hosts(hosts)
        self._ssl_context = ssl_context
        self.randomize_hosts = randomize_hosts
        self._timeout_s = float(timeout)
        self._session_id, self._password = client_id if client_id else (0, b"")
        self.default_acl = list(default_acl) if default_acl else None
        self._auth_data: list[tuple[str, bytes]] = [(s, _cred_bytes(c)) for s, c in (auth_data or ())]
        self.read_only = bool(read_only)
        self.connection_retry = connection_retry
        self.command_retry = command_retry
        self.reconnect_after_expiry = reconnect_after_expiry
        self._max_in_flight = max(1, int(max_in_flight))
        self.follow_config = follow_config  # the host list follows /zookeeper/config
        self._proto = p.ClientProtocol(self.chroot)
        self.state = KazooState.LOST
        self._keeper_state = KeeperState.CLOSED
        self.state_listeners: list[Callable[[KazooState], Any]] = []
        self._conn: Connection | None = None
        self._conn_changed = Signal()
        self._fatal: KazooException | None = ConnectionClosedError("client is not started")
        self._negotiated_timeout_ms = int(self._timeout_s * 1000)
        self._scope: anyio.CancelScope | None = None
        self._done: anyio.Event | None = None
        self._events: deque[tuple[Callable[..., Any], Any]] = deque()
        self._events_wake = Signal()
        self._room = Signal()
        self._current_host: tuple[str, int] | None = None
        self._next_host: tuple[str, int] | None = None  # try it first (a read-write server, or a rebalance)
        self._last_failure = ""  # why the last connection attempt failed, for a timed-out start
        self._seen_read_write = False  # ZooKeeper's seenRwServerBefore: until then a session is local
        self._forked = False
        self._pid = os.getpid()
        self._asyncio_loop: asyncio.AbstractEventLoop | None = None  # the loop it runs in, under asyncio
        _live_clients.add(self)

    # -- properties ----------------------------------------------------------------------
    @property
    def client_id(self) -> tuple[int, bytes] | None:
        return (self._session_id, self._password) if self._session_id else None

    @property
    def client_state(self) -> KeeperState:
        return self._keeper_state

    @property
    def connected(self) -> bool:
        return self.state == KazooState.CONNECTED

    @property
    def last_zxid(self) -> int:
        return self._proto.last_zxid

    @property
    def session_timeout_ms(self) -> int:
        return self._negotiated_timeout_ms

    def unchroot(self, path: str) -> str:
        return self._proto.client_path(path)

    def add_listener(self, listener: Callable[[KazooState], Any]) -> None:
        if not callable(listener):
            raise ConnectionClosedError("listener must be callable")
        self.state_listeners.append(listener)

    def remove_listener(self, listener: Callable[[KazooState], Any]) -> None:
        if listener in self.state_listeners:
            self.state_listeners.remove(listener)

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self, timeout: float = 15) -> None:
        """Connect (or re-attach ``client_id``) and wait up to ``timeout`` seconds."""
        self._check_fork()
        if self._scope is None:
            self._fatal = None
            self._keeper_state = KeeperState.CONNECTING
            self._conn_changed, self._events_wake, self._room = Signal(), Signal(), Signal()  # none of an earlier loop's
            self._asyncio_loop = running_asyncio_loop()
            self._done = anyio.Event()
            self._scope = anyio.CancelScope()
            spawn_detached(functools.partial(self._session_task, self._scope, self._done), name="zabby-client-session")
        with anyio.move_on_after(timeout):
            while self._conn is None and self._fatal is None:
                await self._conn_changed.wait()
        if self._conn is not None:
            return
        fatal = self._fatal
        await self.stop()
        if fatal is not None:
            raise fatal
        raise KazooTimeoutError(f"Connection time-out: {self._last_failure}" if self._last_failure else "Connection time-out")

    async def stop(self) -> None:
        """Close the session (ephemeral nodes go at once) and stop connecting.  Bounded: the
        close request waits at most min(timeout, CLOSE_SESSION_S_MAX), the callbacks still
        queued as long again (then the rest are dropped, with a warning)."""
        self._check_fork()
        if self._scope is None:
            return
        bound_s = min(self._timeout_s, CLOSE_SESSION_S_MAX)
        if self._conn is not None and not self._conn.closed:
            with anyio.move_on_after(bound_s):
                try:
                    await self._call(OpCode.CLOSE_SESSION, [], p.decode_none)
                except KazooException:
                    pass
        self._scope.cancel()
        done = self._done
        if done is not None:
            await done.wait()
        self._shutdown(ConnectionClosedError("Connection has been closed"), KeeperState.CLOSED)
        self._session_id, self._password = 0, b""
        with anyio.move_on_after(bound_s) as callbacks:
            await self._drain_events()
        if callbacks.cancelled_caught:
            log.warning("zabby client stop: callbacks still running after %.1fs; %d events dropped", bound_s, len(self._events))
            self._events.clear()

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def close(self) -> None:
        """Free everything; the client cannot be used afterwards (as kazoo's close)."""
        await self.stop()
        self._fatal = ConnectionClosedError("Connection has been closed")

    async def __aenter__(self) -> Client:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _check_fork(self) -> None:
        if self._forked or self._pid != os.getpid():
            self._forked = True
            raise ForkedClientError(_FORKED)

    # -- the session task ----------------------------------------------------------------
    async def _session_task(self, scope: anyio.CancelScope, done: anyio.Event) -> None:
        try:
            with scope:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._dispatch_loop)
                    try:
                        await self._session_loop()
                        await self._drain_events()
                    finally:
                        tasks.cancel_scope.cancel()
        except Exception as exc:  # a detached task must not raise: report it as fatal
            log.exception("zabby client session task failed")
            self._shutdown(ConnectionClosedError(f"client failed: {exc!r}"), KeeperState.CLOSED)
        finally:
            self._scope = None
            done.set()

    async def _session_loop(self) -> None:
        failures = 0
        while True:
            hosts = self.hosts
            for host in self._hosts_to_try():
                if self.hosts is not hosts:
                    break  # the list changed (update_server_list, follow_config): a round of the new one
                result = await self._attempt(host)
                if result == "refused":
                    return
                if result == "expired":
                    self._expire()
                    if not self.reconnect_after_expiry:
                        return
                    self._fatal = None
                if result in ("connected", "expired"):
                    failures = 0
            else:
                failures = min(failures + 1, 6)
                await anyio.sleep(min(0.02 * 2**failures, 1.0))

    def _hosts_to_try(self) -> list[tuple[str, int]]:
        order = host_order(self.hosts, self.randomize_hosts)
        found, self._next_host = self._next_host, None
        return [found] + [h for h in order if h != found] if found is not None else order

    async def _attempt(self, host: tuple[str, int]) -> str:
        """One connection: handshake, run until it ends. Returns failed/expired/refused/connected."""
        if self.read_only and not self._seen_read_write:
            self._session_id, self._password = 0, b""  # a session of a read-only server is its own
        decoder = FrameDecoder()
        connect_timeout_s = max(self._timeout_s / len(self.hosts), 0.5)
        stream = None
        try:
            with anyio.fail_after(connect_timeout_s):
                stream = await open_stream(host, self._ssl_context)
                reply = await handshake(stream, decoder, self._proto.last_zxid, int(self._timeout_s * 1000), self._session_id, self._password, self.read_only)
        except _CONNECT_FAILURES as exc:
            log.debug("connect to %s:%s failed: %r", host[0], host[1], exc)
            self._last_failure = f"{host[0]}:{host[1]}: {describe_failure(exc)}"
            if stream is not None:
                await anyio.aclose_forcefully(stream)
            return "failed"
        if reply.err != 0 or reply.timeout_ms <= 0:
            await anyio.aclose_forcefully(stream)
            if reply.err in (Err.SESSIONEXPIRED, 0):
                return "expired"
            if reply.err == Err.AUTHFAILED:  # e.g. plaintext on a secure port: no retry can help
                self._shutdown(AuthFailedError(f"{host[0]}:{host[1]}: {reply.message}"), KeeperState.AUTH_FAILED)
                return "refused"
            log.info("server %s:%s refused the session: %s (%s)", host[0], host[1], reply.message, reply.err)
            return "failed"
        if self._sasl_credentials is not None:
            try:
                with anyio.fail_after(connect_timeout_s):
                    await sasl_exchange(stream, decoder, self._proto, DigestMd5Client(*self._sasl_credentials))
            except AuthFailedError as exc:  # a wrong password is wrong on every server
                await anyio.aclose_forcefully(stream)
                self._shutdown(AuthFailedError(f"{host[0]}:{host[1]}: {exc}"), KeeperState.AUTH_FAILED)
                return "refused"
            except _CONNECT_FAILURES as exc:
                self._last_failure = f"{host[0]}:{host[1]}: SASL: {describe_failure(exc)}"
                await anyio.aclose_forcefully(stream)
                return "failed"
        if host not in self.hosts:  # the list changed while this handshake was under way: the
            self._session_id, self._password = reply.session_id, reply.password  # session moves
            await anyio.aclose_forcefully(stream)
            return "failed"
        await self._run(host, stream, decoder, reply.timeout_ms, reply.session_id, reply.password, reply.read_only)
        return "expired" if self._fatal is not None and isinstance(self._fatal, SessionExpiredError) else "connected"

    async def _run(self, host: tuple[str, int], stream: anyio.abc.ByteStream, decoder: FrameDecoder, timeout_ms: int, session_id: int, password: bytes, read_only: bool) -> None:
        self._session_id, self._password = session_id, password
        self._negotiated_timeout_ms = timeout_ms
        self._current_host = host
        conn = Connection(stream, decoder, self._proto, timeout_ms, self._deliver, host)
        conn.on_drain = self._on_drain
        self._prime(conn)
        if self.follow_config:
            self._read_config(conn)
        self._conn = conn
        self._keeper_state = KeeperState.CONNECTED_RO if read_only else KeeperState.CONNECTED
        self._seen_read_write = self._seen_read_write or not read_only
        self._set_state(KazooState.CONNECTED)
        self._signal_conn_changed()
        try:
            if read_only:  # and look for a server with a quorum meanwhile
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._seek_read_write, host, conn)
                    await conn.run()
                    tasks.cancel_scope.cancel()
            else:
                await conn.run()
        finally:
            self._conn = None
            for request in self._proto.drop_connection():
                request.ok, request.result = False, p.connection_loss()
                complete(request)
            self._signal_conn_changed()
        if isinstance(conn.error, ConnectionDropped) and "session expired" in str(conn.error):
            self._fatal = SessionExpiredError("the server reports the session expired")
            return
        log.info("connection to %s:%s lost: %r", host[0], host[1], conn.error)
        self._keeper_state = KeeperState.CONNECTING
        self._set_state(KazooState.SUSPENDED)

    async def _seek_read_write(self, current: tuple[str, int], conn: Connection) -> None:
        """Connected read-only: ask the other servers ``isro`` (backing off, as ZooKeeper's
        client does) and leave for the first that answers ``rw``."""
        delay_s = RW_PROBE_S_MIN
        while True:
            await anyio.sleep(delay_s)
            for host in self.hosts:
                if host != current and await _answers_read_write(host):
                    log.info("server %s:%s has a quorum: leaving read-only mode", *host)
                    self._next_host = host
                    conn.leave("leaving read-only mode")
                    return
            delay_s = min(delay_s * 2, RW_PROBE_S_MAX)

    def _prime(self, conn: Connection) -> None:
        """Queue the saved credentials and the setWatches before any user request."""
        for scheme, credential in self._auth_data:
            request = self._proto.auth_request(scheme, credential)
            request.callback = _log_auth_failure
            conn.submit(request)
        set_watches = self._proto.set_watches_request()
        if set_watches is not None:
            set_watches.callback = _log_failure
            conn.submit(set_watches)
        for resume in self._proto.resume_requests():
            resume.callback = functools.partial(self._resumed, conn)
            conn.submit(resume)

    def _resumed(self, conn: Connection, request: p.Request) -> None:
        """A persistent watch's resume was answered.  Refused (the history here does not reach
        back): another server is tried, as after any lost connection, until as many as the
        client has refused it; then it is added again live and its watcher hears HISTORY_LOST."""
        if request.ok or conn.closed:
            return
        if not isinstance(request.result, HistoryCompactedError):
            if not isinstance(request.result, ConnectionLoss):
                log.warning("resuming the watch on %s failed (%r): it resumes at the next connection", request.path, request.result)
            return
        live = self._proto.resume_refused(request, len(self.hosts))
        if live is None:
            log.info("server %s:%s cannot resume the watch on %s (%s): trying another", *conn.host, request.path, request.result)
            conn.leave("a persistent watch's history is compacted on this server")
            return
        log.warning("no server could resume the watch on %s: added again live (its watcher hears HISTORY_LOST)", request.path)
        live.callback = _log_failure
        conn.submit(live)

    # -- following the ensemble's configuration -----------------------------------------
    def _deliver(self, watcher: Callable[[WatchedEvent], Any], event: WatchedEvent) -> None:
        """A watch event off the wire: the configuration watch is the client's own."""
        if watcher == self._config_changed:
            self._config_changed(event)
        else:
            self._dispatch(watcher, event)

    def _config_changed(self, event: WatchedEvent) -> None:
        conn = self._conn
        if conn is not None and not conn.closed and event.type in (EventType.CHANGED, EventType.CREATED):
            self._read_config(conn)

    def _read_config(self, conn: Connection) -> None:
        """Read ``/zookeeper/config`` (outside any chroot) and watch it."""
        request = self._proto.new_request(OpCode.GET_DATA, [CONFIG_PATH, True], p.decode_get, CONFIG_PATH, self._config_changed)
        request.callback = self._config_read
        conn.submit(request)

    def _config_read(self, request: p.Request) -> None:
        if not request.ok:
            log.debug("reading %s failed: %r", CONFIG_PATH, request.result)
            return
        hosts = client_addresses(request.result[0])
        if hosts and set(hosts) != set(self.hosts):
            log.info("the ensemble's configuration names %s", ",".join(f"{h}:{port}" for h, port in hosts))
            self._move(hosts)

    def update_server_list(self, hosts: str | Sequence[str]) -> None:
        """Use these servers from now on (ZooKeeper's updateServerList): the session moves
        when its server is gone, or, with the probability that evens the load, to an added one.
        A chroot in ``hosts`` is ignored: the session keeps its own."""
        new, _ = parse_hosts(hosts)
        self._move(new)

    def _move(self, new: list[tuple[str, int]]) -> None:
        old, self.hosts = self.hosts, new
        target = rebalance(old, new, self._current_host if self._conn is not None else None)
        conn = self._conn
        if target is not None and conn is not None:
            log.info("moving the session to %s:%s (the server list changed)", *target)
            self._next_host = target
            conn.leave("rebalanced to another server")

    def _expire(self) -> None:
        log.warning("zabby session 0x%x expired", self._session_id)
        self._shutdown(SessionExpiredError("the session expired"), KeeperState.EXPIRED_SESSION)
        self._session_id, self._password = 0, b""

    def _shutdown(self, fatal: KazooException, keeper_state: KeeperState) -> None:
        """Enter LOST: fail every waiter with ``fatal`` and fire every watch with NONE."""
        self._fatal = fatal
        self._keeper_state = keeper_state
        for request in self._proto.drop_connection():
            request.ok, request.result = False, fatal
            complete(request)
        for watchers, event in self._proto.expire():
            for watcher in watchers:
                self._dispatch(watcher, event._replace(state=keeper_state))
        self._set_state(KazooState.LOST)
        self._signal_conn_changed()

    def _signal_conn_changed(self) -> None:
        self._conn_changed.fire()
        self._room.fire()

    def _on_drain(self) -> None:
        if self._room.waiting and len(self._proto.pending) < self._max_in_flight:
            self._room.fire()

    # -- callbacks -----------------------------------------------------------------------
    def _set_state(self, state: KazooState) -> None:
        if state == self.state:
            return
        self.state = state
        for listener in list(self.state_listeners):
            self._dispatch(self._run_listener, (listener, state))

    def _run_listener(self, args: tuple[Callable[[KazooState], Any], KazooState]) -> Any:
        listener, state = args
        result = listener(state)
        if result is True:
            self.remove_listener(listener)
        return result

    def _dispatch(self, fn: Callable[[Any], Any], arg: Any) -> None:
        self._events.append((fn, arg))
        self._events_wake.fire()

    async def _dispatch_loop(self) -> None:
        while True:
            await self._drain_events()
            await self._events_wake.wait()

    async def _drain_events(self) -> None:
        events = self._events
        while events:
            fn, arg = events.popleft()
            try:
                result = fn(arg)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("error in zabby watch or listener callback %r", fn)

    # -- the request path ----------------------------------------------------------------
    async def _connection(self) -> Connection:
        """The live connection, waiting up to the session timeout for one."""
        conn = self._conn
        if conn is not None and not conn.closed and not self._forked:  # a forked child's copy must not be used
            return conn
        self._check_fork()
        with anyio.move_on_after(self._timeout_s):
            while True:
                if self._fatal is not None:
                    raise self._fatal
                conn = self._conn
                if conn is not None and not conn.closed:
                    return conn
                await self._conn_changed.wait()
        raise ConnectionLoss(f"not connected to any server within {self._timeout_s}s")

    async def _call(self, op: int, args: list[Any], decode: p.Decoder[_T], path: str | None = None, watch: Any = None, kind: str | None = None) -> _T:
        conn = self._conn
        if conn is None or conn.closed or self._forked:
            conn = await self._connection()
        if len(self._proto.pending) >= self._max_in_flight:
            conn = await self._wait_for_room()
        request = self._proto.new_request(op, args, decode, path, watch, kind)
        conn.submit(request)
        result: _T = await wait_for(request, self._asyncio_loop)
        return result

    async def _wait_for_room(self) -> Connection:
        for _ in range(1_000_000):  # bounded: each round waits for replies or a reconnect
            if len(self._proto.pending) < self._max_in_flight:
                return await self._connection()
            await self._room.wait()
        raise ConnectionLoss("no room for the request")

    def _spath(self, path: str) -> str:
        return self._proto.server_path(path)

    def _wire_acl(self, acl: Sequence[Any] | None) -> list[list[Any]]:
        if acl is None:
            acl = self.default_acl
        return _OPEN_ACL_WIRE if acl is None else acl_to_wire(acl)

    # -- the kazoo API -------------------------------------------------------------------
    @overload
    async def create(self, path: str, value: bytes = ..., acl: Sequence[Any] | None = ..., ephemeral: bool = ..., sequence: bool = ..., makepath: bool = ...,
                     include_data: Literal[False] = ..., *, container: bool = ..., ttl: int | None = ...) -> str: ...
    @overload
    async def create(self, path: str, value: bytes, acl: Sequence[Any] | None, ephemeral: bool, sequence: bool, makepath: bool,
                     include_data: Literal[True], *, container: bool = ..., ttl: int | None = ...) -> tuple[str, ZnodeStat]: ...
    @overload
    async def create(self, path: str, value: bytes = ..., acl: Sequence[Any] | None = ..., ephemeral: bool = ..., sequence: bool = ..., makepath: bool = ...,
                     *, include_data: Literal[True], container: bool = ..., ttl: int | None = ...) -> tuple[str, ZnodeStat]: ...
    @overload
    async def create(self, path: str, value: bytes = ..., acl: Sequence[Any] | None = ..., ephemeral: bool = ..., sequence: bool = ..., makepath: bool = ...,
                     include_data: bool = ..., *, container: bool = ..., ttl: int | None = ...) -> str | tuple[str, ZnodeStat]: ...
    async def create(  # fmt: skip
        self,
        path: str,
        value: bytes = b"",
        acl: Sequence[Any] | None = None,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
        include_data: bool = False,
        *,
        container: bool = False,
        ttl: int | None = None,
    ) -> str | tuple[str, ZnodeStat]:
        """Create a node; returns its path, or ``(path, ZnodeStat)`` with ``include_data``.

        zabby extras: ``container=True`` makes a container node, ``ttl`` (milliseconds) a TTL node.
        """
        _check_bytes(value)
        op, flags, ttl_ms = _create_mode(ephemeral, sequence, container, ttl)
        if op == OpCode.CREATE2 and not include_data:
            op = OpCode.CREATE
        args = [self._spath(path), value, self._wire_acl(acl), flags, ttl_ms]
        if op == OpCode.CREATE:
            return await self._create(op, args, p.decode_path, path, acl, makepath)
        created = await self._create(op, args, p.decode_path_stat, path, acl, makepath)
        return created if include_data else created[0]

    async def _create(self, op: int, args: list[Any], decode: p.Decoder[_T], path: str, acl: Sequence[Any] | None, makepath: bool) -> _T:
        try:
            return await self._call(op, args, decode)
        except NoNodeError:
            if not makepath:
                raise
            await self.ensure_path(path.rsplit("/", 1)[0] or "/", acl)
            return await self._call(op, args, decode)

    async def ensure_path(self, path: str, acl: Sequence[Any] | None = None) -> bool:
        """Create ``path`` and any missing ancestors (persistent, empty)."""
        if path == "/" or await self.exists(path) is not None:
            return True
        parts = [x for x in path.split("/") if x]
        current = ""
        for name in parts:
            current += "/" + name
            try:
                await self._call(OpCode.CREATE, [self._spath(current), b"", self._wire_acl(acl), 0, 0], p.decode_path)
            except NodeExistsError:
                pass
        return True

    async def exists(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None) -> ZnodeStat | None:
        sp = self._spath(path)
        return await self._call(OpCode.EXISTS, [sp, watch is not None], p.decode_exists, sp, watch)

    async def get(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None) -> tuple[bytes, ZnodeStat]:
        sp = self._spath(path)
        return await self._call(OpCode.GET_DATA, [sp, watch is not None], p.decode_get, sp, watch)

    @overload
    async def get_children(self, path: str, watch: Callable[[WatchedEvent], Any] | None = ..., include_data: Literal[False] = ...) -> list[str]: ...
    @overload
    async def get_children(self, path: str, watch: Callable[[WatchedEvent], Any] | None, include_data: Literal[True]) -> tuple[list[str], ZnodeStat]: ...
    @overload
    async def get_children(self, path: str, watch: Callable[[WatchedEvent], Any] | None = ..., *, include_data: Literal[True]) -> tuple[list[str], ZnodeStat]: ...
    @overload
    async def get_children(self, path: str, watch: Callable[[WatchedEvent], Any] | None = ..., include_data: bool = ...) -> list[str] | tuple[list[str], ZnodeStat]: ...
    async def get_children(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None, include_data: bool = False) -> list[str] | tuple[list[str], ZnodeStat]:
        sp = self._spath(path)
        if include_data:
            return await self._call(OpCode.GET_CHILDREN2, [sp, watch is not None], p.decode_children2, sp, watch)
        return await self._call(OpCode.GET_CHILDREN, [sp, watch is not None], p.decode_children, sp, watch)

    async def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        _check_bytes(value)
        return await self._call(OpCode.SET_DATA, [self._spath(path), value, _check_int(version)], p.decode_stat)

    async def delete(self, path: str, version: int = -1, recursive: bool = False) -> bool:
        if recursive:
            return await self._delete_recursive(path)
        return await self._call(OpCode.DELETE, [self._spath(path), _check_int(version)], p.decode_true)

    async def _delete_recursive(self, path: str) -> bool:
        try:
            children = await self.get_children(path)
        except NoNodeError:
            return True
        for child in children:
            await self._delete_recursive(path.rstrip("/") + "/" + child)
        if path == "/":
            return True
        try:
            await self.delete(path)
        except NoNodeError:
            pass
        return True

    async def get_acls(self, path: str) -> tuple[list[Any], ZnodeStat]:
        return await self._call(OpCode.GET_ACL, [self._spath(path)], p.decode_acls)

    async def set_acls(self, path: str, acls: Sequence[Any], version: int = -1) -> ZnodeStat:
        return await self._call(OpCode.SET_ACL, [self._spath(path), acl_to_wire(acls), _check_int(version)], p.decode_stat)

    async def sync(self, path: str) -> str:
        return await self._call(OpCode.SYNC, [self._spath(path)], p.decode_path)

    async def wait_for_zxid(self, zxid: int, timeout: float = 10.0, sync: bool = False) -> int:
        """Return once the server this client is connected to has applied ``zxid`` (zabby's
        extension): the zxid it has applied then.  A writer hands the zxid of its write to a
        reader elsewhere, whose reads after this call see it.  ``sync``: a ``sync("/")``
        first (the server catches up with the leader before the wait).

        Raises:
            OperationTimeoutError: not applied within ``timeout`` seconds.
            ConnectionLoss: the connection dropped meanwhile (ask again).
        """
        zxid = _check_int(zxid)
        if zxid < 0:
            raise BadArgumentsError(f"zxid must be 0 or more, not {zxid}")
        if not timeout > 0:
            raise BadArgumentsError(f"timeout must be a positive number of seconds, not {timeout!r}")
        deadline = anyio.current_time() + timeout
        if sync:
            with anyio.move_on_after(timeout) as scope:
                await self.sync("/")
            if scope.cancelled_caught:
                raise OperationTimeoutError(f"sync did not finish within {timeout}s")
        while True:  # the server caps one wait (a minute): ask again until the deadline
            remaining_ms = int((deadline - anyio.current_time()) * 1000)
            if remaining_ms <= 0:
                raise OperationTimeoutError(f"the server did not apply 0x{zxid:x} within {timeout}s")
            try:
                return await self._call(OpCode.WAIT_FOR_ZXID, [zxid, remaining_ms], p.decode_value)
            except OperationTimeoutError:
                if anyio.current_time() >= deadline - 0.001:
                    raise

    async def add_auth(self, scheme: str, credential: Any) -> bool:
        """Authenticate this session; the credential is re-sent after every reconnect.

        A refused credential raises AuthFailedError.  The server then closes the connection,
        as ZooKeeper does, and this client reconnects to the same session without it (kazoo
        closes the whole client instead)."""
        cred = _cred_bytes(credential)
        conn = await self._connection()
        request = self._proto.auth_request(scheme, cred)
        conn.submit(request)
        await wait_for(request, self._asyncio_loop)
        if (scheme, cred) not in self._auth_data:
            self._auth_data.append((scheme, cred))
        return True

    def transaction(self) -> TransactionRequest:
        return TransactionRequest(self)

    async def multi_read(self, ops: Iterable[tuple[str, str]]) -> list[Any]:
        """Atomic-snapshot reads: ``[("get", path) | ("get_children", path), ...]``.

        Each result is ``(data, ZnodeStat)``, a list of child names, or an exception instance.
        """
        wire = []
        for kind, path in ops:
            code = {"get": OpCode.GET_DATA, "get_children": OpCode.GET_CHILDREN}.get(kind, kind)
            wire.append([int(code), self._spath(path)])
        return await self._call(OpCode.MULTI_READ, [wire], p.decode_multi_read)

    async def get_ephemerals(self, prefix: str = "/") -> list[str]:
        return await self._call(OpCode.GET_EPHEMERALS, [self._spath(prefix)], p.decode_paths)

    async def get_all_children_number(self, path: str = "/") -> int:
        return await self._call(OpCode.GET_ALL_CHILDREN_NUMBER, [self._spath(path)], p.decode_value)

    async def add_watch(self, path: str, watch: Callable[[WatchedEvent], Any], mode: int = AddWatchMode.PERSISTENT,
                        since_zxid: int | None = None) -> None:  # fmt: skip
        """A persistent (mode 0) or persistent-recursive (mode 1) watch; stays until removed,
        and resumes by itself after a reconnect from the last event it delivered.

        ``since_zxid`` (zabby's extension): ``watch`` first hears, in zxid order, every event
        it would have fired for the changes committed after that zxid, then the live ones.
        Raises HistoryCompactedError (``oldest_zxid``: the oldest zxid it could resume from)
        when the server's watch history does not reach back that far: read the current
        state, then add the watch from the zxid of that read."""
        if not callable(watch):
            raise TypeError("watch must be callable")
        mode = AddWatchMode(int(mode))
        kind = p.RECURSIVE if mode == AddWatchMode.PERSISTENT_RECURSIVE else p.PERSISTENT
        sp = self._spath(path)
        if since_zxid is None:
            await self._call(OpCode.ADD_WATCH, [sp, int(mode)], p.decode_add_watch, sp, watch, kind)
            return
        since = _check_int(since_zxid)
        if since < 0:
            raise BadArgumentsError(f"since_zxid must be a zxid (0 or more), not {since}")
        await self._call(OpCode.ADD_WATCH, [sp, int(mode), since], p.decode_add_watch_since(since), sp, watch, kind)

    def watch(self, path: str, mode: int = AddWatchMode.PERSISTENT, since_zxid: int | None = None) -> WatchStream:
        """A persistent watch's events as an async iterator (``add_watch`` underneath: it resumes
        by itself after a reconnect, ``since_zxid`` replays the events after that zxid first)::

            async with client.watch("/config", mode=AddWatchMode.PERSISTENT_RECURSIVE) as events:
                async for event in events:
                    ...

        The ``async with`` block removes the watch when it exits; ``async for`` alone adds it
        at the first event asked for, and ``aclose()`` removes it.  See ``WatchStream``."""
        return WatchStream(path, AddWatchMode(int(mode)), since_zxid, add=self.add_watch, remove=self._remove_watcher)

    async def _remove_watcher(self, path: str, watcher: Callable[[WatchedEvent], Any], mode: AddWatchMode) -> None:
        """Drop one persistent watcher; the server's watch goes too when it was the last of its
        kind on ``path``.  Bounded by the session timeout and shielded: it runs as a block exits,
        cancelled or not."""
        kind, wtype = (p.RECURSIVE, WatcherType.PERSISTENT_RECURSIVE) if mode == AddWatchMode.PERSISTENT_RECURSIVE else (p.PERSISTENT, WatcherType.PERSISTENT)
        sp = self._spath(path)
        if self._proto.watches.discard(kind, sp, watcher) or self._fatal is not None:
            return
        with anyio.move_on_after(self._timeout_s, shield=True):
            try:
                await self._call(OpCode.REMOVE_WATCHES, [sp, int(wtype)], p.decode_true, sp, None, int(wtype))  # type: ignore[arg-type]
            except KazooException as exc:  # gone with the session or already removed: nothing to undo
                log.debug("removing the watch on %s: %r", path, exc)

    async def remove_watches(self, path: str, watcher_type: int = WatcherType.ANY) -> bool:
        """Remove this session's watches of ``watcher_type`` on ``path`` (server and local);
        each removed watcher gets a *_WATCH_REMOVED event, as ZooKeeper's client does."""
        wtype = int(WatcherType(int(watcher_type)))
        sp = self._spath(path)
        return await self._call(OpCode.REMOVE_WATCHES, [sp, wtype], p.decode_true, sp, None, wtype)  # type: ignore[arg-type]

    async def reconfig(self, joining: str | None, leaving: str | None, new_members: str | None, from_config: int = -1) -> tuple[bytes, ZnodeStat]:
        """Change the ensemble's membership (kazoo's and ZooKeeper's ``reconfig``).

        ``joining``: comma-separated ``server.N=host:quorumPort:electionPort[:role][;clientPort]``
        lines; ``leaving``: comma-separated server ids; or ``new_members``: the whole new
        membership (then the other two must be None).  ``from_config``: the version (zxid) of
        the configuration this change was computed from, -1 for any.  Returns the new
        ``/zookeeper/config`` data and stat.  Raises BadArgumentsError for a request that
        names no change, and the server's refusals (ReconfigDisabledError,
        ReconfigInProcessError, NewConfigNoQuorumError, BadVersionError, NoAuthError).
        """
        if new_members and (joining or leaving):
            raise BadArgumentsError("reconfig takes joining/leaving or new_members, not both")
        if not (joining or leaving or new_members):
            raise BadArgumentsError("reconfig needs joining, leaving or new_members")
        args = [joining or None, leaving or None, new_members or None, _check_int(from_config)]
        return await self._call(OpCode.RECONFIG, args, p.decode_get)

    async def get_config(self, watch: Callable[[WatchedEvent], Any] | None = None) -> tuple[bytes, ZnodeStat]:
        """The ensemble's dynamic configuration (ZooKeeper's getConfig): ``/zookeeper/config``
        outside any chroot."""
        return await self._call(OpCode.GET_DATA, [CONFIG_PATH, watch is not None], p.decode_get, CONFIG_PATH, watch)

    async def whoami(self) -> list[tuple[str, str]]:
        return await self._call(OpCode.WHO_AM_I, [], p.decode_whoami)

    async def command(self, cmd: bytes = b"ruok") -> str:
        """Send a four-letter word to the current server over a separate socket."""
        host = self._current_host or self.hosts[0]
        chunks: list[bytes] = []
        with anyio.fail_after(self._timeout_s):
            async with await anyio.connect_tcp(*host) as stream:
                await stream.send(cmd)
                for _ in range(100_000):  # bounded: a four-letter word's answer is small
                    try:
                        chunks.append(await stream.receive(65536))
                    except anyio.EndOfStream:
                        break
        return b"".join(chunks).decode("utf-8", "replace")

    async def retry(self, func: Callable[_P, Awaitable[_T]], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run ``await func(*args, **kwargs)`` under a copy of ``command_retry``."""
        from .retry import AsyncKazooRetry, KazooRetry

        base = self.command_retry if isinstance(self.command_retry, KazooRetry) else KazooRetry(max_tries=-1, deadline=self._timeout_s)
        return await AsyncKazooRetry.from_retry(base)(func, *args, **kwargs)


def client_addresses(config: bytes) -> list[tuple[str, int]]:
    """The client addresses a dynamic configuration names (none if it names none)."""
    try:
        members = Membership.parse(config.decode()).members
    except (MembershipError, UnicodeDecodeError):
        return []
    wildcard = (None, "0.0.0.0", "::")
    return [(m.host if m.client_host in wildcard else m.client_host, m.client_port) for m in members if m.client_port is not None]


def _cred_bytes(credential: Any) -> bytes:
    return credential if isinstance(credential, bytes) else str(credential).encode("utf-8")


def _sasl_credentials(options: dict[str, Any] | None) -> tuple[str, str] | None:
    """kazoo's ``sasl_options`` → (user, password).  Raises: ConfigurationError for a
    mechanism zabby does not speak (DIGEST-MD5 only: no GSSAPI) or missing credentials."""
    if not options:
        return None
    mechanism = str(options.get("mechanism", "")).upper()
    if mechanism != "DIGEST-MD5":
        raise ConfigurationError(f"SASL mechanism {options.get('mechanism')!r}: zabby speaks DIGEST-MD5 only (no GSSAPI/Kerberos)")
    user, password = options.get("username"), options.get("password")
    if not isinstance(user, str) or not isinstance(password, str):
        raise ConfigurationError("sasl_options needs a username and a password (strings)")
    return user, password


def _log_auth_failure(request: p.Request) -> None:
    if not request.ok:
        log.error("re-sending credentials after reconnect failed: %r", request.result)


def _log_failure(request: p.Request) -> None:
    if not request.ok and not isinstance(request.result, ConnectionLoss):
        log.error("setWatches after reconnect failed: %r", request.result)


__all__ = ["Client", "TransactionRequest", "WatchStream"]
