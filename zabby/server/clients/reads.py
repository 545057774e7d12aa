"""Read ops, answered from the local tree (ZooKeeper's FinalRequestProcessor for reads).

Each handler takes the tree, the watch registry, the asking session (an ``Asker``: its
identity, and the watcher) and the request's arguments, and returns the reply values or
raises ``ZabbyError``.  Watches are registered here, in the same step as the read, so no
change can slip between the read and the watch.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Protocol

from zabby.errors import Err, ZabbyError, shown
from zabby.opcodes import AddWatchMode, EventType, OpCode, WatcherType
from zabby.tree import acl as acls
from zabby.tree.datatree import DataTree, Listing, Znode, shown_data
from zabby.tree.watches import Replayed, WatchHistory, WatchManager


class Asker(Hashable, Protocol):
    """The session a read is for: the identity ACLs are checked against, and the watcher
    (a key of the watch registry) that its watches are registered for."""

    @property
    def session_id(self) -> int: ...

    @property
    def auth_ids(self) -> list[acls.AuthId]: ...

    @property
    def superuser(self) -> bool: ...

    @property
    def reply_bytes_max(self) -> int:
        """The largest reply it may be sent (half of clientConnectionMemoryMax)."""
        ...


_JAVA_TRIMMED = "".join(chr(code) for code in range(33))  # what Java's String.trim() strips


def _string(path: Any) -> str:
    """A read's path is only looked up, never checked, as in ZooKeeper: no node has a bad
    path, so a bad path is NONODE (or NOWATCHER)."""
    if not isinstance(path, str):
        raise ZabbyError(Err.BADARGUMENTS, f"path must be a string, not {type(path).__name__}")
    return path


def _node(tree: DataTree, path: Any) -> Znode:
    node = tree.nodes.get(_string(path))
    if node is None:
        raise ZabbyError(Err.NONODE, path)
    return node


def _require(node: Znode, perm: int, who: Asker) -> None:
    if not acls.check(node.acl, perm, who.auth_ids, who.superuser):
        raise ZabbyError(Err.NOAUTH, "insufficient permission")


def exists(tree: DataTree, watches: WatchManager, who: Asker, args: list[Any]) -> list[Any]:
    path, watch = args
    node = tree.nodes.get(_string(path))
    if "\0" in path:  # the one check ZooKeeper makes on a read's path
        raise ZabbyError(Err.BADARGUMENTS, "path must not contain a NUL")
    if node is not None:
        _require(node, acls.READ, who)
    if watch:
        watches.add_data(path, who)
    return [None if node is None else node.stat()]


def get_data(tree: DataTree, watches: WatchManager, who: Asker, args: list[Any]) -> list[Any]:
    path, watch = args
    node = _node(tree, path)
    _require(node, acls.READ, who)
    if watch:
        watches.add_data(path, who)
    return [shown_data(node.data), node.stat()]


def get_children(tree: DataTree, watches: WatchManager, who: Asker, args: list[Any]) -> list[Any]:
    path, watch = args
    node = _node(tree, path)
    _require(node, acls.READ, who)
    listing = node.listing()
    if len(listing) > LISTING_CHECKED_FROM and _listing_bytes(listing) > who.reply_bytes_max:
        raise ZabbyError(Err.BADARGUMENTS, f"the children of {shown(path)} ({len(listing)}) make a reply over the "
                         f"{who.reply_bytes_max}-byte limit (half of clientConnectionMemoryMax)")  # fmt: skip
    if watch:
        watches.add_child(path, who)
    return [listing]


LISTING_CHECKED_FROM = 10_000  # children: a smaller listing cannot pass any sensible limit
REPLY_BYTES_PER_ITEM = 100  # a multiRead result's header and Stat, or a name's length prefix, with room


def _listing_bytes(listing: Listing) -> int:
    return sum(map(len, listing)) + 4 * len(listing)


def get_children2(tree: DataTree, watches: WatchManager, who: Asker, args: list[Any]) -> list[Any]:
    children = get_children(tree, watches, who, args)[0]
    return [children, tree.nodes[args[0]].stat()]


def get_acl(tree: DataTree, watches: WatchManager, who: Asker, args: list[Any]) -> list[Any]:
    (path,) = args
    node = _node(tree, path)
    admin = acls.check(node.acl, acls.ADMIN, who.auth_ids, who.superuser)
    if not admin:
        _require(node, acls.READ, who)
    entries = [list(entry) for entry in node.acl]
    if not admin:
        entries = [[p, s, f"{str(i).partition(':')[0]}:x" if s == "digest" else i] for p, s, i in entries]
    return [entries, node.stat()]


def get_ephemerals(tree: DataTree, watches: WatchManager, who: Asker, args: list[Any]) -> list[Any]:
    """The session's ephemerals whose path starts with ``prefix``, a string prefix, not a path:
    ZooKeeper neither validates it nor cuts it at a "/"; a blank one or "/" means all."""
    (prefix,) = args
    owned = tree.ephemerals.get(who.session_id, ())
    if prefix is not None and not isinstance(prefix, str):
        raise ZabbyError(Err.BADARGUMENTS, f"prefix must be a string, not {type(prefix).__name__}")
    if prefix is None or not prefix.strip() or prefix.strip(_JAVA_TRIMMED) == "/":
        return [sorted(owned)]
    return [sorted(p for p in owned if p.startswith(prefix))]


def get_all_children_number(tree: DataTree, watches: WatchManager, who: Asker, args: list[Any]) -> list[Any]:
    (path,) = args
    node = _node(tree, path)
    _require(node, acls.READ, who)
    return [tree.count_descendants(path)]


def add_watch(tree: DataTree, watches: WatchManager, who: Asker, args: list[Any]) -> list[Any]:
    path, mode = args
    _check_add_watch(tree, who, path, mode)
    watches.add_persistent(path, who, recursive=mode == AddWatchMode.PERSISTENT_RECURSIVE)
    return []


def _check_add_watch(tree: DataTree, who: Asker, path: Any, mode: Any) -> None:
    if mode not in (AddWatchMode.PERSISTENT, AddWatchMode.PERSISTENT_RECURSIVE):
        raise ZabbyError(Err.BADARGUMENTS, f"unknown addWatch mode {shown(mode)}")
    node = tree.nodes.get(_string(path))
    if node is not None:
        _require(node, acls.READ, who)


def resume_watch(tree: DataTree, watches: WatchManager, history: WatchHistory, who: Asker, args: list[Any]) -> list[Replayed]:
    """addWatch with ``since_zxid`` (zabby's extension): register the persistent watch and
    return the events it would have fired for the txns after ``since_zxid``, to be sent, in
    zxid order, right after the reply.  Both in one step of the server's loop, with no txn
    applied in between: the history ends where the live events begin.

    Raises:
        ZabbyError: BADARGUMENTS for a bad mode or a zxid that is no int or is ahead of this
            server; NOAUTH; HistoryCompacted when the history does not reach back that far.
    """
    path, mode, since_zxid = args
    _check_add_watch(tree, who, path, mode)
    if not isinstance(since_zxid, int) or isinstance(since_zxid, bool) or since_zxid < 0:
        raise ZabbyError(Err.BADARGUMENTS, f"since_zxid must be a zxid (an int of 0 or more), not {shown(since_zxid)}")
    if since_zxid > tree.last_zxid:
        raise ZabbyError(Err.BADARGUMENTS, f"since_zxid 0x{since_zxid:x} is ahead of this server, which has applied up to "
                         f"0x{tree.last_zxid:x}")  # fmt: skip
    recursive = mode == AddWatchMode.PERSISTENT_RECURSIVE
    replay = history.replay(who, path, recursive, since_zxid, who.reply_bytes_max)
    watches.add_persistent(path, who, recursive=recursive)
    return replay


def _watcher_type(value: Any) -> int:
    try:
        return WatcherType(value)
    except ValueError:
        raise ZabbyError(Err.BADARGUMENTS, f"unknown watcher type {shown(value)}") from None


def remove_watches(tree: DataTree, watches: WatchManager, who: Asker, args: list[Any]) -> list[Any]:
    return _watch_op(watches.remove, who, args)


def check_watches(tree: DataTree, watches: WatchManager, who: Asker, args: list[Any]) -> list[Any]:
    return _watch_op(watches.has, who, args)


def _watch_op(operation: Callable[[str, Asker, int], bool], who: Asker, args: list[Any]) -> list[Any]:
    """removeWatches / checkWatches: NOWATCHER when the session has no such watch."""
    path, watcher_type = args
    if not operation(_string(path), who, _watcher_type(watcher_type)):
        raise ZabbyError(Err.NOWATCHER, path)
    return []


def who_am_i(tree: DataTree, watches: WatchManager, who: Asker, args: list[Any]) -> list[Any]:
    return [[[scheme, ident] for scheme, ident in who.auth_ids]]


def multi_read(tree: DataTree, watches: WatchManager, who: Asker, args: list[Any]) -> list[Any]:
    (ops,) = args
    if not isinstance(ops, list):
        raise ZabbyError(Err.BADARGUMENTS, "multiRead takes a list of ops")
    results = []
    reply_bytes = 0
    for sub in ops:
        if not isinstance(sub, list) or len(sub) < 2 or sub[0] not in (OpCode.GET_DATA, OpCode.GET_CHILDREN):
            raise ZabbyError(Err.BADARGUMENTS, f"bad multiRead op {shown(sub)}")
        handler = get_data if sub[0] == OpCode.GET_DATA else get_children
        try:
            value = handler(tree, watches, who, [sub[1], bool(sub[2]) if len(sub) > 2 else False])
        except ZabbyError as exc:
            results.append([sub[0], int(exc.code), None])
            continue
        if sub[0] == OpCode.GET_DATA:
            results.append([sub[0], 0, value])
            reply_bytes += REPLY_BYTES_PER_ITEM + len(value[0] or b"")
        else:
            results.append([sub[0], 0, value[0]])
            reply_bytes += REPLY_BYTES_PER_ITEM + _listing_bytes(value[0])
        if reply_bytes > who.reply_bytes_max:
            raise ZabbyError(Err.BADARGUMENTS, f"this multiRead's reply passes the {who.reply_bytes_max}-byte limit "
                             f"(half of clientConnectionMemoryMax) at op {len(results)}: split it")  # fmt: skip
    return [results]


ReadHandler = Callable[[DataTree, WatchManager, Asker, list[Any]], list[Any]]

READ_HANDLERS: dict[int, ReadHandler] = {
    OpCode.EXISTS: exists,
    OpCode.GET_DATA: get_data,
    OpCode.GET_CHILDREN: get_children,
    OpCode.GET_CHILDREN2: get_children2,
    OpCode.GET_ACL: get_acl,
    OpCode.GET_EPHEMERALS: get_ephemerals,
    OpCode.GET_ALL_CHILDREN_NUMBER: get_all_children_number,
    OpCode.ADD_WATCH: add_watch,
    OpCode.REMOVE_WATCHES: remove_watches,
    OpCode.CHECK_WATCHES: check_watches,
    OpCode.WHO_AM_I: who_am_i,
    OpCode.MULTI_READ: multi_read,
}


def missed_events(tree: DataTree, who: Asker, relative_zxid: int, data: list[str], exist: list[str],
                  child: list[str]) -> tuple[list[tuple[int, str]], set[str], set[str]]:  # fmt: skip
    """setWatches: the events a reconnecting client missed since ``relative_zxid``, and the
    data and child watches those used up (they are not registered again).

    An event about a node the session may not READ is held back, its watch used up all the
    same, as ``WatchManager.trigger`` does: else a stale relative zxid would be an oracle of
    which protected nodes exist and changed.  A deletion reveals nothing a read of the path
    would not (there is no node left to protect)."""
    events: list[tuple[int, str]] = []
    fired_data: set[str] = set()
    fired_child: set[str] = set()

    def fire(event_type: int, path: str, node: Znode | None, fired: set[str]) -> None:
        fired.add(path)
        if node is None or acls.check(node.acl, acls.READ, who.auth_ids, who.superuser):
            events.append((event_type, path))

    for path in data:
        node = tree.nodes.get(path)
        if node is None:
            fire(EventType.NODE_DELETED, path, None, fired_data)
        elif node.mzxid > relative_zxid:
            fire(EventType.NODE_DATA_CHANGED, path, node, fired_data)
    for path in exist:
        node = tree.nodes.get(path)
        if node is not None:
            fire(EventType.NODE_CREATED, path, node, fired_data)
    for path in child:
        node = tree.nodes.get(path)
        if node is None:
            fire(EventType.NODE_DELETED, path, None, fired_child)
        elif node.pzxid > relative_zxid:
            fire(EventType.NODE_CHILDREN_CHANGED, path, node, fired_child)
    return events, fired_data, fired_child
