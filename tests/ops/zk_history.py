"""ZooKeeper data directories made without ZooKeeper, for the import's unit tests: a seeded
history of valid txns (as ZooKeeper's PrepRequestProcessor would make them), the tree after
each txn, *fuzzy* snapshots of it (written while txns go on, as ZooKeeper writes them) and
txn log files in ZooKeeper's format.

A fuzzy snapshot is made the way ``DataTree.serializeNode`` makes one: a depth-first walk that
copies each node (with its list of children) at the moment it reaches it, while time moves on:
each step of the walk may see a few more txns applied.  The digest written after the tree is
the one at the walk's end, the session table the one at its start.
"""

from __future__ import annotations

import random
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zabby.opcodes import CONTAINER_OWNER, OpCode, ttl_owner
from zabby.tree.zk_replay import parent_path
from zabby.storage import zk_files
from zabby.tree.datatree import DataTree
from zabby.tree.txns import Txn
from zabby.wire.zk_snapshot import session_password, tree_digest
from zabby.wire.zk_txn import DIGEST_VERSION, ZkTxn, encode_entry

OPEN = ((31, "world", "anyone"),)
READ_ONLY = ((1, "world", "anyone"),)
NAMES = ("a", "b", "c", "d")
TIME_MS = 1_700_000_000_000


def fresh_nodes() -> dict[str, list[Any]]:
    """A new ZooKeeper tree's nodes (root, /zookeeper, its quota and config nodes)."""
    return {record[0]: list(record) for record in list(DataTree().records())[1:]}


@dataclass
class State:
    nodes: dict[str, list[Any]]
    sessions: dict[int, int]
    digest: int


@dataclass
class History:
    """``txns[i]`` has zxid ``i + 1``; ``states[z]`` is the tree after txn ``z`` (0: empty).

    The trees come from zabby's own ``DataTree`` applying the same txns (translated), not
    from the replay under test: an oracle of its own, which the differential harness checks
    against ZooKeeper."""

    seed: int
    txns: list[ZkTxn] = field(default_factory=list)
    states: list[State] = field(default_factory=list)

    @classmethod
    def make(cls, seed: int, count: int, epoch: int = 0) -> History:
        history = cls(seed)
        maker = _Maker(random.Random(seed), epoch)
        history.states.append(maker.state())
        for _ in range(count):
            txn = maker.next_txn()
            history.txns.append(txn)
            history.states.append(maker.state())
        return history

    def zxid(self, index: int) -> int:
        return self.txns[index - 1].zxid if index else 0


def zabby_body(session_id: int, txn_type: int, body: tuple[Any, ...]) -> tuple[Any, ...]:
    """A ZooKeeper txn's body as zabby's txn of the same type carries it (``zabby.tree.txns``)."""
    if txn_type in (OpCode.CREATE, OpCode.CREATE2):
        path, data, acl, ephemeral, parent_cversion = body
        return (path, data, acl, session_id if ephemeral else 0, parent_cversion)
    if txn_type == OpCode.CREATE_TTL:
        path, data, acl, parent_cversion, ttl_ms = body
        return (path, data, acl, ttl_owner(ttl_ms), parent_cversion)
    if txn_type == OpCode.CREATE_CONTAINER:
        path, data, acl, parent_cversion = body
        return (path, data, acl, CONTAINER_OWNER, parent_cversion)
    if txn_type == OpCode.MULTI:
        if any(op_type == OpCode.ERROR for op_type, _ in body[0]):  # a failed multi: zabby logs every op as an error
            return (tuple((OpCode.ERROR, op_body if op_type == OpCode.ERROR else (0,)) for op_type, op_body in body[0]),)
        return (tuple((op_type, zabby_body(session_id, op_type, op_body)) for op_type, op_body in body[0]),)
    if txn_type == OpCode.CREATE_SESSION:
        return (body[0], session_password(session_id))
    return body


