"""TreeCache: a local mirror of a subtree, kept current by one persistent-recursive watch.

Theory of operation
-------------------
``start()`` registers a persistent-recursive watch on the root (``add_watch``), then loads
the subtree (get + get_children, breadth first) and reports NODE_ADDED for every node and
then INITIALIZED.  Every later event for a path is handled by re-reading that path
(CREATED/CHANGED → get → NODE_ADDED or NODE_UPDATED if its stat changed; DELETED → drop
the node and its descendants, NODE_REMOVED for each).  Re-reading instead of trusting the
event keeps the mirror right even when events and reads interleave.

All work (the initial load, events, resyncs) runs on the client's single callback thread,
so it is serialized with no locks on the hot path; readers take a snapshot under a lock.
After any reconnect (CONNECTED after SUSPENDED or LOST) the cache re-registers its watch if
the session was lost and *resyncs*: it re-reads the whole subtree and reports the
difference, so nothing missed while disconnected leaves it stale (the lesson of Kylin's
broadcaster).  The listener sees CONNECTION_SUSPENDED / RECONNECTED / LOST as kazoo's does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

from zabby.errors import ConnectionClosedError, KazooException, NoNodeError
from zabby.opcodes import AddWatchMode

from ..states import KazooState, WatchedEvent, ZnodeStat

log = logging.getLogger("zabby.client.cache")
_MAX_NODES = 10_000_000


class NodeData(NamedTuple):
    path: str
    data: bytes
    stat: ZnodeStat


class _TreeEventFields(NamedTuple):
    event_type: int
    event_data: NodeData | None


class TreeEvent(_TreeEventFields):
    """kazoo's TreeEvent: ``(event_type, event_data)``, with the event types as constants."""

    __slots__ = ()
    NODE_ADDED: ClassVar[int] = 0
    NODE_UPDATED: ClassVar[int] = 1
    NODE_REMOVED: ClassVar[int] = 2
    CONNECTION_SUSPENDED: ClassVar[int] = 3
    CONNECTION_RECONNECTED: ClassVar[int] = 4
    CONNECTION_LOST: ClassVar[int] = 5
    INITIALIZED: ClassVar[int] = 6

    @classmethod
    def make(cls, event_type: int, event_data: NodeData | None) -> TreeEvent:
        return cls(event_type, event_data)


def _join(parent: str, name: str) -> str:
    return parent + name if parent.endswith("/") else parent + "/" + name


def _parent(path: str) -> str:
    index = path.rfind("/")
    return "/" if index == 0 else path[:index]


