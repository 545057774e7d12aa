"""ZooKeeper's serialized data tree (what a ``snapshot.*`` file holds after its header, and what
a SNAP sends), its tree digest and its session passwords; sans-I/O.

Grammar (jute, big-endian; ``SerializeUtils.serializeSnapshot``, ``DataTree.serialize``)::

    tree      := sessions acl_map node* end
    sessions  := count:int (id:long timeout:int)*
    acl_map   := count:int (id:long acls:vector<ACL>)*     (ReferenceCountedACLCache; id -1: OPEN_ACL_UNSAFE)
    node      := path:ustring data:buffer acl:long StatPersisted   ("" for the root, then depth-first:
                                                             every node after its parent)
    StatPersisted := czxid:long mzxid:long ctime:long mtime:long version:int cversion:int
                     aversion:int ephemeralOwner:long pzxid:long
    end       := "/":ustring

``cversion`` is stored as ZooKeeper stores it, a count of child creates (a Stat shows
2 * cversion - numChildren); zabby's records keep it the same way.  A node read here is a
list in the field order of zabby's snapshot records (``DataTree.records``): ``NODE_FIELDS``.

The digest (``DigestCalculator``, version 2, what ``mntr`` shows as ``zk_digest``): the sum,
modulo 2^64, over every znode but those under ``/zookeeper/``, of the CRC-32 of its path's
bytes ("" for the root), its data and its Stat as 60 bytes (czxid mzxid pzxid ctime mtime:long,
version cversion aversion:int, ephemeralOwner:long).  Sessions are not in it.

Theory of operation: a snapshot of a million znodes must be read faster than ZooKeeper
restarts from it, so ``NodeWalk`` takes a node in two ``struct`` calls: its data's length,
then one fixed block of 72 bytes that holds the ACL id, the Stat and the *next* node's path
length.  Lengths are checked only where a bad one could move the walk backwards; a length
that runs past the end shows as a ``struct.error`` at the next read.  The nodes are built by
``parse_nodes`` and the digest added up by ``nodes_digest``, each a walk of its own, so that
two processes can do both at once.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from zabby.errors import RemoteProtocolError
from zabby.tree.acl import OPEN_ACL_UNSAFE
from zabby.wire.jute import ACL, Reader, Writer
from zabby.wire.zk_txn import ENTRY_BYTES_MAX, AclTuple, acl_tuples

NODE_FIELDS = ("path", "data", "acl", "czxid", "mzxid", "pzxid", "ctime", "mtime", "version", "cversion", "aversion", "owner")
PATH, DATA, ACL_FIELD, CZXID, MZXID, PZXID, CTIME, MTIME, VERSION, CVERSION, AVERSION, OWNER = range(len(NODE_FIELDS))
OPEN_ACL_ID = -1  # ReferenceCountedACLCache.OPEN_UNSAFE_ACL_ID
SYSTEM_SUBTREE = "/zookeeper/"  # ZooDefs.ZOOKEEPER_NODE_SUBTREE: left out of the digest
DIGEST_MASK = (1 << 64) - 1
_SUPER_SECRET = 0xB3415C00  # ZooKeeperServer.superSecret
_RANDOM_MULTIPLIER, _RANDOM_MASK = 0x5DEECE66D, (1 << 48) - 1  # java.util.Random

_INT = struct.Struct(">i")
_SESSION = struct.Struct(">qi")
_NODE_TAIL = struct.Struct(">qqqqqiiiqqi")  # acl czxid mzxid ctime mtime version cversion aversion owner pzxid, next path length
_DIGEST_STAT = struct.Struct(">qqqqqiiiq")  # czxid mzxid pzxid ctime mtime version cversion aversion owner
_NODE_FIXED = struct.Struct(">qqqqqiiiqq")  # acl id, then StatPersisted: czxid mzxid ctime mtime version cversion aversion owner pzxid
_END = b"\x00\x00\x00\x01/"
CHUNK_BYTES = 2**20
_crc32 = zlib.crc32


class ZkTreeError(ValueError):
    """A serialized tree that ZooKeeper could not have written; ``offset`` is where it fails."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"{reason} at offset {offset}")
        self.offset = offset
        self.reason = reason


