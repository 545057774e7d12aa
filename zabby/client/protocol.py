"""Sans-I/O client protocol: request encoding, reply decoding, xids and the watch registry.

Theory of operation
-------------------
``ClientProtocol`` holds everything about a session that is not I/O:

* ``new_request`` gives a request its xid, packs its frame once (the shell only
  concatenates frames and writes them) and records how to decode the reply.
* ``sent(request)`` appends it to ``pending``: replies come back in request order
  (docs/protocol.md), so a reply is matched against the head of the deque in O(1);
  special xids (ping, auth, set-watches) are looked up in the deque if out of order.
* ``handle_message(msg)`` turns one decoded frame into either a completed request
  (``request.ok`` / ``request.result``) or a list of watch callbacks to run with their
  ``WatchedEvent``.  Watches are registered here when the reply that sets them arrives,
  before the caller sees the reply, so no event between reply and registration is lost.
* ``drop_connection()`` returns the requests in flight (they fail with ConnectionLoss)
  and keeps the watches; ``set_watches_request()`` re-registers the one-shot ones on the
  next server, and ``resume_requests()`` the persistent ones (below).
* ``expire()`` drops every watch and returns the callbacks to tell (EventType.NONE).

Persistent watches resume (zabby's extension, docs/protocol.md): each persistent watcher is a
``Feed`` that knows the zxid of the last event delivered to it and how many events of that
zxid it got (a multi's events share one, and a connection may drop between them).  After a
reconnect it is added again with ``since_zxid`` one before that zxid; the server sends its
history, addressed to that request (a seventh value in the event: the request's xid), and the
feed skips the events of that zxid it already had: the events of one txn come in the same
order from every server.  Until its resume is answered a feed hears no live event: its
history brings them.  So a watcher sees every change once, in zxid order.  A server whose
history does not reach back refuses (HistoryCompactedError); the shell then tries another
server, and after as many refusals as it has servers ``resume_refused`` adds the watch again
live and tells the watcher ``EventType.HISTORY_LOST``.

Paths given to and returned from the user are relative to the chroot; the protocol
adds and strips it.  Nothing here blocks, sleeps or touches a socket.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from zabby.errors import (
    ConnectionLoss,
    Err,
    HistoryCompactedError,
    RolledBackError,
    ZookeeperError,
    error_for_code,
)
from zabby.opcodes import AddWatchMode, OpCode, WatcherType
from zabby.wire.messages import XID_AUTH, XID_NOTIFICATION, XID_PING, XID_SET_WATCHES, pack_frame

from .security import acl_from_wire
from .states import EVENT_TYPE_MAP, EventType, KeeperState, WatchedEvent, ZnodeStat

Watcher = Callable[[WatchedEvent], Any]
Decoder = Callable[["ClientProtocol", "Request", list[Any]], Any]

# watch kinds, as the registry's dict names
DATA, EXIST, CHILD, PERSISTENT, RECURSIVE = "data", "exist", "child", "persistent", "recursive"
_XID_MAX = 2**31 - 1


class Request:
    """One request on the wire and, once answered, its outcome."""

    __slots__ = ("xid", "op", "frame", "decode", "path", "watch", "watch_kind", "ok", "result", "task", "callback")

    def __init__(self, xid: int, op: int, frame: bytes, decode: Decoder, path: str | None, watch: Watcher | None, watch_kind: str | None) -> None:
        self.xid = xid
        self.op = op
        self.frame = frame
        self.decode = decode
        self.path = path  # server-side path (chroot applied), for watch registration
        self.watch = watch
        self.watch_kind = watch_kind
        self.ok = False
        self.result: Any = None
        self.task: Any = None  # set by the shell: the trio task waiting for the outcome
        self.callback: Callable[[Request], None] | None = None


def to_stat(value: list[int] | None) -> ZnodeStat | None:
    return None if value is None else ZnodeStat(*value)


class Feed:
    """A persistent watcher and how far its feed of events got: ``zxid``, the zxid of the
    last event delivered to it (or the zxid it was registered at, when none was), and
    ``count``, the events of that zxid delivered.  ``live``: it hears live events (False from
    a reconnect until its resume is answered).  ``skip``: events of ``zxid`` its history
    brings again, to pass over.  ``refusals``: servers that refused to resume it in a row."""

    __slots__ = ("watcher", "zxid", "count", "live", "skip", "refusals")

    def __init__(self, watcher: Watcher, zxid: int) -> None:
        self.watcher = watcher
        self.zxid = zxid
        self.count = 0
        self.live = True
        self.skip = 0
        self.refusals = 0

    def delivered(self, zxid: int) -> None:
        if zxid == self.zxid:
            self.count += 1
        else:
            self.zxid, self.count = zxid, 1

    def takes(self, zxid: int) -> bool:
        """Whether an event of its history at ``zxid`` is new to it (else it is skipped)."""
        if self.skip and zxid == self.zxid:
            self.skip -= 1
            return False
        self.skip = 0  # past the zxid it had events of
        self.delivered(zxid)
        return True

    def resume_from(self) -> int:
        """The ``since_zxid`` to resume with; ``skip`` is then the events of ``zxid`` it had."""
        self.live, self.skip = False, self.count
        return self.zxid - 1 if self.count else self.zxid


class WatchRegistry:
    """Client-side watches by kind and server path (ZooKeeper's ZKWatchManager): the one-shot
    kinds' watchers, and the persistent kinds' feeds."""

    def __init__(self) -> None:
        self.kinds: dict[str, dict[str, list[Watcher]]] = {k: {} for k in (DATA, EXIST, CHILD)}
        self.feeds: dict[str, dict[str, list[Feed]]] = {k: {} for k in (PERSISTENT, RECURSIVE)}

    def add(self, kind: str, path: str, watcher: Watcher, zxid: int = 0) -> Feed | None:
        """Register a watch; a persistent one's feed starts at ``zxid`` (returned)."""
        if kind in self.feeds:
            feeds = self.feeds[kind].setdefault(path, [])
            for feed in feeds:
                if feed.watcher == watcher:  # added again: its feed starts again
                    feed.zxid, feed.count, feed.live, feed.skip = zxid, 0, True, 0
                    return feed
            feed = Feed(watcher, zxid)
            feeds.append(feed)
            return feed
        watchers = self.kinds[kind].setdefault(path, [])
        if watcher not in watchers:
            watchers.append(watcher)
        return None

    def feed(self, kind: str, path: str, watcher: Watcher) -> Feed | None:
        for feed in self.feeds.get(kind, {}).get(path, ()):
            if feed.watcher == watcher:
                return feed
        return None

    def triggered(self, event_type: EventType, path: str, zxid: int = -1) -> list[Watcher]:
        """Pop the one-shot watches this event fires and add the live persistent ones (their
        feeds now at ``zxid``), deduplicated."""
        kinds, feeds = self.kinds, self.feeds
        fired: list[Watcher] = []
        if event_type in (EventType.CREATED, EventType.CHANGED):
            fired += kinds[DATA].pop(path, ())
            fired += kinds[EXIST].pop(path, ())
        elif event_type is EventType.DELETED:
            fired += kinds[DATA].pop(path, ())
            fired += kinds[EXIST].pop(path, ())
            fired += kinds[CHILD].pop(path, ())
        elif event_type is EventType.CHILD:
            fired += kinds[CHILD].pop(path, ())
        if feeds[PERSISTENT]:
            _live(feeds[PERSISTENT].get(path, ()), zxid, fired)
        if feeds[RECURSIVE] and event_type is not EventType.CHILD:
            for ancestor in _self_and_ancestors(path):
                _live(feeds[RECURSIVE].get(ancestor, ()), zxid, fired)
        return list(dict.fromkeys(fired)) if len(fired) > 1 else fired

    def remove(self, path: str, watcher_type: int) -> list[tuple[list[Watcher], EventType]]:
        """Drop the watches of ``watcher_type`` on ``path``; returns each removed group with
        the event its watchers get (ZooKeeper's client tells them: DataWatchRemoved, …)."""
        kinds = self.kinds
        chosen = {
            WatcherType.CHILDREN: (CHILD,),
            WatcherType.DATA: (DATA, EXIST),
            WatcherType.ANY: (DATA, EXIST, CHILD, PERSISTENT, RECURSIVE),
            WatcherType.PERSISTENT: (PERSISTENT,),
            WatcherType.PERSISTENT_RECURSIVE: (RECURSIVE,),
        }[WatcherType(watcher_type)]
        removed: dict[EventType, list[Watcher]] = {}
        for kind in chosen:
            if kind in self.feeds:
                watchers = [feed.watcher for feed in self.feeds[kind].pop(path, ())]
            else:
                watchers = kinds[kind].pop(path, [])
            if watchers:
                removed.setdefault(_REMOVED_EVENT[kind], []).extend(watchers)
        return [(list(dict.fromkeys(watchers)), event_type) for event_type, watchers in removed.items()]

    def clear(self) -> list[Watcher]:
        everything: list[Watcher] = []
        for table in self.kinds.values():
            for watchers in table.values():
                everything += watchers
            table.clear()
        for feeds in self.feeds.values():
            for path_feeds in feeds.values():
                everything += [feed.watcher for feed in path_feeds]
            feeds.clear()
        return list(dict.fromkeys(everything))

    def paths(self, kind: str) -> list[str]:
        return list(self.feeds[kind] if kind in self.feeds else self.kinds[kind])

    def every_feed(self) -> list[tuple[str, str, Feed]]:
        return [(kind, path, feed) for kind, feeds in self.feeds.items() for path, path_feeds in feeds.items() for feed in path_feeds]

    def __len__(self) -> int:
        return sum(len(t) for t in self.kinds.values()) + sum(len(t) for t in self.feeds.values())


def _live(feeds: Iterable[Feed], zxid: int, into: list[Watcher]) -> None:
    for feed in feeds:
        if feed.live:
            feed.delivered(zxid)
            into.append(feed.watcher)


_REMOVED_EVENT = {
    DATA: EventType.DATA_WATCH_REMOVED,
    EXIST: EventType.DATA_WATCH_REMOVED,
    CHILD: EventType.CHILD_WATCH_REMOVED,
    PERSISTENT: EventType.PERSISTENT_WATCH_REMOVED,
    RECURSIVE: EventType.PERSISTENT_WATCH_REMOVED,
}


def _self_and_ancestors(path: str) -> Iterable[str]:
    yield path
    while path != "/":
        index = path.rfind("/")
        path = "/" if index == 0 else path[:index]
        yield path


class ClientProtocol:
    """The per-session protocol state; see the module docstring."""

    def __init__(self, chroot: str = "") -> None:
        self.chroot = chroot.rstrip("/")
        self.last_zxid = 0
        self._xid = 0
        self.pending: deque[Request] = deque()
        self.watches = WatchRegistry()
        self.reply_zxid = 0  # the zxid of the reply being decoded (a watch registered by it starts there)
        self._replay: tuple[int, Feed] | None = None  # (addWatch xid, its feed): its history is arriving

    # -- paths ---------------------------------------------------------------------------
    def server_path(self, path: str) -> str:
        if not isinstance(path, str):
            raise TypeError(f"path must be a str, not {type(path).__name__}")
        if not self.chroot:
            return path
        return self.chroot if path == "/" else self.chroot + path

    def client_path(self, path: str) -> str:
        chroot = self.chroot
        if not chroot or not path.startswith(chroot):
            return path
        rest = path[len(chroot) :]
        return rest or "/"

    # -- requests ------------------------------------------------------------------------
    def next_xid(self) -> int:
        xid = self._xid + 1
        if xid > _XID_MAX:
            xid = 1
        self._xid = xid
        return xid

    def new_request(self, op: int, args: list[Any], decode: Decoder, path: str | None = None, watch: Watcher | None = None, watch_kind: str | None = None, xid: int | None = None) -> Request:
        if xid is None:
            xid = self.next_xid()
        frame = pack_frame([xid, op, *args])
        return Request(xid, op, frame, decode, path, watch, watch_kind)

    def sent(self, request: Request) -> None:
        self.pending.append(request)

    def ping_request(self) -> Request:
        return self.new_request(OpCode.PING, [], decode_none, xid=XID_PING)

    def auth_request(self, scheme: str, credential: bytes) -> Request:
        return self.new_request(OpCode.AUTH, [scheme, credential], decode_none, xid=XID_AUTH)

    def set_watches_request(self) -> Request | None:
        """The setWatches request re-registering every one-shot watch, or None if there are
        none (persistent ones resume: ``resume_requests``)."""
        w = self.watches
        if not any(w.kinds.values()):
            return None
        args = [self.last_zxid, w.paths(DATA), w.paths(EXIST), w.paths(CHILD), [], []]
        return self.new_request(OpCode.SET_WATCHES, args, decode_none, xid=XID_SET_WATCHES)

    def resume_requests(self) -> list[Request]:
        """An addWatch with ``since_zxid`` for each persistent watcher, from its last event;
        until answered, it hears no live event (see the module's docstring)."""
        return [self.new_request(OpCode.ADD_WATCH, [path, _MODES[kind], feed.resume_from()], decode_resumed, path, feed.watcher, kind)
                for kind, path, feed in self.watches.every_feed()]  # fmt: skip

    def resume_refused(self, request: Request, servers: int) -> Request | None:
        """A resume was refused (HistoryCompactedError).  None while fewer than ``servers``
        servers in a row refused it (the shell tries another); then the addWatch that
        registers it again live, whose reply tells the watcher HISTORY_LOST."""
        feed = self.watches.feed(request.watch_kind, request.path, request.watch)  # type: ignore[arg-type]
        if feed is None:
            return None
        feed.refusals += 1
        if feed.refusals < servers:
            return None
        feed.refusals = 0
        kind, path = request.watch_kind, request.path
        return self.new_request(OpCode.ADD_WATCH, [path, _MODES[kind], None], decode_relived, path, feed.watcher, kind)  # type: ignore[index]

    # -- replies -------------------------------------------------------------------------
    def handle_message(self, msg: list[Any]) -> tuple[Request | None, list[tuple[list[Watcher], WatchedEvent]]]:
        """Apply one decoded frame; return (completed request, watch callbacks to run)."""
        xid = msg[0]
        zxid = msg[1]
        if zxid > self.last_zxid:
            self.last_zxid = zxid
        if xid == XID_NOTIFICATION:
            if len(msg) > 6:
                return None, self._replayed(msg)
            self._replay = None
            return None, self._event(msg)
        self._replay = None  # a watch's history comes right after its reply: it is over
        request = self._match(xid, msg)
        err = msg[2]
        if err == 0:
            self.reply_zxid = zxid
            try:
                request.result = request.decode(self, request, msg[3:])
                request.ok = True
            except ZookeeperError as exc:
                request.result = exc
            if request.op == OpCode.REMOVE_WATCHES:
                return request, self._watches_removed(request)
            if request.decode is decode_relived:
                return request, self._history_lost(request, zxid)
        else:
            message = msg[3] if len(msg) > 3 and isinstance(msg[3], str) else ""
            self._failed(request, err, message)
            if err == Err.HISTORYCOMPACTED and len(msg) > 4 and isinstance(request.result, HistoryCompactedError):
                request.result.oldest_zxid = msg[4]
        return request, []

    def _match(self, xid: int, msg: list[Any]) -> Request:
        pending = self.pending
        if pending and pending[0].xid == xid:
            return pending.popleft()
        for request in pending:
            if request.xid == xid and xid < 0:
                pending.remove(request)
                return request
        raise ConnectionLoss(f"reply for unknown xid {xid} (err {msg[2] if len(msg) > 2 else '?'}): {msg[3:4]!r}")

    def _failed(self, request: Request, err: int, message: str) -> None:
        if request.op == OpCode.EXISTS and err == Err.NONODE:
            if request.watch is not None:
                self.watches.add(EXIST, request.path, request.watch)  # type: ignore[arg-type]
            request.result, request.ok = None, True
            return
        request.result = error_for_code(err)(message or _err_name(err))

    def _event(self, msg: list[Any]) -> list[tuple[list[Watcher], WatchedEvent]]:
        event_type = EVENT_TYPE_MAP.get(msg[3], EventType.NONE)
        server_path = msg[5]
        watchers = self.watches.triggered(event_type, server_path, msg[1])
        if not watchers:
            return []
        return [(watchers, WatchedEvent(event_type, KeeperState.CONNECTED, self.client_path(server_path), msg[1]))]

    def _replayed(self, msg: list[Any]) -> list[tuple[list[Watcher], WatchedEvent]]:
        """An event of a watch's history: for that watch's feed alone, unless it had it."""
        replay = self._replay
        if replay is None or replay[0] != msg[6] or not replay[1].takes(msg[1]):
            return []
        event = WatchedEvent(EVENT_TYPE_MAP.get(msg[3], EventType.NONE), KeeperState.CONNECTED, self.client_path(msg[5]), msg[1])
        return [([replay[1].watcher], event)]

    def _history_lost(self, request: Request, zxid: int) -> list[tuple[list[Watcher], WatchedEvent]]:
        return [([request.watch], WatchedEvent(EventType.HISTORY_LOST, KeeperState.CONNECTED, self.client_path(request.path), zxid))]  # type: ignore[list-item, arg-type]

    def _watches_removed(self, request: Request) -> list[tuple[list[Watcher], WatchedEvent]]:
        path = self.client_path(request.path)  # type: ignore[arg-type]
        removed = self.watches.remove(request.path, request.watch_kind)  # type: ignore[arg-type]
        return [(watchers, WatchedEvent(event_type, KeeperState.CONNECTED, path)) for watchers, event_type in removed]

    def drop_connection(self) -> list[Request]:
        """Forget the requests in flight (the shell fails them with ConnectionLoss)."""
        lost = list(self.pending)
        self.pending.clear()
        return lost

    def expire(self) -> list[tuple[list[Watcher], WatchedEvent]]:
        """The session is gone: drop every watch and tell each watcher once (EventType.NONE)."""
        watchers = self.watches.clear()
        if not watchers:
            return []
        return [(watchers, WatchedEvent(EventType.NONE, KeeperState.EXPIRED_SESSION, None))]


def _err_name(code: int) -> str:
    try:
        return Err(code).name
    except ValueError:
        return f"error {code}"


# -- decoders: (protocol, request, values after err) -> result ---------------------------------
def decode_none(proto: ClientProtocol, request: Request, values: list[Any]) -> None:
    return None


def decode_true(proto: ClientProtocol, request: Request, values: list[Any]) -> bool:
    return True


def decode_path(proto: ClientProtocol, request: Request, values: list[Any]) -> str:
    return proto.client_path(values[0])


def decode_path_stat(proto: ClientProtocol, request: Request, values: list[Any]) -> tuple[str, ZnodeStat]:
    return proto.client_path(values[0]), ZnodeStat(*values[1])


def decode_exists(proto: ClientProtocol, request: Request, values: list[Any]) -> ZnodeStat | None:
    stat = to_stat(values[0] if values else None)
    if request.watch is not None:
        proto.watches.add(DATA if stat is not None else EXIST, request.path, request.watch)  # type: ignore[arg-type]
    return stat


def decode_get(proto: ClientProtocol, request: Request, values: list[Any]) -> tuple[bytes, ZnodeStat]:
    if request.watch is not None:
        proto.watches.add(DATA, request.path, request.watch)  # type: ignore[arg-type]
    return values[0], ZnodeStat(*values[1])


def decode_stat(proto: ClientProtocol, request: Request, values: list[Any]) -> ZnodeStat:
    return ZnodeStat(*values[0])


def decode_acls(proto: ClientProtocol, request: Request, values: list[Any]) -> tuple[list[Any], ZnodeStat]:
    return acl_from_wire(values[0]), ZnodeStat(*values[1])


def decode_children(proto: ClientProtocol, request: Request, values: list[Any]) -> list[str]:
    if request.watch is not None:
        proto.watches.add(CHILD, request.path, request.watch)  # type: ignore[arg-type]
    return values[0]


def decode_children2(proto: ClientProtocol, request: Request, values: list[Any]) -> tuple[list[str], ZnodeStat]:
    if request.watch is not None:
        proto.watches.add(CHILD, request.path, request.watch)  # type: ignore[arg-type]
    return values[0], ZnodeStat(*values[1])


def decode_paths(proto: ClientProtocol, request: Request, values: list[Any]) -> list[str]:
    return [proto.client_path(p) for p in values[0]]


def decode_value(proto: ClientProtocol, request: Request, values: list[Any]) -> Any:
    return values[0]


def decode_whoami(proto: ClientProtocol, request: Request, values: list[Any]) -> list[tuple[str, str]]:
    return [(scheme, ident) for scheme, ident in values[0]]


def decode_add_watch(proto: ClientProtocol, request: Request, values: list[Any]) -> None:
    """addWatch's reply: the watch's feed starts at the reply's zxid."""
    if request.watch is not None:
        proto.watches.add(request.watch_kind or PERSISTENT, request.path, request.watch, proto.reply_zxid)  # type: ignore[arg-type]
    return None


def decode_add_watch_since(since_zxid: int) -> Decoder:
    """The reply of an addWatch with ``since_zxid``: the feed starts there, and the watch's
    history follows the reply."""

    def decode(proto: ClientProtocol, request: Request, values: list[Any]) -> None:
        feed = proto.watches.add(request.watch_kind or PERSISTENT, request.path, request.watch, since_zxid)  # type: ignore[arg-type]
        if feed is not None:
            proto._replay = (request.xid, feed)

    return decode


def decode_resumed(proto: ClientProtocol, request: Request, values: list[Any]) -> None:
    """A resume's reply: the feed is live again, and its history follows."""
    feed = proto.watches.feed(request.watch_kind, request.path, request.watch)  # type: ignore[arg-type]
    if feed is not None:
        feed.live, feed.refusals = True, 0
        proto._replay = (request.xid, feed)
    return None


def decode_relived(proto: ClientProtocol, request: Request, values: list[Any]) -> None:
    """Added again live after every server refused to resume it: from the reply's zxid."""
    feed = proto.watches.feed(request.watch_kind, request.path, request.watch)  # type: ignore[arg-type]
    if feed is not None:
        feed.zxid, feed.count, feed.live, feed.skip = proto.reply_zxid, 0, True, 0
    return None


_MODES = {PERSISTENT: int(AddWatchMode.PERSISTENT), RECURSIVE: int(AddWatchMode.PERSISTENT_RECURSIVE)}


def decode_multi(proto: ClientProtocol, request: Request, values: list[Any]) -> list[Any]:
    """Per-op results like kazoo: values on success, exception instances on failure."""
    results = values[0]
    out: list[Any] = []
    for op, err, value in results:
        if op == -1:
            out.append(RolledBackError() if err == 0 else error_for_code(err)(_err_name(err)))
        elif op in (OpCode.CREATE, OpCode.CREATE2, OpCode.CREATE_CONTAINER, OpCode.CREATE_TTL):
            out.append(proto.client_path(value[0] if isinstance(value, list) else value))
        elif op == OpCode.SET_DATA:
            out.append(ZnodeStat(*value))
        else:
            out.append(True)
    return out


def decode_multi_read(proto: ClientProtocol, request: Request, values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for op, err, value in values[0]:
        if err != 0:
            out.append(error_for_code(err)(_err_name(err)))
        elif op == OpCode.GET_DATA:
            out.append((value[0], ZnodeStat(*value[1])))
        else:
            out.append(value)
    return out


def connection_loss() -> ConnectionLoss:
    return ConnectionLoss("connection to the server was lost")

