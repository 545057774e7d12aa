"""kazoo's DataWatch and ChildrenWatch: call a function now and on every change.

Returning ``False`` from the function stops the watch.  Both re-read after a new session
(CONNECTED after LOST), so they never stay stale; within one session the server re-delivers
missed events after a reconnect (setWatches).

``AsyncDataWatch`` / ``AsyncChildrenWatch`` are the one implementation, on ``zabby.Client``
(asyncio or trio; the function may be a coroutine function):
``watch = AsyncDataWatch(client, "/path", func); await watch.start()``, or
``async with AsyncDataWatch(client, "/path", func):`` to stop it at the block's end.
``DataWatch`` / ``ChildrenWatch`` are kazoo's blocking shape for ``SyncClient`` (also as
decorators, ``@client.DataWatch("/path")``): the same code on the client's loop thread, the
function on its callback thread, the first call in the caller's thread as kazoo makes it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

import anyio

from zabby.errors import ConnectionClosedError, NoNodeError

from ..states import EventType, KazooState, WatchedEvent, ZnodeStat
from ._runtime import AsyncRuntime, Runtime, ThreadRuntime, on_loop

if TYPE_CHECKING:
    from ..aio import Client
    from ..blocking import BlockingClient

_FLICKER_READS = 100  # a node that comes and goes between get and exists: read again, bounded


def _arity(func: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return 2
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return 3
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


class _AsyncWatch:
    """What both watches share: the function, the stop rule, and the re-read after a new
    session.  A subclass reads in ``_next_args(event)``: the arguments for the function, or
    None when there is nothing new to tell it."""

    def __init__(self, client: Client, path: str, func: Callable[..., Any] | None, allow_session_lost: bool, runtime: Runtime | None) -> None:
        self.client = client
        self.path = path
        self._runtime: Runtime = runtime or AsyncRuntime(client)
        self._func = func
        self._allow_session_lost = allow_session_lost
        self._stopped = False
        self._started = False
        self._ever_lost = False
        self._reading: anyio.Lock | None = None  # one refresh at a time (made in the loop)
        self._on_event = self._runtime.callback(self._event)
        self._on_state = self._runtime.callback(self._state)

    @property
    def stopped(self) -> bool:
        return self._stopped

    async def start(self, func: Callable[..., Any] | None = None) -> Self:
        """Read now, call the function, and keep calling it on every change."""
        args = await self._first_args(func)
        if args is not None:
            await self._deliver(args)
        return self

    def stop(self) -> None:
        """Call the function no more (kazoo's way is to return False from it)."""
        self._stopped = True
        self._func = None
        self.client.remove_listener(self._on_state)

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

    # -- internals -------------------------------------------------------------------------
    async def _first_args(self, func: Callable[..., Any] | None) -> tuple[Any, ...] | None:
        if self._started:
            raise RuntimeError("this watch is already started")
        self._func = func or self._func
        if self._func is None or not callable(self._func):
            raise TypeError("a watch needs a callable function")
        self._started = True
        self._adopt(self._func)
        self.client.add_listener(self._on_state)
        async with self._reading_lock():
            return await self._next_args(None)

    def _reading_lock(self) -> anyio.Lock:
        if self._reading is None:
            self._reading = anyio.Lock()
        return self._reading

    def _adopt(self, func: Callable[..., Any]) -> None:
        """Look at the function before its first call (a hook)."""

    async def _next_args(self, event: WatchedEvent | None) -> tuple[Any, ...] | None:
        raise NotImplementedError

    async def _refresh(self, event: WatchedEvent | None) -> None:
        async with self._reading_lock():
            if self._stopped or self._func is None:
                return
            args = await self._next_args(event)
            if args is not None:
                await self._deliver(args)

    async def _deliver(self, args: tuple[Any, ...]) -> None:
        func = self._func
        if func is not None and not self._stopped and await self._runtime.call_user(func, *args) is False:
            self.stop()

    async def _event(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:
            await self._refresh(event)

    async def _state(self, state: KazooState) -> None:
        if state == KazooState.LOST:
            self._ever_lost = True
            if not self._allow_session_lost:
                self.stop()
        elif state == KazooState.CONNECTED and self._ever_lost:
            self._ever_lost = False
            await self._refresh(None)


class AsyncDataWatch(_AsyncWatch):
    """Calls ``func(data, stat)`` (or ``func(data, stat, event)``) now and on each change;
    ``(None, None)`` while the node does not exist."""

    def __init__(self, client: Client, path: str, func: Callable[..., Any] | None = None, *, runtime: Runtime | None = None) -> None:
        super().__init__(client, path, func, True, runtime)
        self._last: tuple[bytes | None, ZnodeStat | None] | None = None
        self._include_event = False

    def _adopt(self, func: Callable[..., Any]) -> None:
        self._include_event = _arity(func) >= 3

    async def _next_args(self, event: WatchedEvent | None) -> tuple[Any, ...] | None:
        try:
            data, stat = await self._read()
        except ConnectionClosedError:
            self._stopped = True
            return None
        if event is not None and self._last is not None and (data, stat) == self._last:
            return None
        self._last = (data, stat)
        return (data, stat, event) if self._include_event else (data, stat)

    async def _read(self) -> tuple[bytes | None, ZnodeStat | None]:
        for _ in range(_FLICKER_READS):
            try:
                data, stat = await self.client.retry(self.client.get, self.path, self._on_event)
                return data, stat
            except NoNodeError:
                if await self.client.retry(self.client.exists, self.path, self._on_event) is None:
                    return None, None
        return None, None


class AsyncChildrenWatch(_AsyncWatch):
    """Calls ``func(children)`` (or ``func(children, event)`` with ``send_event``) now and on
    each change; stops when the node is deleted."""

    def __init__(self, client: Client, path: str, func: Callable[..., Any] | None = None, allow_session_lost: bool = True,
                 send_event: bool = False, *, runtime: Runtime | None = None) -> None:  # fmt: skip
        super().__init__(client, path, func, allow_session_lost, runtime)
        self._send_event = send_event

    async def _next_args(self, event: WatchedEvent | None) -> tuple[Any, ...] | None:
        try:
            children = await self.client.retry(self.client.get_children, self.path, self._on_event)
        except (NoNodeError, ConnectionClosedError):
            self._stopped = True
            return None
        return (children, event) if self._send_event else (children,)


class _BlockingWatch:
    """kazoo's blocking shape: the first call in the caller's thread (kazoo's), later calls
    on the client's callback thread."""

    def __init__(self, client: BlockingClient, runtime: ThreadRuntime, watch: _AsyncWatch, func: Callable[..., Any] | None) -> None:
        self.client = client
        self._runtime = runtime
        self._watch = watch
        if func is not None:
            self(func)

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        args = self._runtime.run(self._watch._first_args, func, timeout=self.client.request_timeout * 2)
        if args is not None and func(*args) is False:
            self.stop()
        return func

    def stop(self) -> None:
        self._runtime.run(on_loop, self._watch.stop, timeout=self.client.request_timeout)


class DataWatch(_BlockingWatch):
    """kazoo's DataWatch for ``SyncClient``: ``func(data, stat)`` or ``func(data, stat, event)``."""

    def __init__(self, client: BlockingClient, path: str, func: Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> None:
        runtime = ThreadRuntime(client)
        super().__init__(client, runtime, AsyncDataWatch(client._client, path, runtime=runtime), func)


class ChildrenWatch(_BlockingWatch):
    """kazoo's ChildrenWatch for ``SyncClient``: ``func(children)`` or ``func(children, event)``."""

    def __init__(self, client: BlockingClient, path: str, func: Callable[..., Any] | None = None, allow_session_lost: bool = True, send_event: bool = False) -> None:
        runtime = ThreadRuntime(client)
        super().__init__(client, runtime, AsyncChildrenWatch(client._client, path, None, allow_session_lost, send_event, runtime=runtime), func)
