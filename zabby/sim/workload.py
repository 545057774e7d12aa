"""Simulated clients: writes (create, setData, delete, multi, ephemerals) and syncs.

Each client is a session attached to one server and has at most one request outstanding
(ZooKeeper sessions are FIFO).  A write to the leader is prepared and proposed there; a
write to a follower or observer is forwarded.  The client's server answers when it applies
the txn carrying the client's (session, cxid) — that is the acknowledgement the checkers
hold the cluster to.  A request whose server crashes or stops serving, or that times out,
has an unknown outcome and is simply forgotten (it may still commit: that is fine).

The key space is small on purpose, so requests collide: NODEEXISTS, BADVERSION, NOTEMPTY
and failed multis exercise prep's in-flight view and ERROR txns.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from zabby.core.messages import Request, Sync
from zabby.opcodes import CreateMode, OpCode
from zabby.sim.checkers import AckedWrite, Checker
from zabby.sim.cluster import Cluster, Node
from zabby.sim.options import SimOptions
from zabby.tree.txns import Txn

ACL = [[31, "world", "anyone"]]
KEYS = tuple(f"/k{i}" for i in range(6))


@dataclass(slots=True)
class Outstanding:
    cxid: int
    is_sync: bool
    issued_tick: int
    needed: int  # for a sync: the highest acked zxid when it was issued


@dataclass(slots=True)
class Client:
    session_id: int
    sid: int
    cxid: int = 0
    outstanding: Outstanding | None = None


class Workload:
    def __init__(self, rng: random.Random, options: SimOptions, cluster: Cluster, checker: Checker) -> None:
        self.rng = rng
        self.options = options
        self.cluster = cluster
        self.checker = checker
        sids = sorted(cluster.nodes)
        self.clients = [Client(0x100 + i, rng.choice(sids)) for i in range(options.client_count)]
        self.by_session = {c.session_id: c for c in self.clients}
        self.stats = {"writes": 0, "acked": 0, "failed": 0, "syncs": 0, "synced": 0, "timeouts": 0}
        cluster.on_applied = self.on_applied
        cluster.on_request_failed = self.on_request_failed
        cluster.on_sync_reply = self.on_sync_reply
        cluster.on_node_down = self.on_node_down

    def idle(self) -> bool:
        return all(c.outstanding is None for c in self.clients)

    def step(self, now: int, *, issue: bool) -> None:
        for client in self.clients:
            out = client.outstanding
            if out is not None and now - out.issued_tick > self.options.request_timeout_ticks:
                client.outstanding = None
                self.stats["timeouts"] += 1
                self._reattach(client)
            if client.outstanding is None and issue and self.rng.random() < self.options.request_probability:
                self._issue(client, now)

    def _reattach(self, client: Client) -> None:
        client.sid = self.rng.choice(sorted(self.cluster.nodes))

    def _issue(self, client: Client, now: int) -> None:
        node = self.cluster.nodes[client.sid]
        if not node.serving:
            if self.rng.random() < 0.2:
                self._reattach(client)
            return
        client.cxid += 1
        is_sync = self.rng.random() < self.options.sync_probability
        item: Request | Sync
        if is_sync:
            item = Sync(session_id=client.session_id, cxid=client.cxid)
            self.stats["syncs"] += 1
        else:
            op, args = self._op(client)
            item = Request(session_id=client.session_id, cxid=client.cxid, op=op, args=args)
            self.stats["writes"] += 1
        client.outstanding = Outstanding(client.cxid, is_sync, now, self.checker.acked_max)
        self.cluster.log(f"client 0x{client.session_id:x} -> server {node.sid}: {item}")
        if not self.cluster.submit(node, item):
            client.outstanding = None

    def _op(self, client: Client) -> tuple[int, tuple[Any, ...]]:
        rng = self.rng
        key = rng.choice(KEYS)
        data = rng.randbytes(rng.randint(0, 8))
        kind = rng.random()
        if kind < 0.25:
            return OpCode.CREATE, (key, data, ACL, int(CreateMode.PERSISTENT), None)
        if kind < 0.35:
            return OpCode.CREATE, (f"{key}/s-", data, ACL, int(CreateMode.PERSISTENT_SEQUENTIAL), None)
        if kind < 0.45:
            return OpCode.CREATE, (f"/e{client.session_id}-{rng.randint(0, 2)}", data, ACL, int(CreateMode.EPHEMERAL), None)
        if kind < 0.7:
            return OpCode.SET_DATA, (key, data, rng.choice((-1, -1, 0, 1, 2)))
        if kind < 0.8:
            return OpCode.DELETE, (key, -1)
        other = rng.choice(KEYS)
        ops = [
            [int(OpCode.CREATE), f"{key}/m", data, ACL, int(CreateMode.PERSISTENT), None],
            [int(OpCode.SET_DATA), other, data, -1],
            [int(OpCode.CHECK), other, rng.choice((-1, 0, 1))],
        ]
        return OpCode.MULTI, (ops,)

    # ----------------------------------------------------------------- answers
    def on_applied(self, node: Node, txn: Txn, result: Any) -> None:
        client = self.by_session.get(txn.session_id)
        if client is None or client.sid != node.sid:
            return
        out = client.outstanding
        if out is None or out.is_sync or out.cxid != txn.cxid:
            return
        client.outstanding = None
        self.stats["acked"] += 1
        self.cluster.log(f"client 0x{client.session_id:x} acked by server {node.sid}: cxid {txn.cxid} at 0x{txn.zxid:x}")
        self.checker.on_acked(AckedWrite(txn.zxid, txn.session_id, txn.cxid, node.sid, self.cluster.now))

    def on_request_failed(self, node: Node, request: Request) -> None:
        client = self.by_session.get(request.session_id)
        if client is not None and client.outstanding is not None and client.outstanding.cxid == request.cxid:
            client.outstanding = None
            self.stats["failed"] += 1

    def on_sync_reply(self, node: Node, sync: Sync) -> None:
        client = self.by_session.get(sync.session_id)
        if client is None or client.sid != node.sid:
            return
        out = client.outstanding
        if out is None or not out.is_sync or out.cxid != sync.cxid:
            return
        client.outstanding = None
        self.stats["synced"] += 1
        self.cluster.log(f"client 0x{client.session_id:x} synced by server {node.sid} at 0x{node.tree_zxid:x}")
        self.checker.on_sync_answered(node.sid, node.tree_zxid, out.needed)

    def on_node_down(self, node: Node) -> None:
        for client in self.clients:
            if client.sid == node.sid and client.outstanding is not None:
                client.outstanding = None
                self.stats["failed"] += 1
