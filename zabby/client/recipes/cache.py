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
does not re-read anything: the changes made while it was away arrive as events.  After a new
session (which has no watches) the cache adds the watch again from the last zxid its feed
brought, and claims no zxid until that watch's history is in (a read the new session answered
before the watch was back is no fence: the events of its txns come later).  If that watch
cannot be added (the ensemble away past the retries), each reconnect tries again.  Only when
no server's history reaches back that far (an ``EventType.HISTORY_LOST`` event, or a
``HistoryCompactedError`` when resuming) does it *resync*: re-read the whole subtree and
report the difference, as a cache without history would after every reconnect.

``save_state()`` gives the mirror and its zxid as JSON-able data; ``TreeCache(client, path,
saved_state=...)`` starts from it and resumes the feed from that zxid instead of loading,
so a process restarted after N commits applies N commits' events, not a full read.
The listener sees CONNECTION_SUSPENDED / RECONNECTED / LOST as kazoo's does.

Two front-ends, one mirror
--------------------------
Every decision above is made once, in ``_mirror.TreeMirror`` (sans I/O: it yields the
reads, watches and notifications it needs).  The two classes here only perform them:

* ``AsyncTreeCache`` (``zabby.Client``, asyncio or trio): the watch callback and the state
  listener, run by the client's event task, only queue what they are given; one worker task
  the cache owns drains the queue, awaiting the reads and the listeners (plain or coroutine
  functions), so events are applied in order by one task.  ``await cache.start()`` returns
  once the mirror is loaded (or resumed and caught up); ``async with`` closes it at the end.
