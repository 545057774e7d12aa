"""``BlockingClient``: the blocking, thread-safe client with kazoo's API, which
``zabby.SyncClient`` (``sync``) is with the recipes' factories (``zk.Lock(path)``...) added: the
recipes are written against this class, below them, so neither imports the other in a circle.

Theory of operation
-------------------
A SyncClient owns two daemon threads:

* the **loop thread** runs an event loop (``anyio.run`` on ``LOOP_BACKEND``, asyncio) with
  one async ``Client`` inside: the same session, retry and watch code as the async client.
  Every call from any user thread is handed to it with the loop's ``run_sync_soon``
  (thread-safe, never blocks), runs there as a task under a deadline of ``timeout`` and
  completes an ``AsyncResult`` (a thread-safe future, kazoo's ``IAsyncResult`` shape, that
  asyncio or trio code may also ``await``).  A blocking call is ``*_async(...).get(timeout)``;
  the ``*_async`` variants return the future itself, so one thread can pipeline thousands
  of requests.
* the **callback thread** runs watch callbacks, state listeners and ``rawlink`` callbacks
  one at a time in event order (kazoo's SequentialThreadingHandler), so a callback may call
  the client's blocking methods without deadlocking the loop.  A callback that raises is
  logged and the next one runs; one that blocks holds back only the callbacks after it,
  never a request (kazoo's callbacks share its I/O thread's fate).

``stop()`` and ``close()`` return within a bounded time whatever the network does (kazoo
#582): the close request waits at most min(timeout, 5 s), ``stop()`` at most a second more
(``stop_timeout_s``), ``close()`` then 2 s per thread.

Every blocking call takes ``timeout=`` (seconds) or inherits the client's
``request_timeout`` (default: the session ``timeout``) and raises ``KazooTimeoutError`` (an
``OperationTimeoutError`` and a ``TimeoutError``) when it expires; the request is then
abandoned (a write may still be applied, as with any timeout).

Fork safety (choice: **refuse**): kazoo hangs when a client made before ``fork()`` is used in
the child (kazoo #519, #628) because its threads do not exist there.  zabby registers an
``os.register_at_fork`` hook; in the child every call on a pre-fork client raises
``ForkedClientError`` at once (nothing is sent, nothing waits), telling the user to create a
new client in the child.  The parent's session is untouched and keeps working in the parent.
We refuse rather than reconnect because a silent new session would drop the ephemeral nodes
and locks the code believes it holds.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import os
import queue
import threading
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from collections.abc import Generator
from typing import Any, Generic, Literal, ParamSpec, Self, TypeVar, overload

import anyio
import anyio.abc
import anyio.lowlevel

from zabby import tls
from zabby.errors import ConfigurationError, ConnectionClosedError, ForkedClientError, KazooException
from zabby.opcodes import AddWatchMode, WatcherType

from .aio import CLOSE_SESSION_S_MAX, Client
from .exceptions import KazooTimeoutError
from .retry import KazooRetry
from .states import KazooState, KeeperState, WatchedEvent, ZnodeStat

log = logging.getLogger("zabby.client")

_FORKED = "this zabby SyncClient was created before os.fork(); it cannot be used in the child process (its threads and socket belong to the parent). Create a new SyncClient in the child."
_CALLBACK_QUEUE_MAX = 1_000_000
_LOOP_START_S = 10.0
_GRACE_S = 1.0
_THREAD_JOIN_S = 2.0  # close() waits this long for each of its threads to end
# The loop thread's event loop (anyio's backend name).  asyncio: measured against trio on
# SyncClient itself (10,000 get_async pipelined 1,000 at a time, one server, 8 alternating
# rounds on a loaded 2-core machine), asyncio did more gets per second in 6 rounds of 8 (median
# ~1,550 against ~1,300) at less client CPU per get (median ~145 us against ~169 us).
LOOP_BACKEND = "asyncio"

_T = TypeVar("_T")
_P = ParamSpec("_P")
_sync_clients: "weakref.WeakSet[BlockingClient]" = weakref.WeakSet()


def _mark_forked() -> None:
    for client in list(_sync_clients):
        client._forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mark_forked)


class AsyncResult(Generic[_T]):
    """A thread-safe future (kazoo's IAsyncResult): get/wait/ready/successful/rawlink, and
    ``await`` from asyncio or trio (the awaiting task is woken through its own loop; cancelling
    it stops the wait, not the request)."""

    def __init__(self, client: BlockingClient | None = None) -> None:
        self._client = client
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[AsyncResult[_T]], Any]] = []
        self._wakers: list[Callable[[], None]] = []  # awaiting tasks; called on the finishing thread
        self.value: Any = None
        self._exception: BaseException | None = None

    @property
    def exception(self) -> BaseException | None:
        return self._exception

    def ready(self) -> bool:
        return self._event.is_set()

    def successful(self) -> bool:
        return self._event.is_set() and self._exception is None

    def set(self, value: _T) -> None:
        self._finish(value, None)

    def set_exception(self, exception: BaseException) -> None:
        self._finish(None, exception)

    def _finish(self, value: _T | None, exception: BaseException | None) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.value, self._exception = value, exception
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
            wakers, self._wakers = self._wakers, []
        for wake in wakers:
            wake()
        for callback in callbacks:
            self._run_callback(callback)

    def _run_callback(self, callback: Callable[[AsyncResult[_T]], Any]) -> None:
        if self._client is not None:
            self._client._dispatch_callback(callback, self)
        else:
            callback(self)

    def get(self, block: bool = True, timeout: float | None = None) -> _T:
        """The value, or raise the exception; KazooTimeoutError if not ready within ``timeout``."""
        if not self._event.is_set():
            if not block or not self._event.wait(timeout):
                raise KazooTimeoutError(f"no result within {timeout}s" if block else "result not ready")
        if self._exception is not None:
            raise self._exception
        value: _T = self.value
        return value

    def get_nowait(self) -> _T:
        return self.get(block=False)

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def rawlink(self, callback: Callable[[AsyncResult[_T]], Any]) -> None:
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        self._run_callback(callback)

    def unlink(self, callback: Callable[[AsyncResult[_T]], Any]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def __await__(self) -> Generator[Any, None, _T]:
        return self._wait_async().__await__()

    async def _wait_async(self) -> _T:
        finished = anyio.Event()
        token = anyio.lowlevel.current_token()

        def wake() -> None:
            _run_soon(token, finished.set)

        with self._lock:
            waiting = not self._event.is_set()
            if waiting:
                self._wakers.append(wake)
        if waiting:
            try:
                await finished.wait()
            finally:
                with self._lock:
                    if wake in self._wakers:
                        self._wakers.remove(wake)
        return self.get()


class _ThreadedClient(Client):
    """The async core of a SyncClient: callbacks go to the SyncClient's callback thread."""

    def __init__(self, owner: BlockingClient, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._owner_ref = weakref.ref(owner)

    def _dispatch(self, fn: Callable[[Any], Any], arg: Any) -> None:
        owner = self._owner_ref()
        if owner is not None:
            owner._dispatch_callback(fn, arg)

    async def _drain_events(self) -> None:
        return None


class BlockingClient:
    """Blocking, thread-safe client; same API as kazoo's KazooClient (see module docstring)."""

    def __init__(
        self,
        hosts: str = "127.0.0.1:2181",
        timeout: float = 10.0,
        client_id: tuple[int, bytes] | None = None,
        handler: Any = None,
        default_acl: Sequence[Any] | None = None,
        auth_data: Iterable[tuple[str, Any]] | None = None,
        sasl_options: Any = None,
        read_only: bool | None = None,
        randomize_hosts: bool = True,
        connection_retry: Any = None,
        command_retry: Any = None,
        logger: logging.Logger | None = None,
        keyfile: str | None = None,
        keyfile_password: str | None = None,
        certfile: str | None = None,
        ca: str | None = None,
        use_ssl: bool = False,
        verify_certs: bool = True,
        check_hostname: bool = False,
        *,
        request_timeout: float | None = None,
        reconnect_after_expiry: bool = False,
        follow_config: bool = False,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise ConfigurationError(f"unknown arguments: {sorted(kwargs)}")
        self.handler = handler
        self.logger = logger or log
        self.request_timeout = float(request_timeout if request_timeout is not None else timeout)
        self._retry = command_retry if isinstance(command_retry, KazooRetry) else KazooRetry(max_tries=-1, deadline=float(timeout) * 2)
        self._client = _ThreadedClient(
            self,
            hosts,
            timeout,
            client_id=client_id,
            default_acl=default_acl,
            auth_data=auth_data,
            read_only=bool(read_only),
            connection_retry=connection_retry,
            command_retry=self._retry,
            randomize_hosts=randomize_hosts,
            reconnect_after_expiry=reconnect_after_expiry,
            follow_config=follow_config,
            sasl_options=sasl_options,
            ssl_context=tls.client_context(ca=ca, certfile=certfile, keyfile=keyfile, keyfile_password=keyfile_password,
                                           verify_certs=verify_certs, check_hostname=check_hostname) if use_ssl else None,
        )  # fmt: skip
        self._forked = False
        self._pid = os.getpid()
        self._closed = False
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._nursery: anyio.abc.TaskGroup | None = None
        self._loop_thread: threading.Thread | None = None
        self._callbacks: queue.Queue[tuple[Any, Any]] = queue.Queue(_CALLBACK_QUEUE_MAX)
        self._callback_thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._inbox: deque[tuple[AsyncResult[Any], Callable[..., Awaitable[Any]], tuple[Any, ...], float | None]] = deque()
        self._inbox_lock = threading.Lock()
        self._inbox_scheduled = False
        _sync_clients.add(self)

    # -- threads -------------------------------------------------------------------------
    def _ensure_threads(self) -> None:
        self._check_usable()
        if self._token is not None:
            return
        with self._start_lock:
            if self._token is not None:
                return
            ready = threading.Event()
            self._loop_thread = threading.Thread(target=self._loop_main, args=(ready,), name="zabby-loop", daemon=True)
            self._callback_thread = threading.Thread(target=self._callback_main, name="zabby-callbacks", daemon=True)
            self._callback_thread.start()
            self._loop_thread.start()
            if not ready.wait(_LOOP_START_S) or self._token is None:
                raise KazooException("the zabby event loop thread did not start")

    def _loop_main(self, ready: threading.Event) -> None:
        async def main() -> None:
            async with anyio.create_task_group() as tasks:
                self._nursery = tasks
                self._token = anyio.lowlevel.current_token()
                ready.set()
                await anyio.sleep_forever()

        try:
            anyio.run(main, backend=LOOP_BACKEND)
        except BaseException:  # report, never hang the callers: they see ConnectionClosedError
            log.exception("zabby event loop thread failed")
        finally:
            self._token = None
            self._nursery = None

    def _callback_main(self) -> None:
        while True:
            fn, arg = self._callbacks.get()
            if fn is None:
                return
            try:
                result = fn(arg)
            except Exception:
                log.exception("error in zabby callback %r", fn)
                continue
            if inspect.iscoroutine(result):  # nothing would ever run it: say so
                result.close()
                log.error("zabby callback %r is a coroutine function: SyncClient runs plain functions (zabby.Client awaits coroutines)", fn)

    def _dispatch_callback(self, fn: Callable[[Any], Any], arg: Any) -> None:
        try:
            self._callbacks.put_nowait((fn, arg))
        except queue.Full:
            log.error("zabby callback queue full (%d): dropping callback %r", _CALLBACK_QUEUE_MAX, fn)

    def _check_usable(self) -> None:
        if self._forked or self._pid != os.getpid():
            self._forked = True
            raise ForkedClientError(_FORKED)
        if self._closed:
            raise ConnectionClosedError("Connection has been closed")

    # -- the call path -------------------------------------------------------------------
    def _submit(self, afn: Callable[..., Awaitable[_T]], args: tuple[Any, ...], timeout: float | None) -> AsyncResult[_T]:
        """Run ``await afn(*args)`` on the loop thread; return the future of its result.

        Calls are queued in ``_inbox``; only the first call after the loop drained it wakes
        the loop (one ``run_sync_soon`` per burst, not per call).
        """
        self._ensure_threads()
        future: AsyncResult[_T] = AsyncResult(self)
        timeout_s = self.request_timeout if timeout is None else timeout
        with self._inbox_lock:
            self._inbox.append((future, afn, args, timeout_s))
            if self._inbox_scheduled:
                return future
            self._inbox_scheduled = True
        if not _run_soon(self._token, self._drain_inbox):
            self._drain_inbox()
        return future

    def _drain_inbox(self) -> None:
        with self._inbox_lock:
            items = list(self._inbox)
            self._inbox.clear()
            self._inbox_scheduled = False
        nursery = self._nursery
        for future, afn, args, timeout_s in items:
            if nursery is None:
                future.set_exception(ConnectionClosedError("the zabby event loop is not running"))
            else:
                nursery.start_soon(_run_call, future, afn, args, timeout_s)

    def _sync(self, afn: Callable[..., Awaitable[_T]], args: tuple[Any, ...], timeout: float | None) -> _T:
        timeout_s = self.request_timeout if timeout is None else timeout
        future = self._submit(afn, args, timeout_s)
        if not future.wait(timeout_s + _GRACE_S):
            raise KazooTimeoutError(f"no reply within {timeout_s}s")
        return future.get()

    # -- properties ----------------------------------------------------------------------
    @property
    def client_id(self) -> tuple[int, bytes] | None:
        return self._client.client_id

    @property
    def client_state(self) -> KeeperState:
        return self._client.client_state

    @property
    def state(self) -> KazooState:
        return self._client.state

    @property
    def connected(self) -> bool:
        return self._client.connected

    @property
    def last_zxid(self) -> int:
        return self._client.last_zxid

    @property
    def hosts(self) -> list[tuple[str, int]]:
        return self._client.hosts

    @property
    def chroot(self) -> str:
        return self._client.chroot

    @property
    def default_acl(self) -> Any:
        return self._client.default_acl

    @property
    def state_listeners(self) -> list[Callable[[KazooState], Any]]:
        return self._client.state_listeners

    def unchroot(self, path: str) -> str:
        return self._client.unchroot(path)

    def add_listener(self, listener: Callable[[KazooState], Any]) -> None:
        self._client.add_listener(listener)

    def remove_listener(self, listener: Callable[[KazooState], Any]) -> None:
        self._client.remove_listener(listener)

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, timeout: float = 15) -> None:
        self._sync(self._client.start, (timeout,), timeout + _GRACE_S)

    def start_async(self) -> AsyncResult[None]:
        return self._submit(self._client.start, (), None)

    def stop(self) -> None:
        """Close the session and stop connecting.  Returns within ``stop_timeout_s`` whatever
        the network does (a server that stopped answering, a blackholed link): the close
        request waits at most min(timeout, 5 s), and should the loop not be done by then the
        rest of the stop goes on in the background."""
        self._check_usable()
        if self._token is not None:
            self._finish_session(self._client.stop)

    @property
    def stop_timeout_s(self) -> float:
        """The bound on ``stop()``; ``close()`` adds at most 2 x 2 s to end its threads."""
        return min(self._client._timeout_s, CLOSE_SESSION_S_MAX) + _GRACE_S

    def _finish_session(self, afn: Callable[[], Awaitable[None]]) -> None:
        future = self._submit(afn, (), math.inf)  # never cancelled half-way: it ends by itself
        if not future.wait(self.stop_timeout_s):
            log.warning("zabby client: stopping took over %.1fs; it goes on in the background", self.stop_timeout_s)
        elif future.exception is not None:
            log.warning("zabby client: stopping failed: %r", future.exception)

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the session and end the client's threads; the client cannot be reused.  Returns
        within ``stop_timeout_s`` plus 2 s per thread, whatever the network or a callback does
        (a callback still running finishes on its own; no later one runs)."""
        self._check_usable()
        if self._token is not None:
            try:
                self._finish_session(self._client.close)
            finally:
                self._end_threads()
        self._closed = True

    def _end_threads(self) -> None:
        token, nursery = self._token, self._nursery
        if nursery is not None:
            _run_soon(token, nursery.cancel_scope.cancel)
        self._callbacks.put((None, None))
        for thread in (self._loop_thread, self._callback_thread):
            if thread is not None and thread is not threading.current_thread():
                thread.join(_THREAD_JOIN_S)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the kazoo API (blocking) ----------------------------------------------------------
    @overload
    def create(self, path: str, value: bytes = ..., acl: Sequence[Any] | None = ..., ephemeral: bool = ..., sequence: bool = ..., makepath: bool = ...,
               include_data: Literal[False] = ..., *, container: bool = ..., ttl: int | None = ..., timeout: float | None = ...) -> str: ...
    @overload
    def create(self, path: str, value: bytes, acl: Sequence[Any] | None, ephemeral: bool, sequence: bool, makepath: bool,
               include_data: Literal[True], *, container: bool = ..., ttl: int | None = ..., timeout: float | None = ...) -> tuple[str, ZnodeStat]: ...
    @overload
    def create(self, path: str, value: bytes = ..., acl: Sequence[Any] | None = ..., ephemeral: bool = ..., sequence: bool = ..., makepath: bool = ...,
               *, include_data: Literal[True], container: bool = ..., ttl: int | None = ..., timeout: float | None = ...) -> tuple[str, ZnodeStat]: ...
    @overload
    def create(self, path: str, value: bytes = ..., acl: Sequence[Any] | None = ..., ephemeral: bool = ..., sequence: bool = ..., makepath: bool = ...,
               include_data: bool = ..., *, container: bool = ..., ttl: int | None = ..., timeout: float | None = ...) -> str | tuple[str, ZnodeStat]: ...
    def create(self, path: str, value: bytes = b"", acl: Sequence[Any] | None = None, ephemeral: bool = False, sequence: bool = False, makepath: bool = False, include_data: bool = False, *, container: bool = False, ttl: int | None = None, timeout: float | None = None) -> str | tuple[str, ZnodeStat]:  # fmt: skip
        return self.create_async(path, value, acl, ephemeral, sequence, makepath, include_data, container=container, ttl=ttl, timeout=timeout).get(timeout=self._wait_s(timeout))

    def create_async(self, path: str, value: bytes = b"", acl: Sequence[Any] | None = None, ephemeral: bool = False, sequence: bool = False, makepath: bool = False, include_data: bool = False, *, container: bool = False, ttl: int | None = None, timeout: float | None = None) -> AsyncResult[str | tuple[str, ZnodeStat]]:
        fn = functools.partial(self._client.create, container=container, ttl=ttl)
        return self._submit(fn, (path, value, acl, ephemeral, sequence, makepath, include_data), timeout)

    def ensure_path(self, path: str, acl: Sequence[Any] | None = None, *, timeout: float | None = None) -> bool:
        return self._sync(self._client.ensure_path, (path, acl), timeout)

    def ensure_path_async(self, path: str, acl: Sequence[Any] | None = None) -> AsyncResult[bool]:
        return self._submit(self._client.ensure_path, (path, acl), None)

    def exists(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None, *, timeout: float | None = None) -> ZnodeStat | None:
        return self._sync(self._client.exists, (path, watch), timeout)

    def exists_async(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None) -> AsyncResult[ZnodeStat | None]:
        return self._submit(self._client.exists, (path, watch), None)

    def get(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None, *, timeout: float | None = None) -> tuple[bytes, ZnodeStat]:
        return self._sync(self._client.get, (path, watch), timeout)

    def get_async(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None) -> AsyncResult[tuple[bytes, ZnodeStat]]:
        return self._submit(self._client.get, (path, watch), None)

    @overload
    def get_children(self, path: str, watch: Callable[[WatchedEvent], Any] | None = ..., include_data: Literal[False] = ..., *, timeout: float | None = ...) -> list[str]: ...
    @overload
    def get_children(self, path: str, watch: Callable[[WatchedEvent], Any] | None, include_data: Literal[True], *, timeout: float | None = ...) -> tuple[list[str], ZnodeStat]: ...
    @overload
    def get_children(self, path: str, watch: Callable[[WatchedEvent], Any] | None = ..., *, include_data: Literal[True], timeout: float | None = ...) -> tuple[list[str], ZnodeStat]: ...
    @overload
    def get_children(self, path: str, watch: Callable[[WatchedEvent], Any] | None = ..., include_data: bool = ..., *, timeout: float | None = ...) -> list[str] | tuple[list[str], ZnodeStat]: ...
    def get_children(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None, include_data: bool = False, *, timeout: float | None = None) -> list[str] | tuple[list[str], ZnodeStat]:
        return self._sync(self._client.get_children, (path, watch, include_data), timeout)

    def get_children_async(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None, include_data: bool = False) -> AsyncResult[list[str] | tuple[list[str], ZnodeStat]]:
        return self._submit(self._client.get_children, (path, watch, include_data), None)

    def set(self, path: str, value: bytes, version: int = -1, *, timeout: float | None = None) -> ZnodeStat:
        return self._sync(self._client.set, (path, value, version), timeout)

    def set_async(self, path: str, value: bytes, version: int = -1) -> AsyncResult[ZnodeStat]:
        return self._submit(self._client.set, (path, value, version), None)

    def delete(self, path: str, version: int = -1, recursive: bool = False, *, timeout: float | None = None) -> bool:
        return self._sync(self._client.delete, (path, version, recursive), timeout)

    def delete_async(self, path: str, version: int = -1) -> AsyncResult[bool]:
        return self._submit(self._client.delete, (path, version), None)

    def get_acls(self, path: str, *, timeout: float | None = None) -> tuple[list[Any], ZnodeStat]:
        return self._sync(self._client.get_acls, (path,), timeout)

    def get_acls_async(self, path: str) -> AsyncResult[tuple[list[Any], ZnodeStat]]:
        return self._submit(self._client.get_acls, (path,), None)

    def set_acls(self, path: str, acls: Sequence[Any], version: int = -1, *, timeout: float | None = None) -> ZnodeStat:
        return self._sync(self._client.set_acls, (path, acls, version), timeout)

    def set_acls_async(self, path: str, acls: Sequence[Any], version: int = -1) -> AsyncResult[ZnodeStat]:
        return self._submit(self._client.set_acls, (path, acls, version), None)

    def sync(self, path: str, *, timeout: float | None = None) -> str:
        return self._sync(self._client.sync, (path,), timeout)

    def wait_for_zxid(self, zxid: int, timeout: float | None = None, sync: bool = False) -> int:
        """See ``Client.wait_for_zxid``: once the connected server has applied ``zxid``, its
        applied zxid; ``timeout`` defaults to the client's ``request_timeout``.
        Raises: KazooTimeoutError (an OperationTimeoutError) on timeout."""
        timeout_s = self.request_timeout if timeout is None else timeout
        return self._sync(self._client.wait_for_zxid, (zxid, timeout_s, sync), timeout_s)

    def sync_async(self, path: str) -> AsyncResult[str]:
        return self._submit(self._client.sync, (path,), None)

    def add_auth(self, scheme: str, credential: Any, *, timeout: float | None = None) -> bool:
        return self._sync(self._client.add_auth, (scheme, credential), timeout)

    def add_auth_async(self, scheme: str, credential: Any) -> AsyncResult[bool]:
        return self._submit(self._client.add_auth, (scheme, credential), None)

    def transaction(self) -> SyncTransactionRequest:
        return SyncTransactionRequest(self)

    def multi_read(self, ops: Iterable[tuple[str, str]], *, timeout: float | None = None) -> list[Any]:
        return self._sync(self._client.multi_read, (list(ops),), timeout)

    def get_ephemerals(self, prefix: str = "/", *, timeout: float | None = None) -> list[str]:
        return self._sync(self._client.get_ephemerals, (prefix,), timeout)

    def get_all_children_number(self, path: str = "/", *, timeout: float | None = None) -> int:
        return self._sync(self._client.get_all_children_number, (path,), timeout)

    def add_watch(self, path: str, watch: Callable[[WatchedEvent], Any], mode: int = AddWatchMode.PERSISTENT,
                  since_zxid: int | None = None, *, timeout: float | None = None) -> None:  # fmt: skip
        """See ``Client.add_watch``: a persistent watch, resumed by itself after a reconnect;
        with ``since_zxid``, the events after that zxid first (HistoryCompactedError if the
        server's history does not reach back)."""
        return self._sync(self._client.add_watch, (path, watch, mode, since_zxid), timeout)

    def remove_watches(self, path: str, watcher_type: int = WatcherType.ANY, *, timeout: float | None = None) -> bool:
        return self._sync(self._client.remove_watches, (path, watcher_type), timeout)

    def reconfig(self, joining: str | None, leaving: str | None, new_members: str | None, from_config: int = -1, *, timeout: float | None = None) -> tuple[bytes, ZnodeStat]:
        return self._sync(self._client.reconfig, (joining, leaving, new_members, from_config), timeout)

    def reconfig_async(self, joining: str | None, leaving: str | None, new_members: str | None, from_config: int = -1) -> AsyncResult[tuple[bytes, ZnodeStat]]:
        return self._submit(self._client.reconfig, (joining, leaving, new_members, from_config), None)

    def get_config(self, watch: Callable[[WatchedEvent], Any] | None = None, *, timeout: float | None = None) -> tuple[bytes, ZnodeStat]:
        return self._sync(self._client.get_config, (watch,), timeout)

    def update_server_list(self, hosts: str | Sequence[str], *, timeout: float | None = None) -> None:
        """See Client.update_server_list."""

        async def update() -> None:
            self._client.update_server_list(hosts)

        return self._sync(update, (), timeout)

    def whoami(self, *, timeout: float | None = None) -> list[tuple[str, str]]:
        return self._sync(self._client.whoami, (), timeout)

    def command(self, cmd: bytes = b"ruok", *, timeout: float | None = None) -> str:
        return self._sync(self._client.command, (cmd,), timeout)

    def server_version(self, retries: int = 3) -> tuple[int, ...]:
        """The server's version from the ``envi`` four-letter word, as a tuple of ints."""
        text = self.command(b"envi")
        for line in text.splitlines():
            if "zookeeper.version=" in line:
                head = line.split("=", 1)[1].split("-", 1)[0].split(",", 1)[0]
                return tuple(int(x) for x in head.split(".") if x.isdigit())
        return ()

    def retry(self, func: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Call ``func`` under a copy of the client's ``command_retry`` (kazoo's ``retry``)."""
        return self._retry.copy()(func, *args, **kwargs)

    def _wait_s(self, timeout: float | None) -> float:
        return (self.request_timeout if timeout is None else timeout) + _GRACE_S


class SyncTransactionRequest:
    """kazoo's TransactionRequest for SyncClient: ``commit()`` blocks, ``commit_async()`` doesn't."""

    def __init__(self, client: BlockingClient) -> None:
        self.client = client
        self._tx = client._client.transaction()

    @property
    def operations(self) -> list[list[Any]]:
        return self._tx.operations

    @property
    def committed(self) -> bool:
        return self._tx.committed

    def create(self, path: str, value: bytes = b"", acl: Sequence[Any] | None = None, ephemeral: bool = False, sequence: bool = False, *, container: bool = False, ttl: int | None = None) -> None:
        self._tx.create(path, value, acl, ephemeral, sequence, container=container, ttl=ttl)

    def delete(self, path: str, version: int = -1) -> None:
        self._tx.delete(path, version)

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self._tx.set_data(path, value, version)

    def check(self, path: str, version: int) -> None:
        self._tx.check(path, version)

    def commit_async(self) -> AsyncResult[list[Any]]:
        self._tx._check_tx_state()
        return self.client._submit(self._tx.commit, (), None)

    def commit(self, timeout: float | None = None) -> list[Any]:
        return self.client._sync(self._tx.commit, (), timeout)

    def __enter__(self) -> SyncTransactionRequest:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.commit()


def _run_soon(token: anyio.lowlevel.EventLoopToken | None, fn: Callable[[], object]) -> bool:
    """Have the loop of ``token`` call ``fn()`` soon, from any thread, without waiting; False
    when that loop is not running."""
    if token is None:
        return False
    try:
        token.backend_class.run_sync_soon(fn, (), token.native_token)
    except anyio.RunFinishedError:
        return False
    return True


async def _run_call(future: AsyncResult[_T], afn: Callable[..., Awaitable[_T]], args: tuple[Any, ...], timeout_s: float | None) -> None:
    """One SyncClient call on the loop thread; every outcome lands in ``future``."""
    try:
        with anyio.move_on_after(timeout_s if timeout_s is not None else math.inf) as deadline:
            future.set(await afn(*args))
        if deadline.cancelled_caught:
            future.set_exception(KazooTimeoutError(f"no reply within {timeout_s}s"))
    except Exception as exc:
        future.set_exception(exc)
    except BaseException:
        future.set_exception(ConnectionClosedError("the client's event loop stopped"))
        raise


__all__ = ["AsyncResult", "BlockingClient", "SyncTransactionRequest"]