class TreeCache:
    STATE_LATENT = 0
    STATE_STARTED = 1
    STATE_CLOSED = 2

    def __init__(self, client: Any, path: str) -> None:
        self._client = client
        self._root = path.rstrip("/") or "/"
        self._state = self.STATE_LATENT
        self._nodes: dict[str, NodeData] = {}
        self._children: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[TreeEvent], Any]] = []
        self._error_listeners: list[Callable[[BaseException], Any]] = []
        self._is_initialized = False
        self._suspended = False
        self._lost = False
        self.initialized = threading.Event()

    # -- public API ------------------------------------------------------------------------
    def start(self) -> None:
        if self._state != self.STATE_LATENT:
            raise KazooException("already started")
        self._state = self.STATE_STARTED
        self._client.add_listener(self._session_watcher)
        self._client._dispatch_callback(self._safe, (self._initial_load,))

    def close(self) -> None:
        if self._state == self.STATE_CLOSED:
            return
        self._state = self.STATE_CLOSED
        self._client.remove_listener(self._session_watcher)
        if self._client.connected:
            try:
                self._client.remove_watches(self._root, 5)
            except KazooException:
                pass

    def listen(self, listener: Callable[[TreeEvent], Any]) -> None:
        self._listeners.append(listener)

    def listen_fault(self, listener: Callable[[BaseException], Any]) -> None:
        self._error_listeners.append(listener)

    def get_data(self, path: str, default: Any = None) -> NodeData | Any:
        with self._lock:
            return self._nodes.get(path, default)

    def get_children(self, path: str, default: Any = None) -> frozenset[str] | Any:
        with self._lock:
            children = self._children.get(path)
            return default if children is None else frozenset(children)

    def snapshot(self) -> dict[str, NodeData]:
        """A copy of the whole mirror: ``{path: NodeData}`` (zabby extra)."""
        with self._lock:
            return dict(self._nodes)

    # -- work on the callback thread -------------------------------------------------------
    def _safe(self, args: tuple[Callable[[], None]]) -> None:
        if self._state != self.STATE_STARTED:
            return
        try:
            args[0]()
        except ConnectionClosedError:
            return
        except Exception as exc:
            self._fault(exc)

    def _initial_load(self) -> None:
        self._client.add_watch(self._root, self._on_event, AddWatchMode.PERSISTENT_RECURSIVE)
        self._resync()
        self._is_initialized = True
        self.initialized.set()
        self._emit(TreeEvent.INITIALIZED, None)

    def _on_event(self, event: WatchedEvent) -> None:
        if self._state != self.STATE_STARTED or event.path is None or not self._is_initialized:
            return
        if event.type == "DELETED":
            self._safe((lambda: self._remove(event.path),))  # type: ignore[arg-type]
        elif event.type in ("CREATED", "CHANGED"):
            self._safe((lambda: self._refresh(event.path),))  # type: ignore[arg-type]

    def _refresh(self, path: str) -> None:
        try:
            data, stat = self._client.retry(self._client.get, path)
        except NoNodeError:
            self._remove(path)
            return
        old = self._nodes.get(path)
        self._put(NodeData(path, data, stat))
        if old is None:
            self._refresh_parent_stat(path)

    def _refresh_parent_stat(self, path: str) -> None:
        """Keep the parent's stat (numChildren, cversion, pzxid) exact; not a listener event."""
        if path == self._root:
            return
        parent = _parent(path)
        try:
            data, stat = self._client.retry(self._client.get, parent)
        except NoNodeError:
            return
        with self._lock:
            if parent in self._nodes:
                self._nodes[parent] = NodeData(parent, data, stat)

    def _read_tree(self, top: str) -> dict[str, NodeData]:
        out: dict[str, NodeData] = {}
        todo = [top]
        while todo and len(out) < _MAX_NODES:
            path = todo.pop()
            try:
                data, stat = self._client.retry(self._client.get, path)
                children = self._client.retry(self._client.get_children, path)
            except NoNodeError:
                continue
            out[path] = NodeData(path, data, stat)
            todo.extend(_join(path, c) for c in children)
        return out

    def _resync(self) -> None:
        """Re-read the whole subtree and report the difference to the listeners."""
        fresh = self._read_tree(self._root)
        for path in sorted(set(self._nodes) - set(fresh), key=len, reverse=True):
            self._remove_one(path)
        for path in sorted(fresh, key=lambda p: (p.count("/"), p)):
            self._put(fresh[path])

    def _put(self, node: NodeData) -> None:
        old = self._nodes.get(node.path)
        if old is not None and old.stat.mzxid == node.stat.mzxid and old.data == node.data:
            with self._lock:
                self._nodes[node.path] = node
            return
        with self._lock:
            self._nodes[node.path] = node
            self._children.setdefault(node.path, set())
            if node.path != self._root:
                self._children.setdefault(_parent(node.path), set()).add(node.path.rsplit("/", 1)[1])
        self._emit(TreeEvent.NODE_ADDED if old is None else TreeEvent.NODE_UPDATED, node)

    def _remove(self, path: str) -> None:
        prefix = path.rstrip("/") + "/"
        doomed = [p for p in self._nodes if p == path or p.startswith(prefix)]
        for p in sorted(doomed, key=len, reverse=True):
            self._remove_one(p)
        if doomed:
            self._refresh_parent_stat(path)

    def _remove_one(self, path: str) -> None:
        with self._lock:
            node = self._nodes.pop(path, None)
            self._children.pop(path, None)
            siblings = self._children.get(_parent(path))
            if siblings is not None:
                siblings.discard(path.rsplit("/", 1)[1])
        if node is not None:
            self._emit(TreeEvent.NODE_REMOVED, node)

    # -- session ---------------------------------------------------------------------------
    def _session_watcher(self, state: KazooState) -> None:
        if self._state != self.STATE_STARTED:
            return
        if state == KazooState.SUSPENDED:
            self._suspended = True
            self._emit(TreeEvent.CONNECTION_SUSPENDED, None)
        elif state == KazooState.LOST:
            self._lost = True
            self._emit(TreeEvent.CONNECTION_LOST, None)
        elif state == KazooState.CONNECTED and (self._suspended or self._lost):
            lost, self._suspended, self._lost = self._lost, False, False
            self._emit(TreeEvent.CONNECTION_RECONNECTED, None)
            if lost:
                self._safe((lambda: self._client.add_watch(self._root, self._on_event, AddWatchMode.PERSISTENT_RECURSIVE),))
            self._safe((self._resync,))

    def _emit(self, event_type: int, data: NodeData | None) -> None:
        event = TreeEvent(event_type, data)
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception as exc:
                log.exception("error in TreeCache listener")
                self._fault(exc)

    def _fault(self, exc: BaseException) -> None:
        if not self._error_listeners:
            log.error("TreeCache error: %r", exc)
        for listener in list(self._error_listeners):
            try:
                listener(exc)
            except Exception:
                log.exception("error in TreeCache fault listener")
