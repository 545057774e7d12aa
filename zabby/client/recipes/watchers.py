"""kazoo's DataWatch and ChildrenWatch: call a function now and on every change.

Both work as decorators (``@client.DataWatch("/path")``).  The function runs on the
client's callback thread; returning ``False`` stops the watch.  They re-read after a new
session (CONNECTED after LOST), so they never stay stale; within one session the server
re-delivers missed events after a reconnect (setWatches).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

from zabby.errors import ConnectionClosedError, NoNodeError

from ..states import KazooState, WatchedEvent


def _arity(func: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return 2
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return 3
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


class _Watch:
    """What both helpers share: the function, the stop rule, and the re-read after a new
    session.  A subclass reads in ``_refresh(event)`` and hands the result to its function."""

    def __init__(self, client: Any, path: str, allow_session_lost: bool = True) -> None:
        self._client = client
        self._path = path
        self._func: Callable[..., Any] | None = None
        self._allow_session_lost = allow_session_lost
        self._stopped = False
        self._lock = threading.RLock()
        self._ever_lost = False
        self._client.add_listener(self._session_watcher)

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        self._func = func
        self._adopt(func)
        self._refresh(None)
        return func

    def _adopt(self, func: Callable[..., Any]) -> None:
        """Look at the function before its first call (a hook)."""

    def _refresh(self, event: WatchedEvent | None) -> None:
        raise NotImplementedError

    def _deliver(self, *args: Any) -> None:
        """Call the function; returning False stops the watch for good."""
        assert self._func is not None
        if self._func(*args) is False:
            self._stop()

    def _stop(self) -> None:
        self._stopped = True
        self._func = None
        self._client.remove_listener(self._session_watcher)

    def _watcher(self, event: WatchedEvent) -> None:
        if event.type != "NONE":
            self._refresh(event)

    def _session_watcher(self, state: KazooState) -> None:
        if state == KazooState.LOST:
            self._ever_lost = True
            if not self._allow_session_lost:
                self._stopped = True
        elif state == KazooState.CONNECTED and self._ever_lost:
            self._ever_lost = False
            self._refresh(None)


class DataWatch(_Watch):
    """Calls ``func(data, stat)`` (or ``func(data, stat, event)``) now and on each change."""

    def __init__(self, client: Any, path: str, func: Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(client, path)
        self._last: tuple[Any, Any] | None = None
        self._include_event = False
        if func is not None:
            self(func)

    def _adopt(self, func: Callable[..., Any]) -> None:
        self._include_event = _arity(func) >= 3

    def _refresh(self, event: WatchedEvent | None) -> None:
        with self._lock:
            if self._stopped or self._func is None:
                return
            try:
                data, stat = self._read()
            except ConnectionClosedError:
                self._stopped = True
                return
            if event is None or self._last is None or (data, stat) != self._last or event.type == "NONE":
                self._last = (data, stat)
                self._deliver(*((data, stat, event) if self._include_event else (data, stat)))

    def _read(self) -> tuple[bytes | None, Any]:
        for _ in range(100):  # bounded: only loops while the node flickers
            try:
                read: tuple[bytes, Any] = self._client.retry(self._client.get, self._path, self._watcher)
                return read
            except NoNodeError:
                stat = self._client.retry(self._client.exists, self._path, self._watcher)
                if stat is None:
                    return None, None
        return None, None


class ChildrenWatch(_Watch):
    """Calls ``func(children)`` (or ``func(children, event)`` with ``send_event``) on changes."""

    def __init__(self, client: Any, path: str, func: Callable[..., Any] | None = None, allow_session_lost: bool = True, send_event: bool = False) -> None:
        super().__init__(client, path, allow_session_lost)
        self._send_event = send_event
        if func is not None:
            self(func)

    def _refresh(self, event: WatchedEvent | None) -> None:
        with self._lock:
            if self._stopped or self._func is None:
                return
            try:
                children = self._client.retry(self._client.get_children, self._path, self._watcher)
            except (NoNodeError, ConnectionClosedError):
                self._stopped = True
                return
            self._deliver(*((children, event) if self._send_event else (children,)))