def session_password(session_id: int) -> bytes:
    """The password ZooKeeper gives session ``session_id`` (``ZooKeeperServer.generatePasswd``:
    16 bytes of ``java.util.Random(id ^ superSecret).nextBytes``), which a client re-attaching
    to the session must present."""
    seed = (session_id ^ _SUPER_SECRET ^ _RANDOM_MULTIPLIER) & _RANDOM_MASK
    words = []
    for _ in range(4):  # nextBytes: one nextInt() per 4 bytes, least significant byte first
        seed = (seed * _RANDOM_MULTIPLIER + 0xB) & _RANDOM_MASK
        words.append((seed >> 16) & 0xFFFFFFFF)
    return struct.pack("<4I", *words)


def counts_in_digest(path: str) -> bool:
    return not path.startswith(SYSTEM_SUBTREE)


def node_digest(node: list[Any] | tuple[Any, ...]) -> int:
    """One znode's part of the tree digest (0 under ``/zookeeper/``)."""
    path = node[PATH]
    if path.startswith(SYSTEM_SUBTREE):
        return 0
    stat = _DIGEST_STAT.pack(node[CZXID], node[MZXID], node[PZXID], node[CTIME], node[MTIME], node[VERSION],
                             node[CVERSION], node[AVERSION], node[OWNER])  # fmt: skip
    return _crc32(stat, _crc32(node[DATA] or b"", _crc32(b"" if path == "/" else path.encode())))


def tree_digest(nodes: Iterable[list[Any] | tuple[Any, ...]]) -> int:
    return sum(map(node_digest, nodes)) & DIGEST_MASK


# ----------------------------------------------------------------------------- reading
def parse_sessions(buf: bytes, pos: int) -> tuple[dict[int, int], int]:
    """The session table: ``({id: timeout_ms}, the offset after it)``."""
    count = _int_at(buf, pos, "session count")
    pos += 4
    if count < 0 or pos + count * _SESSION.size > len(buf):
        raise ZkTreeError(pos - 4, f"a session count of {count}")
    end = pos + count * _SESSION.size
    return dict(_SESSION.iter_unpack(buf[pos:end])), end


def parse_acl_map(buf: bytes, pos: int) -> tuple[dict[int, AclTuple], int]:
    """The ACL cache: ``({id: acl}, the offset after it)``, id -1 included."""
    reader = Reader(buf, pos, ENTRY_BYTES_MAX)
    acls: dict[int, AclTuple] = {OPEN_ACL_ID: OPEN_ACL_UNSAFE}
    try:
        for _ in range(reader.int()):
            acl_id = reader.long()
            entries = reader.vector(ACL.read)
            if entries is None:
                raise ZkTreeError(reader.pos, f"ACL {acl_id} has no list")
            acls[acl_id] = acl_tuples(entries)
    except RemoteProtocolError as exc:
        raise ZkTreeError(reader.pos, f"ACL map: {exc}") from None
    return acls, reader.pos


def _int_at(buf: bytes, pos: int, what: str) -> int:
    try:
        return int(_INT.unpack_from(buf, pos)[0])
    except struct.error:
        raise ZkTreeError(pos, f"truncated before the {what}") from None


class NodeWalk:
    """The serialized nodes from ``pos`` (the root's path length) to the end marker, each as
    ``(offset, path bytes, data, fields)``, fields being (acl id, czxid, mzxid, ctime, mtime,
    version, cversion, aversion, ephemeralOwner, pzxid, the next node's path length); ``end``
    is the offset after the end marker once the walk is over.

    Raises (while iterating):
        ZkTreeError: a truncated tree, or a length that would move the walk backwards.
    """

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf, self.pos, self.end = buf, pos, -1

    def __iter__(self) -> Iterator[tuple[int, bytes, bytes | None, tuple[int, ...]]]:
        buf, pos = self.buf, self.pos
        plen = _int_at(buf, pos, "root")
        if plen != 0:
            raise ZkTreeError(pos, f"the first node is not the root (a path of {plen} bytes)")
        unpack_int, unpack_tail, tail_size = _INT.unpack_from, _NODE_TAIL.unpack_from, _NODE_TAIL.size
        pos, start = pos + 4, pos
        try:
            while True:
                start = pos - 4
                end_path = pos + plen
                raw_path = buf[pos:end_path]
                if plen == 1 and raw_path == b"/":
                    self.end = end_path
                    return
                dlen = unpack_int(buf, end_path)[0]
                if dlen < 0:
                    if dlen != -1:
                        raise ZkTreeError(end_path, f"a data length of {dlen}")
                    data, tail = None, end_path + 4
                else:
                    data, tail = buf[end_path + 4 : end_path + 4 + dlen], end_path + 4 + dlen
                fields = unpack_tail(buf, tail)
                plen, pos = fields[10], tail + tail_size
                if plen <= 0:
                    raise ZkTreeError(pos - 4, f"a path length of {plen}")
                yield start, raw_path, data, fields
        except struct.error:
            raise ZkTreeError(start, "truncated in a node (or a length runs past the end)") from None


