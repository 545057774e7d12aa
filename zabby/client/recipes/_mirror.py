"""The tree cache's mirror, sans I/O: everything ``TreeCache`` and ``AsyncTreeCache`` decide, once.

Theory of operation
-------------------
``TreeMirror`` holds the mirror of a subtree (its nodes, their children, the zxid it reflects)
and makes every decision of the cache (``cache.py`` tells what the cache does and why): which
paths a batch of watch events must re-read, how a batch is applied given those reads, that a
node never moves backwards (``_newer``), how a full read is applied as a resync and what
difference it reports, when the mirror reflects a zxid, what a session change calls for, and
how the mirror is saved and restored.  It never calls the client, starts a thread or awaits.

Its two procedures, ``load()`` (the first load, or the resume of a saved mirror) and
``drain()`` (apply what was queued since the last drain), are generators that *yield effects*
and receive each effect's result, or have the effect's exception thrown in:

==================  ======================================================  ===================
effect              the front-end                                          sends back
==================  ======================================================  ===================
``Read(ops)``       ``client.retry(client.multi_read, ops)``               the results
``AddWatch(since)`` adds the persistent-recursive watch on the root,        ``client.last_zxid``
                    from ``since`` (None: live), with ``client.retry``
``RoundTrip()``     one request (``exists(root)``) with ``client.retry``   ``client.last_zxid``
``QueueBehind(x)``  ``enqueue(x)`` once the callbacks the client has       nothing
                    delivered so far have run (the client's dispatch)
``Notify(event)``   calls the listeners with the TreeEvent                  nothing
``Moved()``         wakes whoever waits for ``zxid`` to move               nothing
``Fault(exc)``      reports a failed step (the drain goes on)              nothing
==================  ======================================================  ===================

A front-end is then a driver: ``TreeCache`` performs the effects with blocking calls on the
SyncClient's callback thread, ``AsyncTreeCache`` awaits them in its worker task.  So the
flows themselves (load, resume, resync on lost history, re-watch after a new session, a
batch's reads and its fence) exist once, and the unit tests drive them against a model
server with no network (tests/client/test_tree_mirror.py).  Generators rather than a state
machine of steps: the flows branch on errors in the middle of I/O (a HistoryCompactedError
from the watch, a reply too big to send), and as generators they read top to bottom.

Queued items, in the order the client delivered them: watch events (``wants`` says which),
``Reached`` marks (``QueueBehind``) and session states (``KazooState``), so a session change
is handled in order with the events before it.  Readers on other threads (the blocking
cache's users) are served under ``guard``, a lock the mirror takes around every change and
read; it never yields while holding it, so a listener may read the mirror.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Generator
from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar, NamedTuple, TypeVar

from zabby.errors import BadArgumentsError, ConnectionClosedError, HistoryCompactedError, NoNodeError

from ..states import EventType, KazooState, WatchedEvent, ZnodeStat

log = logging.getLogger("zabby.client.cache")
_T = TypeVar("_T")
_MAX_NODES = 10_000_000
STATE_FORMAT = 1  # of save_state()'s dict
READ_CHUNK = 256  # reads in one multiRead
_CHANGES = (EventType.CREATED, EventType.CHANGED, EventType.DELETED, EventType.HISTORY_LOST)


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


class Reached(NamedTuple):
    """Queued behind every event of the txns up to ``zxid``: once the events before it are
    applied, the mirror reflects ``zxid``; ``initializes``: the end of a resumed watch's
    history (INITIALIZED then).  ``epoch``: the watch's incarnation when the fence was read;
    a mark of an earlier one is void (see ``_rewatch``)."""

    zxid: int
    epoch: int
    initializes: bool = False


Item = WatchedEvent | Reached | KazooState


# -- effects: what the mirror asks its front-end to do (see the module docstring) --------------
class Read(NamedTuple):
    ops: list[tuple[str, str]]


class AddWatch(NamedTuple):
    since_zxid: int | None


class RoundTrip(NamedTuple):
    pass


class QueueBehind(NamedTuple):
    item: Item


class Notify(NamedTuple):
    event: TreeEvent


class Moved(NamedTuple):
    pass


class Fault(NamedTuple):
    error: Exception


Effect = Read | AddWatch | RoundTrip | QueueBehind | Notify | Moved | Fault
Flow = Generator[Effect, Any, _T]


def _join(parent: str, name: str) -> str:
    return parent + name if parent.endswith("/") else parent + "/" + name


def _parent(path: str) -> str:
    index = path.rfind("/")
    return "/" if index == 0 else path[:index]


def _depth_first(path: str) -> tuple[int, str]:
    """Sort key: parents before their children."""
    return path.count("/"), path


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


def decode_state(root: str, state: dict[str, Any]) -> tuple[int, dict[str, NodeData]]:
    """``save_state()``'s dict back into (zxid, nodes); ValueError if it is not one of ``root``."""
    try:
        if state["format"] != STATE_FORMAT or state["root"] != root:
            raise ValueError(f"format {state['format']!r} of root {state['root']!r}, "
                             f"want format {STATE_FORMAT} of root {root!r}")  # fmt: skip
        nodes = {path: NodeData(path, base64.b64decode(data, validate=True), ZnodeStat(*stat))
                 for path, (data, stat) in state["nodes"].items()}  # fmt: skip
        return int(state["zxid"]), nodes
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"TreeCache: unusable saved state: {exc}") from exc