class _Maker:
    def __init__(self, rng: random.Random, epoch: int) -> None:
        self.rng = rng
        self.tree = DataTree()
        self.epoch = epoch
        self.counter = 0
        self.next_session = 0x1000000

    def state(self) -> State:
        nodes = {record[0]: list(record) for record in list(self.tree.records())[1 + len(self.tree.sessions) :]}
        sessions = {sid: timeout for sid, (timeout, _) in self.tree.sessions.items()}
        return State(nodes, sessions, tree_digest(nodes.values()))

    def _txn(self, session_id: int, txn_type: int, body: tuple[Any, ...] | None) -> ZkTxn:
        self.counter += 1
        zxid = (self.epoch << 32) | self.counter
        return ZkTxn(session_id, self.counter, zxid, TIME_MS + self.counter, txn_type, body)

    def next_txn(self) -> ZkTxn:
        kinds = ["create"] * 8 + ["delete"] * 3 + ["set"] * 2 + ["acl", "multi", "multi", "session", "close", "error"]
        kind = self.rng.choice(kinds)
        txn = getattr(self, f"_{kind}")() or self._session()
        if txn.body is None:  # a closeSession without paths: zabby's lists the session's ephemerals
            body: tuple[Any, ...] = (tuple(sorted(self.tree.ephemerals.get(txn.session_id, ()))),)
        else:
            body = zabby_body(txn.session_id, txn.type, txn.body)
        self.tree.apply(Txn(txn.zxid, txn.session_id, txn.cxid, txn.time_ms, txn.type, body))
        if txn.body is None:
            return txn  # ZooKeeper 3.5 and older, which wrote no paths, wrote no digest either
        return txn._replace(digest=(DIGEST_VERSION, self.state().digest))

    # ----------------------------------------------------------------- candidates
    @staticmethod
    def _user_paths(tree: DataTree) -> list[str]:
        return sorted(p for p in tree.nodes if not p.startswith("/zookeeper"))

    def _owner(self) -> int:
        sessions = sorted(self.tree.sessions)
        return self.rng.choice(sessions) if sessions and self.rng.random() < 0.4 else 0

    def _create_body(self, tree: DataTree, session_id: int) -> tuple[int, tuple[Any, ...]] | None:
        parents = [p for p in self._user_paths(tree) if tree.nodes[p].ephemeral_owner <= 0]
        parent = self.rng.choice(parents)
        cversion = tree.nodes[parent].cversion + 1
        name = f"s{cversion - 1:010d}" if self.rng.random() < 0.3 else self.rng.choice(NAMES)
        path = f"{parent.rstrip('/')}/{name}"
        if path in tree.nodes or path.count("/") > 4:
            return None
        data = self.rng.choice((b"", b"x", None, bytes(self.rng.randrange(256) for _ in range(5))))
        acl = self.rng.choice((OPEN, OPEN, READ_ONLY))
        kind = self.rng.choice((OpCode.CREATE, OpCode.CREATE2, OpCode.CREATE_TTL, OpCode.CREATE_CONTAINER))
        if kind == OpCode.CREATE_TTL:
            return kind, (path, data, acl, cversion, self.rng.choice((1000, 60_000)))
        if kind == OpCode.CREATE_CONTAINER:
            return kind, (path, data, acl, cversion)
        return kind, (path, data, acl, session_id != 0, cversion)

    def _create(self) -> ZkTxn | None:
        owner = self._owner()
        made = self._create_body(self.tree, owner)
        return None if made is None else self._txn(owner or 0x77, made[0], made[1])

    def _leaf(self, tree: DataTree) -> str | None:
        leaves = [p for p in self._user_paths(tree) if p != "/" and not tree.nodes[p].children]
        return self.rng.choice(leaves) if leaves else None

    def _delete(self) -> ZkTxn | None:
        leaf = self._leaf(self.tree)
        return None if leaf is None else self._txn(0x77, OpCode.DELETE, (leaf,))

    def _set(self) -> ZkTxn:
        path = self.rng.choice(self._user_paths(self.tree))
        data = self.rng.choice((b"v", None, b"", b"longer data"))
        return self._txn(0x77, OpCode.SET_DATA, (path, data, self.tree.nodes[path].version + 1))

    def _acl(self) -> ZkTxn:
        path = self.rng.choice(self._user_paths(self.tree))
        return self._txn(0x77, OpCode.SET_ACL, (path, self.rng.choice((OPEN, READ_ONLY)), self.tree.nodes[path].aversion + 1))

    def _multi(self) -> ZkTxn:
        ops = self._multi_ops()
        if self.rng.random() < 0.25:  # failed at its last op: ZooKeeper logs the ops before it as they were
            ops[-1] = (OpCode.ERROR, (-101,))
            ops.append((OpCode.ERROR, (-2,)))
        return self._txn(0x77, OpCode.MULTI, (tuple(ops),))

    def _multi_ops(self) -> list[tuple[int, tuple[Any, ...]]]:
        scratch = DataTree.from_records(self.tree.records())
        ops: list[tuple[int, tuple[Any, ...]]] = []
        for _ in range(self.rng.randrange(1, 4)):
            choice = self.rng.random()
            if choice < 0.5:
                op = self._create_body(scratch, 0)
            elif choice < 0.75:
                leaf = self._leaf(scratch)
                op = None if leaf is None else (OpCode.DELETE, (leaf,))
            else:
                path = self.rng.choice(self._user_paths(scratch))
                op = (OpCode.SET_DATA, (path, b"m", scratch.nodes[path].version + 1))
            if op is not None:
                scratch.apply(Txn(scratch.last_zxid + 1, 0x77, 0, TIME_MS, op[0], zabby_body(0x77, op[0], op[1])))
                ops.append(op)
        ops.append((OpCode.CHECK, ("/", 0)))
        return ops

    def _session(self) -> ZkTxn:
        self.next_session += 1
        return self._txn(self.next_session, OpCode.CREATE_SESSION, (self.rng.choice((4000, 30000)),))

    def _close(self) -> ZkTxn | None:
        if not self.tree.sessions:
            return None
        session_id = self.rng.choice(sorted(self.tree.sessions))
        if self.rng.random() < 0.4:  # as ZooKeeper 3.5 and older log it: no paths
            return self._txn(session_id, OpCode.CLOSE_SESSION, None)
        return self._txn(session_id, OpCode.CLOSE_SESSION, (tuple(sorted(self.tree.ephemerals.get(session_id, ()))),))

    def _error(self) -> ZkTxn:
        return self._txn(0x77, OpCode.ERROR, (-101,))


