"""TreeCache: a local mirror of a subtree, kept current by one resumable persistent-recursive watch.

Theory of operation
-------------------
``start()`` registers a persistent-recursive watch on the root, takes the zxid the server
had applied when the watch went live (the reply's zxid, ``client.last_zxid``), then loads
the subtree (get + get_children, one multiRead per level of the tree) and reports
NODE_ADDED for every node and then INITIALIZED.  Every change after that zxid reaches the
cache as an event carrying the change's zxid; the cache then reflects every change up to
``zxid`` (the highest event zxid it has applied, or the load's zxid).

Events carry no data, so a CREATED/CHANGED path is re-read, and a create or delete also
re-reads the parent (its numChildren, cversion and pzxid), unless the cached stat already
shows the event's change (mzxid, czxid or pzxid at or past its zxid): a read made after the
change already reflects it.  Events are applied in batches: the reads of everything queued
since the last batch go out as one multiRead (a consistent snapshot, one request however many
nodes: the load reads a level of the tree per request the same way), then the events are
applied in zxid order, and a node is only ever replaced by a newer one (compared by czxid,
then mzxid and pzxid), so the mirror never goes backwards even when events and reads
interleave.

After a reconnect, to the same or another server, the client's persistent watch resumes by
itself from the last event it delivered (``add_watch(..., since_zxid=...)``), so the cache
does not re-read anything: the changes made while it was away arrive as events.  Only when
no server's history reaches back that far (an ``EventType.HISTORY_LOST`` event, or a
``HistoryCompactedError`` when resuming a saved mirror) does it *resync*: re-read the whole
subtree and report the difference, as a cache without history would after every reconnect.

``save_state()`` gives the mirror and its zxid as JSON-able data; ``TreeCache(client, path,
saved_state=...)`` starts from it and resumes the feed from that zxid instead of loading,
so a process restarted after N commits applies N commits' events, not a full read.

All work (the load, events, resyncs) runs on the client's single callback thread, so it is
serialized with no locks on the hot path; readers take a snapshot under a lock.  The
listener sees CONNECTION_SUSPENDED / RECONNECTED / LOST as kazoo's does.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

from zabby.errors import BadArgumentsError, ConnectionClosedError, HistoryCompactedError, KazooException, NoNodeError
from zabby.opcodes import AddWatchMode

from ..states import EventType, KazooState, WatchedEvent, ZnodeStat

log = logging.getLogger("zabby.client.cache")
_MAX_NODES = 10_000_000
_STATE_FORMAT = 1  # of save_state()'s dict
_READ_CHUNK = 256  # reads in one multiRead


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


class _Reached(NamedTuple):
    """Queued behind every event of the txns up to ``zxid``: once the events before it are
    applied, the mirror reflects ``zxid``; ``initializes``: the end of a resumed watch's
    history (INITIALIZED then)."""

    zxid: int
    initializes: bool = False


def _join(parent: str, name: str) -> str:
    return parent + name if parent.endswith("/") else parent + "/" + name


def _parent(path: str) -> str:
    index = path.rfind("/")
    return "/" if index == 0 else path[:index]


def _newer(old: NodeData | None, new: NodeData) -> bool:
    """Whether ``new`` is a later state of the node than ``old`` (a re-created node is newer)."""
    if old is None:
        return True
    a, b = old.stat, new.stat
    if a.czxid != b.czxid:
        return b.czxid > a.czxid
    return (b.mzxid, b.pzxid, b.aversion) > (a.mzxid, a.pzxid, a.aversion)


def _reflects(node: NodeData | None, event: WatchedEvent) -> bool:
    """Whether the cached ``node`` already shows the change ``event`` tells of."""
    if node is None or event.zxid < 0:
        return False
    if event.type == EventType.CREATED:
        return node.stat.czxid >= event.zxid
    return node.stat.mzxid >= event.zxid


class TreeCache:
    STATE_LATENT = 0
    STATE_STARTED = 1
    STATE_CLOSED = 2

    def __init__(self, client: Any, path: str, *, saved_state: dict[str, Any] | None = None) -> None:
        self._client = client
        self._root = path.rstrip("/") or "/"
        self._state = self.STATE_LATENT
        self._nodes: dict[str, NodeData] = {}
        self._children: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._applied = threading.Condition(self._lock)  # notified when ``zxid`` moves
        self._listeners: list[Callable[[TreeEvent], Any]] = []
        self._error_listeners: list[Callable[[BaseException], Any]] = []
        self._is_initialized = False
        self._suspended = False
        self._lost = False
        self._zxid = 0
        self._received = 0  # the highest zxid of an event handed to the cache
        self._pending: list[WatchedEvent | _Reached] = []
        self._drain_scheduled = False
        self._saved = self._decode_state(saved_state) if saved_state is not None else None
        self.full_reads = 0  # whole-subtree reads: the load and each resync
        self.node_reads = 0  # single-node reads made for events
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
        with self._applied:
            self._applied.notify_all()
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

    @property
    def zxid(self) -> int:
        """The mirror reflects every change to the subtree committed at or before this zxid
        (zabby extra; 0 before the load)."""
        return self._zxid

    def wait_for_zxid(self, zxid: int, timeout: float | None = None) -> bool:
        """Block until the mirror reflects ``zxid`` (``self.zxid >= zxid``); False on timeout
        or when the cache is closed first (zabby extra).  ``zxid`` moves with the changes to
        the subtree: wait for the zxid of such a change (a write elsewhere may never come up;
        ``client.wait_for_zxid`` waits for any zxid on the server)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._applied:
            while self._zxid < zxid and self._state != self.STATE_CLOSED:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._applied.wait(left)
            return self._zxid >= zxid

    def save_state(self) -> dict[str, Any]:
        """The mirror and the zxid it reflects, as JSON-able data for ``saved_state=``: a cache
        started from it resumes the feed from that zxid instead of re-reading (zabby extra)."""
        with self._lock:
            nodes, zxid = list(self._nodes.values()), self._zxid
        return {"format": _STATE_FORMAT, "root": self._root, "zxid": zxid,
                "nodes": {n.path: [base64.b64encode(n.data).decode("ascii"), list(n.stat)] for n in nodes}}  # fmt: skip

    def _decode_state(self, state: dict[str, Any]) -> tuple[int, dict[str, NodeData]]:
        try:
            if state["format"] != _STATE_FORMAT or state["root"] != self._root:
                raise ValueError(f"format {state['format']!r} of root {state['root']!r}, "
                                 f"want format {_STATE_FORMAT} of root {self._root!r}")  # fmt: skip
            nodes = {path: NodeData(path, base64.b64decode(data, validate=True), ZnodeStat(*stat))
                     for path, (data, stat) in state["nodes"].items()}  # fmt: skip
            return int(state["zxid"]), nodes
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"TreeCache: unusable saved state: {exc}") from exc

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
        if self._saved is not None and self._resume_saved(*self._saved):
            return
        self._watch_live_and_resync()
        self._set_initialized()

    def _resume_saved(self, zxid: int, nodes: dict[str, NodeData]) -> bool:
        """Start from a saved mirror and replay the changes after its zxid; False when no
        server's history reaches back that far, or the zxid is ahead of the ensemble (a mirror
        of another history: dropped); the caller then loads."""
        for path in sorted(nodes, key=lambda p: (p.count("/"), p)):
            self._put(nodes[path])
        self._set_zxid(zxid)
        try:
            self._client.retry(self._client.add_watch, self._root, self._on_event, AddWatchMode.PERSISTENT_RECURSIVE, since_zxid=zxid)
        except HistoryCompactedError as exc:
            log.info("TreeCache %s: history after 0x%x is gone (oldest 0x%x): reloading", self._root, zxid, exc.oldest_zxid)
            return False
        except BadArgumentsError as exc:
            log.warning("TreeCache %s: the saved mirror is not of this ensemble's history (%s): reloading", self._root, exc)
            for path in sorted(self._nodes, key=len, reverse=True):
                self._remove_one(path)
            with self._applied:
                self._zxid = 0
            return False
        self._mark_live_after_replay()
        return True

    def _mark_live_after_replay(self) -> None:
        """The server sends a resumed watch's history right after the addWatch reply; one more
        round trip puts all of it in the callback queue, and a mark behind it: the
        cache reflects the reply's zxid once the history before the mark is applied."""
        self._client.retry(self._client.exists, self._root)
        self._client._dispatch_callback(self._enqueue, _Reached(self._client.last_zxid, initializes=True))

    def _watch_live_and_resync(self) -> None:
        """Watch from now on, then read the subtree: the read reflects every change up to the
        zxid the watch went live at, and the events bring every later one."""
        self._client.retry(self._client.add_watch, self._root, self._on_event, AddWatchMode.PERSISTENT_RECURSIVE)
        live = self._client.last_zxid
        self._resync()
        self._set_zxid(live)

    def _set_initialized(self) -> None:
        self._is_initialized = True
        self.initialized.set()
        self._emit(TreeEvent.INITIALIZED, None)

    def _on_event(self, event: WatchedEvent) -> None:
        if self._state != self.STATE_STARTED:
            return
        self._received = max(self._received, event.zxid)
        if event.type in (EventType.CREATED, EventType.CHANGED, EventType.DELETED, EventType.HISTORY_LOST) and event.path:
            self._enqueue(event)

    def _enqueue(self, item: WatchedEvent | _Reached) -> None:
        """Queue for the next batch; one drain is queued behind everything that came before."""
        self._pending.append(item)
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self._client._dispatch_callback(self._safe, (self._drain,))

    def _drain(self) -> None:
        self._drain_scheduled = False
        batch, self._pending = self._pending, []
        start = 0
        for i, item in enumerate(batch):  # a HISTORY_LOST or a mark ends a run of events
            if isinstance(item, _Reached) or item.type == EventType.HISTORY_LOST:
                self._apply_events(batch[start:i])  # type: ignore[arg-type]
                self._apply_mark(item)
                start = i + 1
        self._apply_events(batch[start:])  # type: ignore[arg-type]

    def _apply_mark(self, item: WatchedEvent | _Reached) -> None:
        if isinstance(item, _Reached):
            self._set_zxid(item.zxid)
            if item.initializes and not self._is_initialized:
                self._set_initialized()
            return
        # no server keeps the history the watch needed: it is live again from item.zxid
        log.warning("TreeCache %s: watch history lost, resyncing from a full read at 0x%x", self._root, item.zxid)
        self._resync()
        self._set_zxid(item.zxid)

    def _apply_events(self, events: list[WatchedEvent]) -> None:
        """Apply a run of events, then mark their last zxid reached behind the events of that
        txn still to come: a multi's events may reach the cache in two batches.  A reply read
        after them is a fence: the server sent every event of its txns before it."""
        if not events:
            return
        paths = self._paths_to_read(events)
        fresh = self._read_nodes(paths)
        for event in events:
            path = event.path
            assert path is not None
            old = self._nodes.get(path)
            if event.type == EventType.DELETED:
                if old is not None and (event.zxid < 0 or old.stat.czxid <= event.zxid):
                    self._remove(path)
            elif not _reflects(old, event):
                node = fresh.get(path)
                if node is not None and _newer(old, node):  # None: deleted since; its event follows
                    self._put(node)
            if event.type != EventType.CHANGED and path != self._root:
                parent = fresh.get(_parent(path))
                if parent is not None and _newer(self._nodes.get(parent.path), parent) and parent.path in self._nodes:
                    self._put(parent)
        last = max(e.zxid for e in events)
        if last > self._zxid:
            if not paths:
                self._client.retry(self._client.exists, self._root)  # no read went out: one round trip as the fence
            self._client._dispatch_callback(self._enqueue, _Reached(last))

    def _paths_to_read(self, events: list[WatchedEvent]) -> list[str]:
        """The paths whose current state the batch needs: each created or changed node not
        already at its event's zxid, and the parent of each created or deleted node whose
        pzxid is behind the event (its numChildren, cversion, pzxid); not a node the batch
        ends by deleting (a read would find nothing: a build's segments merged away later)."""
        paths: dict[str, None] = {}
        for event in events:
            path = event.path
            assert path is not None
            if event.type != EventType.DELETED and not _reflects(self._nodes.get(path), event):
                paths[path] = None
            if event.type != EventType.CHANGED and path != self._root:
                parent = self._nodes.get(_parent(path))
                if parent is not None and (event.zxid < 0 or parent.stat.pzxid < event.zxid):
                    paths[parent.path] = None
        last = {event.path: event.type for event in events}
        return [path for path in paths if last.get(path) != EventType.DELETED]

    def _read_nodes(self, paths: list[str]) -> dict[str, NodeData]:
        """The nodes at ``paths`` in one multiRead (per chunk); a node that does not exist is
        left out."""
        self.node_reads += len(paths)
        results = self._multi_read([("get", path) for path in paths])
        return {path: NodeData(path, *found) for path, found in zip(paths, results, strict=True) if found is not None}

    def _read_tree(self, top: str) -> dict[str, NodeData]:
        """The subtree under ``top``: one multiRead (per chunk) of get + get_children per level."""
        self.full_reads += 1
        out: dict[str, NodeData] = {}
        level = [top]
        while level and len(out) < _MAX_NODES:
            results = self._multi_read([op for path in level for op in (("get", path), ("get_children", path))])
            found = zip(level, results[0::2], results[1::2], strict=True)
            level = []
            for path, data, children in found:
                if data is None or children is None:
                    continue
                out[path] = NodeData(path, *data)
                level.extend(_join(path, c) for c in children)
        return out

    def _multi_read(self, ops: list[tuple[str, str]]) -> list[Any]:
        """multi_read's results for ``ops``, in order, None for a node that does not exist;
        one request per _READ_CHUNK ops, retried on a connection problem."""
        out: list[Any] = []
        for i in range(0, len(ops), _READ_CHUNK):
            out += self._read_chunk(ops[i : i + _READ_CHUNK])
        return out

    def _read_chunk(self, ops: list[tuple[str, str]]) -> list[Any]:
        try:
            results = self._client.retry(self._client.multi_read, ops)
        except BadArgumentsError:  # the reply would pass the server's size limit: halve it
            if len(ops) == 1:
                raise
            half = len(ops) // 2
            return self._read_chunk(ops[:half]) + self._read_chunk(ops[half:])
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, NoNodeError):
                raise result
        return [None if isinstance(result, NoNodeError) else result for result in results]

    def _resync(self) -> None:
        """Re-read the whole subtree and report the difference to the listeners."""
        fresh = self._read_tree(self._root)
        for path in sorted(set(self._nodes) - set(fresh), key=len, reverse=True):
            self._remove_one(path)
        for path in sorted(fresh, key=lambda p: (p.count("/"), p)):
            if _newer(self._nodes.get(path), fresh[path]):
                self._put(fresh[path])

    def _set_zxid(self, zxid: int) -> None:
        with self._applied:
            if zxid > self._zxid:
                self._zxid = zxid
                self._applied.notify_all()

    def _put(self, node: NodeData) -> None:
        old = self._nodes.get(node.path)
        if old is not None and old.stat.mzxid == node.stat.mzxid and old.stat.czxid == node.stat.czxid and old.data == node.data:
            with self._lock:  # only the child fields moved: not a listener event
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
        """Runs on the callback thread, in order with the events: the watch resumes by itself."""
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
            if lost and self._is_initialized:
                self._safe((self._rewatch,))

    def _rewatch(self) -> None:
        """A new session has no watches: resume one from the last txn the feed brought (from
        before it: a multi's events may have been cut), or reload if no history reaches."""
        since = max(self._received, self._zxid)
        try:
            self._client.retry(self._client.add_watch, self._root, self._on_event, AddWatchMode.PERSISTENT_RECURSIVE, since_zxid=max(0, since - 1))
        except HistoryCompactedError:
            log.warning("TreeCache %s: new session, history after 0x%x gone: resyncing from a full read", self._root, since)
            self._watch_live_and_resync()

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