class TreeMirror:
    """The mirror of the subtree at ``root`` and the decisions that keep it (module docstring)."""

    def __init__(self, root: str, *, saved_state: dict[str, Any] | None = None, guard: AbstractContextManager[Any] | None = None) -> None:
        self.root = root.rstrip("/") or "/"
        self.saved = decode_state(self.root, saved_state) if saved_state is not None else None
        self._guard: AbstractContextManager[Any] = guard if guard is not None else nullcontext()
        self._nodes: dict[str, NodeData] = {}
        self._children: dict[str, set[str]] = {}
        self.zxid = 0  # every change to the subtree up to here is reflected (0: not loaded)
        self.is_initialized = False
        self._received = 0  # the highest zxid of an event handed to the mirror
        self._pending: list[Item] = []
        self._watching = False  # the watch was added (a new session needs it again)
        self._watch_owed = False  # a new session's watch not back yet: tried again at each reconnect
        self._epoch = 0  # the watch's incarnation: a new session's watch, a lost history
        self._suspended = False
        self._lost = False
        self.full_reads = 0  # whole-subtree reads: the load and each resync
        self.node_reads = 0  # single-node reads made for events

    # -- readers (any thread, under the guard) ---------------------------------------------
    def get_data(self, path: str, default: Any = None) -> NodeData | Any:
        with self._guard:
            return self._nodes.get(path, default)

    def get_children(self, path: str, default: Any = None) -> frozenset[str] | Any:
        with self._guard:
            children = self._children.get(path)
            return default if children is None else frozenset(children)

    def snapshot(self) -> dict[str, NodeData]:
        with self._guard:
            return dict(self._nodes)

    def save_state(self) -> dict[str, Any]:
        with self._guard:
            nodes, zxid = list(self._nodes.values()), self.zxid
        return {"format": STATE_FORMAT, "root": self.root, "zxid": zxid,
                "nodes": {n.path: [base64.b64encode(n.data).decode("ascii"), list(n.stat)] for n in nodes}}  # fmt: skip

    # -- input (the front-end's one thread or task) ----------------------------------------
    def wants(self, event: WatchedEvent) -> bool:
        """Note a watch event's zxid; whether it tells of a change to queue."""
        self._received = max(self._received, event.zxid)
        return event.type in _CHANGES and bool(event.path)

    def enqueue(self, item: Item) -> bool:
        """Queue for the next drain; True when it is the first item since the last drain
        began (the front-end then schedules one)."""
        self._pending.append(item)
        return len(self._pending) == 1

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    # -- the load --------------------------------------------------------------------------
    def load(self) -> Flow[None]:
        """The first load: resume the saved mirror if it can be, else watch and read."""
        if self.saved is not None and (yield from self._resume_saved(*self.saved)):
            return
        yield from self._watch_live_and_resync()

    def _resume_saved(self, zxid: int, nodes: dict[str, NodeData]) -> Flow[bool]:
        """Start from a saved mirror and replay the changes after its zxid; False when no
        server's history reaches back that far, or the zxid is ahead of the ensemble (a mirror
        of another history: dropped); the caller then loads."""
        for path in sorted(nodes, key=_depth_first):
            yield from self._put(nodes[path])
        yield from self._set_zxid(zxid)
        try:
            yield AddWatch(zxid)
        except HistoryCompactedError as exc:
            log.info("TreeCache %s: history after 0x%x is gone (oldest 0x%x): reloading", self.root, zxid, exc.oldest_zxid)
            return False
        except BadArgumentsError as exc:
            log.warning("TreeCache %s: the saved mirror is not of this ensemble's history (%s): reloading", self.root, exc)
            for path in sorted(self._nodes, key=len, reverse=True):
                yield from self._remove_one(path)
            with self._guard:
                self.zxid = 0
            return False
        self._watching = True
        yield from self._fence_history()
        return True

    def _fence_history(self) -> Flow[None]:
        """The server sends a resumed watch's history right after the addWatch reply; one more
        round trip puts all of it in the client's callback queue, and a mark behind it (which
        initializes a resumed mirror)."""
        live = yield RoundTrip()
        yield QueueBehind(Reached(live, self._epoch, initializes=True))

    def _watch_live_and_resync(self) -> Flow[None]:
        """Watch from now on, then read the subtree: the read reflects every change up to the
        zxid the watch went live at, and the events bring every later one."""
        live = yield AddWatch(None)
        self._watching = True
        yield from self._resync()
        yield from self._caught_up(live)

    def _caught_up(self, zxid: int) -> Flow[None]:
        """A full read made after the watch went live at ``zxid``: the mirror reflects it."""
        yield from self._set_zxid(zxid)
        if not self.is_initialized:
            yield from self._set_initialized()

    def _set_initialized(self) -> Flow[None]:
        self.is_initialized = True
        yield Notify(TreeEvent(TreeEvent.INITIALIZED, None))

    # -- the drain -------------------------------------------------------------------------
    def drain(self) -> Flow[None]:
        """Apply what was queued: each run of events as one batch, each mark, lost history and
        session change in its place.  A step that fails is reported (``Fault``) and the drain
        goes on; a closed client ends it."""
        batch, self._pending = self._pending, []
        run: list[WatchedEvent] = []
        for item in batch:
            if isinstance(item, WatchedEvent) and item.type != EventType.HISTORY_LOST:
                run.append(item)
                continue
            yield from self._step(self._apply_events(run))
            run = []
            yield from self._step(self._apply_item(item))
        yield from self._step(self._apply_events(run))

    def _step(self, flow: Flow[None]) -> Flow[None]:
        try:
            yield from flow
        except ConnectionClosedError:
            raise
        except Exception as exc:
            yield Fault(exc)

    def _apply_item(self, item: Item) -> Flow[None]:
        if isinstance(item, Reached):
            if item.epoch != self._epoch:
                return  # read before the watch came back: its history may still be on its way
            yield from self._set_zxid(item.zxid)
            if item.initializes and not self.is_initialized:
                yield from self._set_initialized()
        elif isinstance(item, KazooState):
            yield from self._session_changed(item)
        else:  # no server keeps the history the watch needed: it is live again from item.zxid
            log.warning("TreeCache %s: watch history lost, resyncing from a full read at 0x%x", self.root, item.zxid)
            self._epoch += 1
            yield from self._resync()
            yield from self._caught_up(item.zxid)

    def _apply_events(self, events: list[WatchedEvent]) -> Flow[None]:
        """Apply a run of events, then mark their last zxid reached behind the events of that
        txn still to come: a multi's events may reach the cache in two batches.  A reply read
        after them is a fence: the server sent every event of its txns before it."""
        if not events:
            return
        paths = self.paths_to_read(events)
        fresh = yield from self._read_nodes(paths)
        for event in events:
            yield from self._apply_event(event, fresh)
        last = max(e.zxid for e in events)
        if last > self.zxid:
            if not paths:
                yield RoundTrip()  # no read went out: one round trip as the fence
            yield QueueBehind(Reached(last, self._epoch))

    def _apply_event(self, event: WatchedEvent, fresh: dict[str, NodeData]) -> Flow[None]:
        path = event.path
        assert path is not None
        old = self._nodes.get(path)
        if event.type == EventType.DELETED:
            # a node created by the delete's own txn (a multi's delete, then create) survived it
            if old is not None and (event.zxid < 0 or old.stat.czxid < event.zxid):
                yield from self._remove(path)
        elif not _reflects(old, event):
            node = fresh.get(path)
            if node is None:  # gone by the read: gone now (its delete event follows), not stale
                yield from self._remove(path)
            elif _newer(old, node):
                yield from self._put(node)
        if event.type != EventType.CHANGED and path != self.root:
            parent = fresh.get(_parent(path))
            if parent is not None and parent.path in self._nodes and _newer(self._nodes[parent.path], parent):
                yield from self._put(parent)

    def paths_to_read(self, events: list[WatchedEvent]) -> list[str]:
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
            if event.type != EventType.CHANGED and path != self.root:
                parent = self._nodes.get(_parent(path))
                if parent is not None and (event.zxid < 0 or parent.stat.pzxid < event.zxid):
                    paths[parent.path] = None
        last = {event.path: event.type for event in events}
        return [path for path in paths if last.get(path) != EventType.DELETED]

    # -- sessions --------------------------------------------------------------------------
    def _session_changed(self, state: KazooState) -> Flow[None]:
        """The listeners hear SUSPENDED / LOST / RECONNECTED as kazoo's do; within a session
        the watch resumes by itself, a new session needs it again."""
        if state == KazooState.SUSPENDED:
            self._suspended = True
            yield Notify(TreeEvent(TreeEvent.CONNECTION_SUSPENDED, None))
        elif state == KazooState.LOST:
            self._lost = True
            yield Notify(TreeEvent(TreeEvent.CONNECTION_LOST, None))
        elif state == KazooState.CONNECTED and (self._suspended or self._lost):
            lost, self._suspended, self._lost = self._lost, False, False
            yield Notify(TreeEvent(TreeEvent.CONNECTION_RECONNECTED, None))
            if (lost or self._watch_owed) and self._watching:
                yield from self._rewatch()

    def _rewatch(self) -> Flow[None]:
        """A new session has no watches: resume one from the last txn the feed brought (from
        before it: a multi's events may have been cut), or reload if no history reaches.

        A read answered before the watch is back (the new session serves reads at once) is no
        fence: the events of its txns come later, in the watch's history.  So the marks queued
        until now are void (a new epoch), and a fence after the history sets a new one.

        Until that is done the watch is owed: a step that fails (the ensemble away for longer
        than the retries) is reported, and the next reconnect tries again, so the cache never
        stays deaf while its session lives on."""
        since = max(self._received, self.zxid)
        self._epoch += 1
        self._watch_owed = True
        try:
            yield AddWatch(max(0, since - 1))
        except HistoryCompactedError:
            log.warning("TreeCache %s: new session, history after 0x%x gone: resyncing from a full read", self.root, since)
            yield from self._watch_live_and_resync()
        else:
            yield from self._fence_history()
        self._watch_owed = False

    # -- reads -----------------------------------------------------------------------------
    def _read_nodes(self, paths: list[str]) -> Flow[dict[str, NodeData]]:
        """The nodes at ``paths`` in one multiRead (per chunk); a node that does not exist is
        left out."""
        self.node_reads += len(paths)
        results = yield from self._multi_read([("get", path) for path in paths])
        return {path: NodeData(path, *found) for path, found in zip(paths, results, strict=True) if found is not None}

    def _read_tree(self, top: str) -> Flow[dict[str, NodeData]]:
        """The subtree under ``top``: one multiRead (per chunk) of get + get_children per level."""
        self.full_reads += 1
        out: dict[str, NodeData] = {}
        level = [top]
        while level and len(out) < _MAX_NODES:
            results = yield from self._multi_read([op for path in level for op in (("get", path), ("get_children", path))])
            found = zip(level, results[0::2], results[1::2], strict=True)
            level = []
            for path, data, children in found:
                if data is None or children is None:
                    continue
                out[path] = NodeData(path, *data)
                level.extend(_join(path, c) for c in children)
        return out

    def _multi_read(self, ops: list[tuple[str, str]]) -> Flow[list[Any]]:
        """multi_read's results for ``ops``, in order, None for a node that does not exist;
        one request per READ_CHUNK ops."""
        out: list[Any] = []
        for i in range(0, len(ops), READ_CHUNK):
            out += yield from self._read_chunk(ops[i : i + READ_CHUNK])
        return out

    def _read_chunk(self, ops: list[tuple[str, str]]) -> Flow[list[Any]]:
        try:
            results = yield Read(ops)
        except BadArgumentsError:  # the reply would pass the server's size limit: halve it
            if len(ops) == 1:
                raise
            half = len(ops) // 2
            first = yield from self._read_chunk(ops[:half])
            return first + (yield from self._read_chunk(ops[half:]))
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, NoNodeError):
                raise result
        return [None if isinstance(result, NoNodeError) else result for result in results]

    # -- changing the mirror ---------------------------------------------------------------
    def _resync(self) -> Flow[None]:
        """Re-read the whole subtree and report the difference to the listeners."""
        fresh = yield from self._read_tree(self.root)
        yield from self.apply_full_read(fresh)

    def apply_full_read(self, fresh: dict[str, NodeData]) -> Flow[None]:
        """Make the mirror ``fresh`` (a whole-subtree read): remove what it lacks, deepest
        first, then add or update, parents first; a node already newer stays."""
        for path in sorted(set(self._nodes) - set(fresh), key=len, reverse=True):
            yield from self._remove_one(path)
        for path in sorted(fresh, key=_depth_first):
            if _newer(self._nodes.get(path), fresh[path]):
                yield from self._put(fresh[path])

    def _set_zxid(self, zxid: int) -> Flow[None]:
        with self._guard:
            moved = zxid > self.zxid
            if moved:
                self.zxid = zxid
        if moved:
            yield Moved()

    def _put(self, node: NodeData) -> Flow[None]:
        old = self._nodes.get(node.path)
        if old is not None and old.stat.mzxid == node.stat.mzxid and old.stat.czxid == node.stat.czxid and old.data == node.data:
            with self._guard:  # only the child fields moved: not a listener event
                self._nodes[node.path] = node
            return
        with self._guard:
            self._nodes[node.path] = node
            self._children.setdefault(node.path, set())
            if node.path != self.root:
                self._children.setdefault(_parent(node.path), set()).add(node.path.rsplit("/", 1)[1])
        yield Notify(TreeEvent(TreeEvent.NODE_ADDED if old is None else TreeEvent.NODE_UPDATED, node))

    def _remove(self, path: str) -> Flow[None]:
        """Remove ``path`` and its subtree, deepest first (walked by the children sets: a
        scan of every node per delete made a commit's cost grow with the mirror)."""
        doomed, level = [], [path]
        while level:
            doomed += level
            level = [_join(p, c) for p in level for c in self._children.get(p, ())]
        for p in reversed(doomed):
            yield from self._remove_one(p)

    def _remove_one(self, path: str) -> Flow[None]:
        with self._guard:
            node = self._nodes.pop(path, None)
            self._children.pop(path, None)
            siblings = self._children.get(_parent(path))
            if siblings is not None:
                siblings.discard(path.rsplit("/", 1)[1])
        if node is not None:
            yield Notify(TreeEvent(TreeEvent.NODE_REMOVED, node))
