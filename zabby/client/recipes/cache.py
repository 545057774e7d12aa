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
brought.  Only when no server's history reaches back that far (an ``EventType.HISTORY_LOST``
event, or a ``HistoryCompactedError`` when resuming) does it *resync*: re-read the whole
subtree and report the difference, as a cache without history would after every reconnect.

``save_state()`` gives the mirror and its zxid as JSON-able data; ``TreeCache(client, path,
saved_state=...)`` starts from it and resumes the feed from that zxid instead of loading,
so a process restarted after N commits applies N commits' events, not a full read.
The listener sees CONNECTION_SUSPENDED / RECONNECTED / LOST as kazoo's does.

The mirror and every decision above live in ``_mirror.TreeMirror`` (sans I/O: it yields
the reads, watches and notifications it needs); ``TreeCache`` performs them with blocking
calls on the SyncClient's callback thread, so all work (the load, events, resyncs) is
serialized with no locks on the hot path; readers take a snapshot under a lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from zabby.errors import ConnectionClosedError, KazooException
from zabby.opcodes import AddWatchMode

from ..states import KazooState, WatchedEvent
from ._mirror import AddWatch, Effect, Fault, Flow, Item, Moved, NodeData, Notify, Read, RoundTrip, QueueBehind, TreeEvent, TreeMirror

if TYPE_CHECKING:
    from ..sync import SyncClient

log = logging.getLogger("zabby.client.cache")

__all__ = ["NodeData", "TreeCache", "TreeEvent"]

STATE_LATENT = 0
STATE_STARTED = 1
STATE_CLOSED = 2


class TreeCache:
    """kazoo's TreeCache for ``SyncClient``: the mirror driven from the client's callback thread."""

    STATE_LATENT = STATE_LATENT
    STATE_STARTED = STATE_STARTED
    STATE_CLOSED = STATE_CLOSED

    def __init__(self, client: SyncClient, path: str, *, saved_state: dict[str, Any] | None = None) -> None:
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
        self._client.add_listener(self._session_watcher)
        self._client._dispatch_callback(self._drive, self._mirror.load)

    def close(self) -> None:
        if self._state == STATE_CLOSED:
            return
        self._state = STATE_CLOSED
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

    def save_state(self) -> dict[str, Any]:
        """The mirror and the zxid it reflects, as JSON-able data for ``saved_state=``: a cache
        started from it resumes the feed from that zxid instead of re-reading (zabby extra)."""
        return self._mirror.save_state()

    # -- on the callback thread ------------------------------------------------------------
    def _on_event(self, event: WatchedEvent) -> None:
        if self._state == STATE_STARTED and self._mirror.wants(event):
            self._enqueue(event)

    def _session_watcher(self, state: KazooState) -> None:
        if self._state == STATE_STARTED:
            self._enqueue(state)

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