def parse_nodes(buf: bytes, pos: int, acls: dict[int, AclTuple]) -> tuple[dict[str, list[Any]], list[str], int]:
    """Every znode, root first: ``({path: node}, the paths of those with an ephemeralOwner
    (sessions' ephemerals, containers, TTL nodes), the offset after the end marker)``.

    Raises:
        ZkTreeError: see ``NodeWalk``; a path that is not UTF-8, a node before its parent,
            an ACL id the map lacks.
    """
    nodes: dict[str, list[Any]] = {}
    owned: list[str] = []
    walk, start = NodeWalk(buf, pos), pos
    try:
        for start, raw_path, data, (acl_id, czxid, mzxid, ctime, mtime, version, cversion, aversion, owner, pzxid, _) in walk:
            path = raw_path.decode() or "/"
            if nodes and (path[: path.rfind("/")] or "/") not in nodes:
                raise ZkTreeError(start, f"{path} comes before its parent")
            nodes[path] = [path, data, acls[acl_id], czxid, mzxid, pzxid, ctime, mtime, version, cversion, aversion, owner]
            if owner:
                owned.append(path)
    except UnicodeDecodeError:
        raise ZkTreeError(start, "a path that is not UTF-8") from None
    except KeyError as exc:
        raise ZkTreeError(start, f"ACL id {exc.args[0]} is not in the ACL map") from None
    return nodes, owned, walk.end


def nodes_digest(buf: bytes, pos: int) -> int:
    """The tree digest of the serialized nodes from ``pos``, from their bytes alone: what a
    process beside the one that builds the nodes adds up (``node_digest`` of each node)."""
    pack_stat, crc32, system = _DIGEST_STAT.pack, _crc32, SYSTEM_SUBTREE.encode()
    total = 0
    for _, raw_path, data, (_, czxid, mzxid, ctime, mtime, version, cversion, aversion, owner, pzxid, _) in NodeWalk(buf, pos):
        if not raw_path.startswith(system):
            total += crc32(pack_stat(czxid, mzxid, pzxid, ctime, mtime, version, cversion, aversion, owner), crc32(data or b"", crc32(raw_path)))
    return total & DIGEST_MASK


# ----------------------------------------------------------------------------- writing
def acl_ids(records: Iterable[tuple[Any, ...]]) -> dict[AclTuple, int]:
    """An id for each distinct ACL of ``records`` (1, 2, ... as ZooKeeper numbers them)."""
    ids: dict[AclTuple, int] = {}
    for record in records:
        acl = record[ACL_FIELD]
        if acl not in ids:
            ids[acl] = len(ids) + 1
    return ids


def _acl_map_bytes(ids: dict[AclTuple, int]) -> bytes:
    writer = Writer()
    writer.int(len(ids))
    for acl, acl_id in ids.items():
        writer.long(acl_id)
        writer.int(len(acl))
        for perms, scheme, ident in acl:
            writer.int(perms)
            writer.ustring(scheme)
            writer.ustring(ident)
    return writer.getvalue()


