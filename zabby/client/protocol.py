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
  and keeps the watches; ``set_watches_request()`` re-registers them on the next server.
* ``expire()`` drops every watch and returns the callbacks to tell (EventType.NONE).

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
    RolledBackError,
    ZookeeperError,
    error_for_code,
)
from zabby.opcodes import OpCode, WatcherType
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


class WatchRegistry:
    """Client-side watches by kind and server path (ZooKeeper's ZKWatchManager)."""

    def __init__(self) -> None:
        self.kinds: dict[str, dict[str, list[Watcher]]] = {k: {} for k in (DATA, EXIST, CHILD, PERSISTENT, RECURSIVE)}

    def add(self, kind: str, path: str, watcher: Watcher) -> None:
        watchers = self.kinds[kind].setdefault(path, [])
        if watcher not in watchers:
            watchers.append(watcher)

    def triggered(self, event_type: EventType, path: str) -> list[Watcher]:
        """Pop the one-shot watches this event fires and add the persistent ones, deduplicated."""
        kinds = self.kinds
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
        if kinds[PERSISTENT]:
            fired += kinds[PERSISTENT].get(path, ())
        if kinds[RECURSIVE] and event_type is not EventType.CHILD:
            for ancestor in _self_and_ancestors(path):
                fired += kinds[RECURSIVE].get(ancestor, ())
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
            watchers = kinds[kind].pop(path, None)
            if watchers:
                removed.setdefault(_REMOVED_EVENT[kind], []).extend(watchers)
        return [(list(dict.fromkeys(watchers)), event_type) for event_type, watchers in removed.items()]

    def clear(self) -> list[Watcher]:
        everything: list[Watcher] = []
        for table in self.kinds.values():
            for watchers in table.values():
                everything += watchers
            table.clear()
        return list(dict.fromkeys(everything))

    def paths(self, kind: str) -> list[str]:
        return list(self.kinds[kind])

    def __len__(self) -> int:
        return sum(len(t) for t in self.kinds.values())


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
        """The setWatches request re-registering every watch, or None if there are none."""
        if not len(self.watches):
            return None
        w = self.watches
        args = [self.last_zxid, w.paths(DATA), w.paths(EXIST), w.paths(CHILD), w.paths(PERSISTENT), w.paths(RECURSIVE)]
        return self.new_request(OpCode.SET_WATCHES, args, decode_none, xid=XID_SET_WATCHES)

    # -- replies -------------------------------------------------------------------------
    def handle_message(self, msg: list[Any]) -> tuple[Request | None, list[tuple[list[Watcher], WatchedEvent]]]:
        """Apply one decoded frame; return (completed request, watch callbacks to run)."""
        xid = msg[0]
        zxid = msg[1]
        if zxid > self.last_zxid:
            self.last_zxid = zxid
        if xid == XID_NOTIFICATION:
            return None, self._event(msg)
        request = self._match(xid, msg)
        err = msg[2]
        if err == 0:
            try:
                request.result = request.decode(self, request, msg[3:])
                request.ok = True
            except ZookeeperError as exc:
                request.result = exc
            if request.op == OpCode.REMOVE_WATCHES:
                return request, self._watches_removed(request)
        else:
            message = msg[3] if len(msg) > 3 and isinstance(msg[3], str) else ""
            self._failed(request, err, message)
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
        watchers = self.watches.triggered(event_type, server_path)
        if not watchers:
            return []
        return [(watchers, WatchedEvent(event_type, KeeperState.CONNECTED, self.client_path(server_path), msg[1]))]

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
    if request.watch is not None:
        proto.watches.add(request.watch_kind or PERSISTENT, request.path, request.watch)  # type: ignore[arg-type]
    return None


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