# ----------------------------------------------------------------------------- files
def fuzzy_walk(history: History, start: int, rng: random.Random, steps_max: int = 3) -> tuple[list[tuple[Any, ...]], int]:
    """A snapshot's nodes as a walk that began after txn ``start`` makes them, each step
    seeing up to ``steps_max`` more txns applied; and the txn index at its end."""
    time = start
    records: list[tuple[Any, ...]] = []

    def walk(path: str) -> None:
        nonlocal time
        nodes = history.states[time].nodes
        node = nodes.get(path)
        if node is None:
            return  # deleted before the walk reached it
        records.append(tuple(node))
        children = sorted(p for p in nodes if p != "/" and parent_path(p) == path)
        for child in children:
            time = min(len(history.txns), time + rng.randrange(steps_max + 1))
            walk(child)

    walk("/")
    return records, time


def write_snapshot(snap_dir: Path, history: History, start: int, rng: random.Random | None = None) -> Path:
    """A snapshot named after txn ``start`` (fuzzy if ``rng`` is given)."""
    if rng is None:
        records, end = [tuple(node) for node in history.states[start].nodes.values()], start
    else:
        records, end = fuzzy_walk(history, start, rng)
    digest = (history.zxid(end), history.states[end].digest) if end else (0, 0)  # ZooKeeper's empty ZxidDigest
    snap_dir.mkdir(parents=True, exist_ok=True)
    return zk_files.write_snapshot(snap_dir, history.zxid(start), history.states[start].sessions, records, digest)


def log_record(txn: ZkTxn) -> bytes:
    entry = encode_entry(txn)
    return struct.pack(">qi", zlib.adler32(entry), len(entry)) + entry + b"B"


def write_log(log_dir: Path, txns: list[ZkTxn], *, padding: int = 64, tail: bytes = b"") -> Path:
    """A ``log.<first zxid>`` file of ``txns``, then ``tail`` (a torn record's bytes), then zeros."""
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / f"log.{txns[0].zxid:x}"
    body = b"".join(map(log_record, txns))
    path.write_bytes(struct.pack(">4siq", b"ZKLG", 2, 0) + body + tail + bytes(padding))
    return path


def expected_records(state: State) -> dict[str, tuple[Any, ...]]:
    return {path: tuple(node) for path, node in state.nodes.items()}