* ``TreeCache`` (``SyncClient``, kazoo's shape): the same load and drain, run on the
  SyncClient's callback thread with blocking calls, so they are serialized with the client's
  other callbacks and listeners run as kazoo runs them; the mirror takes a lock only around
  its changes, for readers on other threads.

Why the blocking cache drives the mirror from the callback thread rather than running
``AsyncTreeCache`` on the loop thread (as ``DataWatch`` runs ``AsyncDataWatch``): its events
reach the callback thread first either way (SyncClient delivers every watch event there),
and its listeners must run there (kazoo's contract: they may call the blocking client).
From the callback thread a batch costs one hop to the loop thread for its multiRead and one
back, and each listener is a plain call.  On the loop thread each event would first hop back
to the loop, and every listener call would be a round trip to the callback thread that the
worker waits for.  Measured (a prototype of that variant, one server, a loaded 2-core machine,
6 alternating rounds, from the commit's ack to the listener hearing its last node): a commit
of one node, median 0.8-1.2 ms either way; a multi of 50 nodes, 2-3 ms thread-driven against
22-33 ms on the loop thread.  The Spark job commits multis and its query nodes' lag is
measured to the listener (docs/reliability.md), so the blocking cache keeps this path; the
lock for its readers and ``wait_for_zxid``'s condition would be needed on either path.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

import anyio

from zabby.errors import ConnectionClosedError, KazooException
from zabby.opcodes import AddWatchMode

from ..connection import Signal, spawn_detached
from ..states import KazooState, WatchedEvent
from ._mirror import AddWatch, Effect, Fault, Flow, Item, Moved, NodeData, Notify, Read, RoundTrip, QueueBehind, TreeEvent, TreeMirror

if TYPE_CHECKING:
    from ..aio import Client
    from ..blocking import BlockingClient

log = logging.getLogger("zabby.client.cache")

__all__ = ["AsyncTreeCache", "NodeData", "TreeCache", "TreeEvent"]

STATE_LATENT = 0
STATE_STARTED = 1
STATE_CLOSED = 2


class _MirrorFront:
    """What both caches show of their ``TreeMirror``: the readers, the listeners' lists and
    the saved state (the front-ends differ only in how they drive it and wait on it)."""

    STATE_LATENT = STATE_LATENT
    STATE_STARTED = STATE_STARTED
    STATE_CLOSED = STATE_CLOSED

    _mirror: TreeMirror
    _state: int
    _listeners: list[Callable[[TreeEvent], Any]]
    _error_listeners: list[Callable[[BaseException], Any]]

    def _enqueue(self, item: Item) -> None:
        raise NotImplementedError

    # the watch and state callbacks: while started, they only queue, in the client's order
    def _on_event(self, event: WatchedEvent) -> None:
        if self._state == STATE_STARTED and self._mirror.wants(event):
            self._enqueue(event)

    def _on_state(self, state: KazooState) -> None:
        if self._state == STATE_STARTED:
            self._enqueue(state)

    def listen(self, listener: Callable[[TreeEvent], Any]) -> None:
        """Call ``listener(event)`` for every TreeEvent, in order (the async cache awaits a
        coroutine function's result before the next event)."""
        self._listeners.append(listener)

    def listen_fault(self, listener: Callable[[BaseException], Any]) -> None:
        self._error_listeners.append(listener)

    def get_data(self, path: str, default: Any = None) -> NodeData | Any:
        return self._mirror.get_data(path, default)

    def get_children(self, path: str, default: Any = None) -> frozenset[str] | Any:
        return self._mirror.get_children(path, default)

    def snapshot(self) -> dict[str, NodeData]:
        """A copy of the whole mirror: ``{path: NodeData}`` (zabby extra)."""
        return self._mirror.snapshot()

    @property
    def zxid(self) -> int:
        """The mirror reflects every change to the subtree committed at or before this zxid
        (zabby extra; 0 before the load)."""
        return self._mirror.zxid

    @property
    def full_reads(self) -> int:
        """Whole-subtree reads: the load and each resync (zabby extra)."""
        return self._mirror.full_reads

    @property
    def node_reads(self) -> int:
        """Single-node reads made for events (zabby extra)."""
        return self._mirror.node_reads

    def save_state(self) -> dict[str, Any]:
        """The mirror and the zxid it reflects, as JSON-able data for ``saved_state=``: a cache
        started from it resumes the feed from that zxid instead of re-reading (zabby extra)."""
        return self._mirror.save_state()


class AsyncTreeCache(_MirrorFront):
    """The tree cache for ``zabby.Client`` (asyncio or trio): ``await cache.start()`` or
    ``async with AsyncTreeCache(client, "/root") as cache:``; listeners may be plain or
    coroutine functions.  See the module docstring."""

    def __init__(self, client: Client, path: str, *, saved_state: dict[str, Any] | None = None) -> None:
        self.client = client
        self._mirror = TreeMirror(path, saved_state=saved_state)
        self._root = self._mirror.root
        self._state = STATE_LATENT
        self._listeners: list[Callable[[TreeEvent], Any]] = []
        self._error_listeners: list[Callable[[BaseException], Any]] = []
        self._wake = Signal()  # something was queued
        self._moved = Signal()  # ``zxid`` moved, or the cache closed
        self._scope: anyio.CancelScope | None = None
        self._done: anyio.Event | None = None  # the worker ended
        self._ready: anyio.Event | None = None  # loaded (or the worker ended first)
        self._worker: int | None = None  # the worker task's id
        self._failure: Exception | None = None  # why the load failed

    # -- public API ------------------------------------------------------------------------
    async def start(self) -> Self:
        """Load the subtree (or resume the saved mirror and replay its history) and return
        once the mirror is current; raises what made the load fail.  The cache then keeps
        itself current until ``close()``."""
        if self._state != STATE_LATENT:
            raise KazooException("already started")
        self._state = STATE_STARTED
        self._scope, self._done, self._ready = anyio.CancelScope(), anyio.Event(), anyio.Event()
        self.client.add_listener(self._on_state)
        spawn_detached(functools.partial(self._work, self._scope, self._done, self._ready), name=f"zabby-tree-cache {self._root}")
        try:
            await self._ready.wait()
        except BaseException:  # cancelled while loading: stop the worker too
            with anyio.CancelScope(shield=True):
                await self.close()
            raise
        if not self._mirror.is_initialized:
            failure = self._failure or ConnectionClosedError(f"the tree cache of {self._root} was closed while loading")
            await self.close()
            raise failure
        return self

    async def close(self) -> None:
        """Stop the worker and remove the watch; the cache keeps its last mirror for reading."""
        if self._state == STATE_CLOSED:
            return
        started, self._state = self._state == STATE_STARTED, STATE_CLOSED
        self.client.remove_listener(self._on_state)
        self._moved.fire()
        if self._scope is not None:
            self._scope.cancel()
        if self._done is not None and self._worker != anyio.get_current_task().id:  # not from a listener
            await self._done.wait()
        if started:
            await self.client._remove_watcher(self._root, self._on_event, AddWatchMode.PERSISTENT_RECURSIVE)

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def wait_for_zxid(self, zxid: int, timeout: float | None = None) -> bool:
        """Until the mirror reflects ``zxid`` (``self.zxid >= zxid``); False on timeout or when
        the cache is closed first.  Wait for the zxid of a change to the subtree (a write
        elsewhere may never come up; ``client.wait_for_zxid`` waits for any zxid)."""
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while self._mirror.zxid < zxid and self._state != STATE_CLOSED:
                await self._moved.wait()
        return self._mirror.zxid >= zxid

    # -- callbacks, run by the client's event task: they only queue -------------------------
    def _enqueue(self, item: Item) -> None:
        self._mirror.enqueue(item)
        self._wake.fire()

    # -- the worker: the one task that changes the mirror ----------------------------------
    async def _work(self, scope: anyio.CancelScope, done: anyio.Event, ready: anyio.Event) -> None:
        try:
            with scope:
                self._worker = anyio.get_current_task().id
                await self._drive(self._mirror.load())
                while True:
                    if self._mirror.has_pending:
                        await self._drive(self._mirror.drain())
                    else:
                        await self._wake.wait()
        except ConnectionClosedError:
            pass
        except Exception as exc:  # a detached task must not raise; after the load, faults are told
            self._failure = exc
            if self._mirror.is_initialized:
                log.exception("TreeCache %s: worker failed", self._root)
        finally:
            ready.set()
            done.set()

    async def _drive(self, flow: Flow[None]) -> None:
        """Run one of the mirror's procedures, awaiting its effects."""
        reply: Any = None
        error: Exception | None = None
        while True:
            try:
                effect = flow.send(reply) if error is None else flow.throw(error)
            except StopIteration:
                return
            reply, error = None, None
            try:
                reply = await self._perform(effect)
            except Exception as exc:
                error = exc

    async def _perform(self, effect: Effect) -> Any:
        client = self.client
        match effect:
            case Read(ops):
                return await client.retry(client.multi_read, ops)
            case AddWatch(since):
                await client.retry(client.add_watch, self._root, self._on_event, AddWatchMode.PERSISTENT_RECURSIVE, since_zxid=since)
                return client.last_zxid
            case RoundTrip():
                await client.retry(client.exists, self._root)
                return client.last_zxid
            case QueueBehind(item):
                client._dispatch(self._enqueue, item)
            case Notify(event):
                await self._emit(event)
            case Moved():
                self._moved.fire()
            case Fault(exc):
                if not self._mirror.is_initialized:
                    raise exc  # the load (a replay) failed: start() raises it
                await self._fault(exc)
        return None

    async def _emit(self, event: TreeEvent) -> None:
        for listener in list(self._listeners):
            try:
                result = listener(event)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                log.exception("error in TreeCache listener")
                await self._fault(exc)
        if event.event_type == TreeEvent.INITIALIZED and self._ready is not None:
            self._ready.set()

    async def _fault(self, exc: BaseException) -> None:
        if not self._error_listeners:
            log.error("TreeCache error: %r", exc)
        for listener in list(self._error_listeners):
            try:
                result = listener(exc)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("error in TreeCache fault listener")


class TreeCache(_MirrorFront):
    """kazoo's TreeCache for ``SyncClient``: the mirror driven from the client's callback thread."""

    def __init__(self, client: BlockingClient, path: str, *, saved_state: dict[str, Any] | None = None) -> None:
        self._client = client
        self._lock = threading.Lock()  # the mirror's guard: readers on other threads
        self._applied = threading.Condition(self._lock)  # notified when ``zxid`` moves
        self._mirror = TreeMirror(path, saved_state=saved_state, guard=self._lock)
        self._root = self._mirror.root
        self._state = STATE_LATENT
        self._listeners: list[Callable[[TreeEvent], Any]] = []
        self._error_listeners: list[Callable[[BaseException], Any]] = []
        self.initialized = threading.Event()

    # -- public API ------------------------------------------------------------------------
    def start(self) -> None:
        """Load in the background; ``initialized`` is set (and INITIALIZED told) when done."""
        if self._state != STATE_LATENT:
            raise KazooException("already started")
        self._state = STATE_STARTED
        self._client.add_listener(self._on_state)
        self._client._dispatch_callback(self._drive, self._mirror.load)

    def close(self) -> None:
        if self._state == STATE_CLOSED:
            return
        self._state = STATE_CLOSED
        self._client.remove_listener(self._on_state)
        with self._applied:
            self._applied.notify_all()
        if self._client.connected:  # only this cache's watcher: another on the root keeps its watch
            try:
                self._client._sync(self._client._client._remove_watcher, (self._root, self._on_event, AddWatchMode.PERSISTENT_RECURSIVE), None)
            except KazooException:
                pass

    def wait_for_zxid(self, zxid: int, timeout: float | None = None) -> bool:
        """Block until the mirror reflects ``zxid`` (``self.zxid >= zxid``); False on timeout
        or when the cache is closed first (zabby extra).  ``zxid`` moves with the changes to
        the subtree: wait for the zxid of such a change (a write elsewhere may never come up;
        ``client.wait_for_zxid`` waits for any zxid on the server)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._applied:
            while self._mirror.zxid < zxid and self._state != STATE_CLOSED:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._applied.wait(left)
            return self._mirror.zxid >= zxid

    # -- on the callback thread ------------------------------------------------------------
    def _enqueue(self, item: Item) -> None:
        """Queue for the next drain; one drain is queued behind everything that came before."""
        if self._mirror.enqueue(item):
            self._client._dispatch_callback(self._drive, self._mirror.drain)

    def _drive(self, procedure: Callable[[], Flow[None]]) -> None:
        """Run one of the mirror's procedures, performing its effects with blocking calls."""
        if self._state != STATE_STARTED:
            return
        flow = procedure()
        reply: Any = None
        error: Exception | None = None
        try:
            while True:
                effect = flow.send(reply) if error is None else flow.throw(error)
                reply, error = None, None
                try:
                    reply = self._perform(effect)
                except Exception as exc:
                    error = exc
        except StopIteration:
            return
        except ConnectionClosedError:
            return
        except Exception as exc:
            self._fault(exc)

    def _perform(self, effect: Effect) -> Any:
        client = self._client
        match effect:
            case Read(ops):
                return client.retry(client.multi_read, ops)
            case AddWatch(since):
                client.retry(client.add_watch, self._root, self._on_event, AddWatchMode.PERSISTENT_RECURSIVE, since_zxid=since)
                return client.last_zxid
            case RoundTrip():
                client.retry(client.exists, self._root)
                return client.last_zxid
            case QueueBehind(item):
                client._dispatch_callback(self._enqueue, item)
            case Notify(event):
                self._emit(event)
            case Moved():
                with self._applied:
                    self._applied.notify_all()
            case Fault(exc):
                self._fault(exc)
        return None

    def _emit(self, event: TreeEvent) -> None:
        if event.event_type == TreeEvent.INITIALIZED:
            self.initialized.set()
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
