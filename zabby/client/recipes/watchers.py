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


class DataWatch:
    """Calls ``func(data, stat)`` (or ``func(data, stat, event)``) now and on each change."""

    def __init__(self, client: Any, path: str, func: Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> None:
        self._client = client
        self._path = path
        self._func: Callable[..., Any] | None = None
        self._stopped = False
        self._lock = threading.RLock()
        self._last: tuple[Any, Any] | None = None
        self._ever_lost = False
        self._client.add_listener(self._session_watcher)
        if func is not None:
            self(func)

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        self._func = func
        self._include_event = _arity(func) >= 3
        self._get_data(None)
        return func

    def _get_data(self, event: WatchedEvent | None) -> None:
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
                self._call(data, stat, event)

    def _read(self) -> tuple[bytes | None, Any]:
        for _ in range(100):  # bounded: only loops while the node flickers
            try:
                return self._client.retry(self._client.get, self._path, self._watcher)
            except NoNodeError:
                stat = self._client.retry(self._client.exists, self._path, self._watcher)
                if stat is None:
                    return None, None
        return None, None

    def _call(self, data: Any, stat: Any, event: WatchedEvent | None) -> None:
        assert self._func is not None
        result = self._func(data, stat, event) if self._include_event else self._func(data, stat)
        if result is False:
            self._stopped = True
            self._func = None
            self._client.remove_listener(self._session_watcher)

    def _watcher(self, event: WatchedEvent) -> None:
        if event.type != "NONE":
            self._get_data(event)

    def _session_watcher(self, state: KazooState) -> None:
        if state == KazooState.LOST:
            self._ever_lost = True
        elif state == KazooState.CONNECTED and self._ever_lost:
            self._ever_lost = False
            self._get_data(None)


class ChildrenWatch:
    """Calls ``func(children)`` (or ``func(children, event)`` with ``send_event``) on changes."""

    def __init__(self, client: Any, path: str, func: Callable[..., Any] | None = None, allow_session_lost: bool = True, send_event: bool = False) -> None:
        self._client = client
        self._path = path
        self._func: Callable[..., Any] | None = None
        self._send_event = send_event
        self._allow_session_lost = allow_session_lost
        self._stopped = False
        self._lock = threading.RLock()
        self._ever_lost = False
        self._client.add_listener(self._session_watcher)
        if func is not None:
            self(func)

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        self._func = func
        self._get_children(None)
        return func

    def _get_children(self, event: WatchedEvent | None) -> None:
        with self._lock:
            if self._stopped or self._func is None:
                return
            try:
                children = self._client.retry(self._client.get_children, self._path, self._watcher)
            except (NoNodeError, ConnectionClosedError):
                self._stopped = True
                return
            result = self._func(children, event) if self._send_event else self._func(children)
            if result is False:
                self._stopped = True
                self._func = None
                self._client.remove_listener(self._session_watcher)

    def _watcher(self, event: WatchedEvent) -> None:
        if event.type != "NONE":
            self._get_children(event)

    def _session_watcher(self, state: KazooState) -> None:
        if state == KazooState.LOST:
            self._ever_lost = True
            if not self._allow_session_lost:
                self._stopped = True
        elif state == KazooState.CONNECTED and self._ever_lost:
            self._ever_lost = False
            self._get_children(None)