def serialize_tree(sessions: dict[int, int], records: list[tuple[Any, ...]]) -> Iterator[bytes]:
    """The serialized tree of ``records`` (zabby's snapshot records, parent first, root
    first) and ``sessions`` ({id: timeout_ms}), in chunks of about ``CHUNK_BYTES``."""
    if not records or records[0][PATH] != "/":
        raise ValueError("a tree's records start with the root")
    ids = acl_ids(records)
    head = bytearray(_INT.pack(len(sessions)))
    for session_id, timeout_ms in sessions.items():
        head += _SESSION.pack(session_id, timeout_ms)
    head += _acl_map_bytes(ids)
    yield bytes(head)
    parts: list[bytes] = []
    size, pack_int, pack_fixed = 0, _INT.pack, _NODE_FIXED.pack
    for path, data, acl, czxid, mzxid, pzxid, ctime, mtime, version, cversion, aversion, owner in records:
        raw_path = b"" if path == "/" else path.encode()
        parts += (pack_int(len(raw_path)), raw_path, pack_int(-1) if data is None else pack_int(len(data)), data or b"",
                  pack_fixed(ids[acl], czxid, mzxid, ctime, mtime, version, cversion, aversion, owner, pzxid))  # fmt: skip
        size += 100 + len(raw_path) + len(data or b"")
        if size >= CHUNK_BYTES:
            yield b"".join(parts)
            parts, size = [], 0
    parts.append(_END)
    yield b"".join(parts)


def snap_stream(records: Iterable[tuple[Any, ...]], signature: str) -> Iterator[bytes]:
    """What a leader writes after a SNAP packet for zabby's snapshot records (its tree's
    ``records()``: the header, the sessions, the znodes): the serialized tree, then
    ``signature``, in chunks of about ``CHUNK_BYTES``."""
    records = iter(records)
    _, _, session_count, _ = next(records)
    sessions = {}
    for _ in range(session_count):
        _, session_id, timeout_ms, _ = next(records)
        sessions[session_id] = timeout_ms
    yield from serialize_tree(sessions, list(records))
    writer = Writer()
    writer.ustring(signature)
    yield writer.getvalue()



