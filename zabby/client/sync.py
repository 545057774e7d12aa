"""``zabby.SyncClient``: the blocking, thread-safe client with kazoo's API.

Theory of operation
-------------------
A SyncClient owns two daemon threads:

* the **loop thread** runs ``trio.run`` with one async ``Client`` inside; every call from
  any user thread is handed to it with ``TrioToken.run_sync_soon`` (thread-safe, never
  blocks), runs there as a task under ``trio.fail_after(timeout)`` and completes an
  ``AsyncResult`` (a thread-safe future, kazoo's ``IAsyncResult`` shape).  A blocking call
  is ``*_async(...).get(timeout)``; the ``*_async`` variants return the future itself, so
  one thread can pipeline thousands of requests.
* the **callback thread** runs watch callbacks, state listeners and ``rawlink`` callbacks
  one at a time in event order (kazoo's SequentialThreadingHandler), so a callback may call
  the client's blocking methods without deadlocking the loop.

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
import logging
import os
import queue
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import trio

from zabby import tls
from zabby.errors import ConfigurationError, ConnectionClosedError, ForkedClientError, KazooException
from zabby.opcodes import AddWatchMode, WatcherType

from .aio import Client, _live_clients
from .exceptions import KazooTimeoutError
from .retry import KazooRetry
from .states import KazooState, KeeperState, WatchedEvent, ZnodeStat

log = logging.getLogger("zabby.client")

_FORKED = "this zabby SyncClient was created before os.fork(); it cannot be used in the child process (its threads and socket belong to the parent). Create a new SyncClient in the child."
_CALLBACK_QUEUE_MAX = 1_000_000
_LOOP_START_S = 10.0
_GRACE_S = 1.0

_sync_clients: "weakref.WeakSet[SyncClient]" = weakref.WeakSet()


def _mark_forked() -> None:
    for client in list(_sync_clients):
        client._forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mark_forked)


class AsyncResult:
    """A thread-safe future (kazoo's IAsyncResult): get/wait/ready/successful/rawlink."""

    def __init__(self, client: SyncClient | None = None) -> None:
        self._client = client
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[AsyncResult], Any]] = []
        self.value: Any = None
        self._exception: BaseException | None = None

    @property
    def exception(self) -> BaseException | None:
        return self._exception

    def ready(self) -> bool:
        return self._event.is_set()

    def successful(self) -> bool:
        return self._event.is_set() and self._exception is None

    def set(self, value: Any = None) -> None:
        self._finish(value, None)

    def set_exception(self, exception: BaseException) -> None:
        self._finish(None, exception)

    def _finish(self, value: Any, exception: BaseException | None) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.value, self._exception = value, exception
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            self._run_callback(callback)

    def _run_callback(self, callback: Callable[[AsyncResult], Any]) -> None:
        if self._client is not None:
            self._client._dispatch_callback(callback, self)
        else:
            callback(self)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """The value, or raise the exception; KazooTimeoutError if not ready within ``timeout``."""
        if not self._event.is_set():
            if not block or not self._event.wait(timeout):
                raise KazooTimeoutError(f"no result within {timeout}s" if block else "result not ready")
        if self._exception is not None:
            raise self._exception
        return self.value

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def rawlink(self, callback: Callable[[AsyncResult], Any]) -> None:
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        self._run_callback(callback)

    def unlink(self, callback: Callable[[AsyncResult], Any]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


class _ThreadedClient(Client):
    """The async core of a SyncClient: callbacks go to the SyncClient's callback thread."""

    def __init__(self, owner: SyncClient, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._owner_ref = weakref.ref(owner)

    def _dispatch(self, fn: Callable[[Any], Any], arg: Any) -> None:
        owner = self._owner_ref()
        if owner is not None:
            owner._dispatch_callback(fn, arg)

    async def _drain_events(self) -> None:
        return None


class SyncClient:
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
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._loop_thread: threading.Thread | None = None
        self._callbacks: queue.Queue[tuple[Any, Any]] = queue.Queue(_CALLBACK_QUEUE_MAX)
        self._callback_thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._inbox: deque[tuple[AsyncResult, Callable[..., Any], tuple[Any, ...], float | None]] = deque()
        self._inbox_lock = threading.Lock()
        self._inbox_scheduled = False
        self._bind_recipes()
        _sync_clients.add(self)

    def _bind_recipes(self) -> None:
        from .recipes.cache import TreeCache
        from .recipes.election import Election
        from .recipes.lock import Lock
        from .recipes.watchers import ChildrenWatch, DataWatch

        self.Lock = functools.partial(Lock, self)
        self.Election = functools.partial(Election, self)
        self.DataWatch = functools.partial(DataWatch, self)
        self.ChildrenWatch = functools.partial(ChildrenWatch, self)
        self.TreeCache = functools.partial(TreeCache, self)

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
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._token = trio.lowlevel.current_trio_token()
                ready.set()
                await trio.sleep_forever()

        try:
            trio.run(main)
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
                fn(arg)
            except Exception:
                log.exception("error in zabby callback %r", fn)

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
    def _submit(self, afn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None) -> AsyncResult:
        """Run ``await afn(*args)`` on the loop thread; return the future of its result.

        Calls are queued in ``_inbox``; only the first call after the loop drained it wakes
        the loop (one ``run_sync_soon`` per burst, not per call).
        """
        self._ensure_threads()
        future = AsyncResult(self)
        timeout_s = self.request_timeout if timeout is None else timeout
        with self._inbox_lock:
            self._inbox.append((future, afn, args, timeout_s))
            if self._inbox_scheduled:
                return future
            self._inbox_scheduled = True
        token = self._token
        try:
            if token is None:
                raise trio.RunFinishedError
            token.run_sync_soon(self._drain_inbox)
        except trio.RunFinishedError:
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

    def _sync(self, afn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None) -> Any:
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

    def start_async(self) -> AsyncResult:
        return self._submit(self._client.start, (), None)

    def stop(self) -> None:
        if self._token is None or self._closed:
            self._check_usable()
            return
        self._sync(self._client.stop, (), None)

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the session and end the client's threads; the client cannot be reused."""
        self._check_usable()
        if self._token is not None:
            try:
                self._sync(self._client.close, (), None)
            finally:
                self._end_threads()
        self._closed = True

    def _end_threads(self) -> None:
        token, nursery = self._token, self._nursery
        if token is not None and nursery is not None:
            try:
                token.run_sync_soon(nursery.cancel_scope.cancel)
            except trio.RunFinishedError:
                pass
        self._callbacks.put((None, None))
        for thread in (self._loop_thread, self._callback_thread):
            if thread is not None and thread is not threading.current_thread():
                thread.join(_LOOP_START_S)

    def __enter__(self) -> SyncClient:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the kazoo API (blocking) ----------------------------------------------------------
    def create(self, path: str, value: bytes = b"", acl: Sequence[Any] | None = None, ephemeral: bool = False, sequence: bool = False, makepath: bool = False, include_data: bool = False, *, container: bool = False, ttl: int | None = None, timeout: float | None = None) -> Any:
        return self.create_async(path, value, acl, ephemeral, sequence, makepath, include_data, container=container, ttl=ttl, timeout=timeout).get(timeout=self._wait_s(timeout))

    def create_async(self, path: str, value: bytes = b"", acl: Sequence[Any] | None = None, ephemeral: bool = False, sequence: bool = False, makepath: bool = False, include_data: bool = False, *, container: bool = False, ttl: int | None = None, timeout: float | None = None) -> AsyncResult:
        fn = functools.partial(self._client.create, container=container, ttl=ttl)
        return self._submit(fn, (path, value, acl, ephemeral, sequence, makepath, include_data), timeout)

    def ensure_path(self, path: str, acl: Sequence[Any] | None = None, *, timeout: float | None = None) -> bool:
        return self._sync(self._client.ensure_path, (path, acl), timeout)

    def ensure_path_async(self, path: str, acl: Sequence[Any] | None = None) -> AsyncResult:
        return self._submit(self._client.ensure_path, (path, acl), None)

    def exists(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None, *, timeout: float | None = None) -> ZnodeStat | None:
        return self._sync(self._client.exists, (path, watch), timeout)

    def exists_async(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None) -> AsyncResult:
        return self._submit(self._client.exists, (path, watch), None)

    def get(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None, *, timeout: float | None = None) -> tuple[bytes, ZnodeStat]:
        return self._sync(self._client.get, (path, watch), timeout)

    def get_async(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None) -> AsyncResult:
        return self._submit(self._client.get, (path, watch), None)

    def get_children(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None, include_data: bool = False, *, timeout: float | None = None) -> Any:
        return self._sync(self._client.get_children, (path, watch, include_data), timeout)

    def get_children_async(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None, include_data: bool = False) -> AsyncResult:
        return self._submit(self._client.get_children, (path, watch, include_data), None)

    def set(self, path: str, value: bytes, version: int = -1, *, timeout: float | None = None) -> ZnodeStat:
        return self._sync(self._client.set, (path, value, version), timeout)

    def set_async(self, path: str, value: bytes, version: int = -1) -> AsyncResult:
        return self._submit(self._client.set, (path, value, version), None)

    def delete(self, path: str, version: int = -1, recursive: bool = False, *, timeout: float | None = None) -> bool:
        return self._sync(self._client.delete, (path, version, recursive), timeout)

    def delete_async(self, path: str, version: int = -1) -> AsyncResult:
        return self._submit(self._client.delete, (path, version), None)

    def get_acls(self, path: str, *, timeout: float | None = None) -> tuple[list[Any], ZnodeStat]:
        return self._sync(self._client.get_acls, (path,), timeout)

    def get_acls_async(self, path: str) -> AsyncResult:
        return self._submit(self._client.get_acls, (path,), None)

    def set_acls(self, path: str, acls: Sequence[Any], version: int = -1, *, timeout: float | None = None) -> ZnodeStat:
        return self._sync(self._client.set_acls, (path, acls, version), timeout)

    def set_acls_async(self, path: str, acls: Sequence[Any], version: int = -1) -> AsyncResult:
        return self._submit(self._client.set_acls, (path, acls, version), None)

    def sync(self, path: str, *, timeout: float | None = None) -> str:
        return self._sync(self._client.sync, (path,), timeout)

    def wait_for_zxid(self, zxid: int, timeout: float | None = None, sync: bool = False) -> int:
        """See ``Client.wait_for_zxid``: once the connected server has applied ``zxid``, its
        applied zxid; ``timeout`` defaults to the client's ``request_timeout``.
        Raises: KazooTimeoutError (an OperationTimeoutError) on timeout."""
        timeout_s = self.request_timeout if timeout is None else timeout
        return self._sync(self._client.wait_for_zxid, (zxid, timeout_s, sync), timeout_s)

    def sync_async(self, path: str) -> AsyncResult:
        return self._submit(self._client.sync, (path,), None)

    def add_auth(self, scheme: str, credential: Any, *, timeout: float | None = None) -> bool:
        return self._sync(self._client.add_auth, (scheme, credential), timeout)

    def add_auth_async(self, scheme: str, credential: Any) -> AsyncResult:
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

    def reconfig_async(self, joining: str | None, leaving: str | None, new_members: str | None, from_config: int = -1) -> AsyncResult:
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

    def retry(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``func`` under a copy of the client's ``command_retry`` (kazoo's ``retry``)."""
        return self._retry.copy()(func, *args, **kwargs)

    def _wait_s(self, timeout: float | None) -> float:
        return (self.request_timeout if timeout is None else timeout) + _GRACE_S


class SyncTransactionRequest:
    """kazoo's TransactionRequest for SyncClient: ``commit()`` blocks, ``commit_async()`` doesn't."""

    def __init__(self, client: SyncClient) -> None:
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

    def commit_async(self) -> AsyncResult:
        self._tx._check_tx_state()
        return self.client._submit(self._tx.commit, (), None)

    def commit(self, timeout: float | None = None) -> list[Any]:
        return self.client._sync(self._tx.commit, (), timeout)

    def __enter__(self) -> SyncTransactionRequest:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.commit()


async def _run_call(future: AsyncResult, afn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float | None) -> None:
    """One SyncClient call on the loop thread; every outcome lands in ``future``."""
    try:
        with trio.fail_after(timeout_s if timeout_s is not None else float("inf")):
            value = await afn(*args)
    except trio.TooSlowError:
        future.set_exception(KazooTimeoutError(f"no reply within {timeout_s}s"))
    except Exception as exc:
        future.set_exception(exc)
    except BaseException:
        future.set_exception(ConnectionClosedError("the client's event loop stopped"))
        raise
    else:
        future.set(value)


__all__ = ["SyncClient", "AsyncResult", "SyncTransactionRequest", "_live_clients"]