# ----------------------------------------------------------------------------- a tree as it arrives
class TreeStream:
    """A serialized tree read as it arrives (a SNAP's, on a quorum link), then, if
    ``signature`` is given, the ustring that must follow it.  ``feed`` returns None until
    all of it is in, then the bytes that came after it.  The session table, the nodes (as
    ``parse_nodes`` makes them) and the owned paths are built meanwhile, a whole item at a
    time: O(bytes read).

    Raises (from ``feed``):
        ZkTreeError: what ``parse_nodes`` refuses, a wrong signature, or more than
            ``bytes_max`` bytes before the end.
    """

    def __init__(self, bytes_max: int, signature: str | None = None) -> None:
        self.bytes_max = bytes_max
        self.signature = signature
        self.sessions: dict[int, int] = {}
        self.acls: dict[int, AclTuple] = {OPEN_ACL_ID: OPEN_ACL_UNSAFE}
        self.nodes: dict[str, list[Any]] = {}
        self.owned: list[str] = []
        self._buffer = bytearray()
        self._pos = 0
        self._offset = 0  # of the buffer's start in the stream
        self._step: Callable[[], bool] | None = self._session_count  # None once all is in
        self._left = 0

    def feed(self, data: bytes | bytearray) -> bytes | None:
        if self._pos > CHUNK_BYTES:
            del self._buffer[: self._pos]
            self._offset += self._pos
            self._pos = 0
        self._buffer += data
        if self._step is None:
            return bytes(data)
        if self._offset + len(self._buffer) > self.bytes_max:
            raise ZkTreeError(self._offset + self._pos, f"a tree of more than {self.bytes_max} bytes")
        while self._step is not None:
            if not self._step():
                return None
        rest = bytes(self._buffer[self._pos :])
        self._buffer = bytearray()
        return rest

    def _int(self) -> int | None:
        if len(self._buffer) - self._pos < 4:
            return None
        return int(_INT.unpack_from(self._buffer, self._pos)[0])

    def _session_count(self) -> bool:
        count = self._int()
        if count is None:
            return False
        if count < 0:
            raise ZkTreeError(self._offset + self._pos, f"a session count of {count}")
        self._pos += 4
        self._left, self._step = count, self._session
        return True

    def _session(self) -> bool:
        if not self._left:
            self._step = self._acl_count
            return True
        if len(self._buffer) - self._pos < _SESSION.size:
            return False
        session_id, timeout_ms = _SESSION.unpack_from(self._buffer, self._pos)
        self.sessions[session_id] = timeout_ms
        self._pos += _SESSION.size
        self._left -= 1
        return True

    def _acl_count(self) -> bool:
        count = self._int()
        if count is None:
            return False
        if count < 0:
            raise ZkTreeError(self._offset + self._pos, f"an ACL map of {count} entries")
        self._pos += 4
        self._left, self._step = count, self._acl_entry
        return True

    def _acl_entry(self) -> bool:
        if not self._left:
            self._step = self._node
            return True
        end = self._acl_entry_end()
        if end is None:
            return False
        acls, _ = parse_acl_map(b"\x00\x00\x00\x01" + bytes(self._buffer[self._pos : end]), 0)
        self.acls.update(acls)
        self._pos = end
        self._left -= 1
        return True

    def _acl_entry_end(self) -> int | None:
        buf, pos = self._buffer, self._pos + 8  # the ACL id
        if len(buf) - pos < 4:
            return None
        (count,) = _INT.unpack_from(buf, pos)
        pos += 4
        for _ in range(max(count, 0)):
            pos += 4  # perms
            for _ in range(2):  # scheme, id
                if len(buf) - pos < 4:
                    return None
                (size,) = _INT.unpack_from(buf, pos)
                pos += 4 + max(size, 0)
        return pos if pos <= len(buf) else None

    def _node(self) -> bool:
        buf, pos = self._buffer, self._pos
        size = len(buf) - pos
        if size < 4:
            return False
        (plen,) = _INT.unpack_from(buf, pos)
        if plen < 0 or plen > self.bytes_max:
            raise ZkTreeError(self._offset + pos, f"a path length of {plen}")
        if size < 8 + plen:
            return False
        raw_path = bytes(buf[pos + 4 : pos + 4 + plen])
        if raw_path == b"/":
            self._pos, self._step = pos + 4 + plen, self._signature if self.signature is not None else None
            return True
        (dlen,) = _INT.unpack_from(buf, pos + 4 + plen)
        if dlen < -1:
            raise ZkTreeError(self._offset + pos, f"a data length of {dlen}")
        tail = pos + 8 + plen + max(dlen, 0)
        if len(buf) < tail + _NODE_FIXED.size:
            return False
        self._add_node(raw_path, None if dlen < 0 else bytes(buf[pos + 8 + plen : tail]), _NODE_FIXED.unpack_from(buf, tail))
        self._pos = tail + _NODE_FIXED.size
        return True

    def _add_node(self, raw_path: bytes, data: bytes | None, fields: tuple[int, ...]) -> None:
        where = self._offset + self._pos
        try:
            path = raw_path.decode() or "/"
        except UnicodeDecodeError:
            raise ZkTreeError(where, "a path that is not UTF-8") from None
        if not self.nodes and path != "/":
            raise ZkTreeError(where, f"the first node is {path}, not the root")
        if self.nodes and (path[: path.rfind("/")] or "/") not in self.nodes:
            raise ZkTreeError(where, f"{path} comes before its parent")
        acl_id, czxid, mzxid, ctime, mtime, version, cversion, aversion, owner, pzxid = fields
        acl = self.acls.get(acl_id)
        if acl is None:
            raise ZkTreeError(where, f"ACL id {acl_id} is not in the ACL map")
        self.nodes[path] = [path, data, acl, czxid, mzxid, pzxid, ctime, mtime, version, cversion, aversion, owner]
        if owner:
            self.owned.append(path)

    def _signature(self) -> bool:
        assert self.signature is not None
        length = self._int()
        if length is None:
            return False
        if length < 0 or length > 1024:
            raise ZkTreeError(self._offset + self._pos, f"a signature of {length} bytes")
        if len(self._buffer) - self._pos < 4 + length:
            return False
        signature = bytes(self._buffer[self._pos + 4 : self._pos + 4 + length])
        if signature != self.signature.encode():
            raise ZkTreeError(self._offset + self._pos, f"the signature {signature!r}, not {self.signature!r}")
        self._pos += 4 + length
        self._step = None
        return True
