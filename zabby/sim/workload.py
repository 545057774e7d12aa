"""Simulated clients: sessions, writes (create, setData, delete, multi, ephemeral, container and
TTL nodes) and syncs,
through the engine's own client interface, as a connection of the server uses it.

Each client holds a session: it creates one through a server (a CREATE_SESSION txn), keeps
it alive by touching it (every request, and a ping when idle), re-attaches to another server
when its own stops serving or does not answer, and starts a new session when the old one has
expired.  It has at most one request outstanding (ZooKeeper sessions are FIFO).  A server
answers a write when it applies the txn carrying the client's (session, cxid) — that is the
acknowledgement the checkers hold the cluster to.  A request whose server crashes or stops
serving, or that times out, has an unknown outcome and is forgotten (it may still commit).

The key space is small on purpose, so requests collide: NODEEXISTS, BADVERSION, NOTEMPTY
and failed multis exercise prep's in-flight view and ERROR txns.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from zabby.engine import ClientsKept
from zabby.errors import Err, ZabbyError
from zabby.opcodes import CreateMode, OpCode
from zabby.sim.checkers import AckedWrite, Checker
from zabby.sim.cluster import SUPER_DIGEST, TICK_MS, Cluster, Node, sim_member
from zabby.sim.options import SimOptions
from zabby.tree.prep import Caller
from zabby.tree.txns import Txn

ACL = [[31, "world", "anyone"]]
KEYS = tuple(f"/k{i}" for i in range(6))
PING_TICKS = 10
CLOSE_SESSION_PROBABILITY = 0.01  # of a client's operations


@dataclass(slots=True)
class Outstanding:
    cxid: int
    kind: str  # "write", "sync", "close" or "connect"
    issued_tick: int
    needed: int  # for a sync: the highest acked zxid when it was issued


class Client:
    """One session's client; also the sink the engine sends its events to."""

    def __init__(self, workload: Workload, index: int, sid: int, timeout_ms: int) -> None:
        self.workload = workload
        self.index = index
        self.sid = sid
        self.timeout_ms = timeout_ms
        self.session_id = 0
        self.password = b""
        self.attached = False
        self.held = False  # idle when its server stopped serving: kept through the election (see ``kept``)
        self.cxid = 0
        self.outstanding: Outstanding | None = None
        self.last_touch = 0
        self.events = 0

    def send_events(self, zxid: int, events: list[tuple[int, str]]) -> None:
        self.events += len(events)

    def close_after_flush(self) -> None:
        self.workload.disconnect(self, "closed by the server")


class Workload:
    def __init__(self, rng: random.Random, options: SimOptions, cluster: Cluster, checker: Checker) -> None:
        self.rng = rng
        self.options = options
        self.cluster = cluster
        self.checker = checker
        sids = sorted(cluster.nodes)
        timeouts = (20 * TICK_MS, 80 * TICK_MS, 200 * TICK_MS)
        self.clients = [Client(self, i, rng.choice(sids), rng.choice(timeouts)) for i in range(options.client_count)]
        self.stats = {"writes": 0, "reconfigs": 0, "acked": 0, "failed": 0, "syncs": 0, "synced": 0, "timeouts": 0,
                      "sessions": 0, "expired": 0, "closed": 0}  # fmt: skip
        cluster.on_clients_closed = self.on_clients_closed
        cluster.on_node_down = lambda node: self.on_clients_closed(node, ClientsKept.NONE)

    def idle(self) -> bool:
        return all(c.outstanding is None or c.outstanding.kind == "connect" for c in self.clients)

    def step(self, now: int, *, issue: bool) -> None:
        for client in self.clients:
            out = client.outstanding
            if out is not None and now - out.issued_tick > self.options.request_timeout_ticks:
                self.stats["timeouts"] += 1
                self.disconnect(client, "no answer")
                client.sid = self.rng.choice(sorted(self.cluster.nodes))
            if not client.attached:
                if client.outstanding is None:
                    self._connect(client, now)
            elif client.outstanding is None and issue and self.rng.random() < self.options.request_probability:
                self._issue(client, now)
            elif now - client.last_touch >= PING_TICKS:
                self._node(client).engine.touch(client.session_id)
                client.last_touch = now

    def _node(self, client: Client) -> Node:
        return self.cluster.nodes[client.sid]

    # ----------------------------------------------------------------- sessions
    def _connect(self, client: Client, now: int) -> None:
        node = self._node(client)
        if not node.serving:
            if self.rng.random() < 0.2:
                client.sid = self.rng.choice(sorted(self.cluster.nodes))
            return
        engine = node.engine
        if client.session_id:
            if engine.check_session(client.session_id, client.password) is not None:
                self._attach(client, node, now)
                return
            self.stats["expired"] += 1
            self.cluster.log(f"client {client.index}: session 0x{client.session_id:x} has expired")
            client.session_id = 0
        client.outstanding = Outstanding(0, "connect", now, 0)
        try:
            engine.create_session(client.timeout_ms, lambda txn, result: self._created(client, node, txn))
        except ZabbyError as exc:
            client.outstanding = None
            if exc.code == Err.NOTREADONLY:  # refused (no member yet): a client tries another server
                client.sid = self.rng.choice(sorted(self.cluster.nodes))
            return
        self.cluster.drain(node)

    def _created(self, client: Client, node: Node, txn: Txn) -> None:
        out = client.outstanding
        if out is None or out.kind != "connect" or client.sid != node.sid:
            return
        client.outstanding = None
        client.session_id, client.password = txn.session_id, txn.body[1]
        self.stats["sessions"] += 1
        self.checker.on_acked(AckedWrite(txn.zxid, txn.session_id, txn.cxid, node.sid, self.cluster.now))
        self._attach(client, node, self.cluster.now)

    def _attach(self, client: Client, node: Node, now: int) -> None:
        node.engine.attach(client.session_id, client)
        node.engine.touch(client.session_id)
        client.attached = True
        client.last_touch = now
        self.cluster.log(f"client {client.index}: session 0x{client.session_id:x} on server {node.sid}")

    def disconnect(self, client: Client, why: str) -> None:
        if client.outstanding is not None and client.outstanding.kind != "connect":
            self.stats["failed"] += 1
        client.outstanding = None
        if client.attached:
            client.attached = False
            node = self._node(client)
            if node.alive:
                node.engine.detach(client)
            self.cluster.log(f"client {client.index}: disconnected from server {client.sid} ({why})")

    def on_clients_closed(self, node: Node, keep: ClientsKept) -> None:
        """As the server's connections (``zabby.server.clients.session.ClientSession.kept``)."""
        for client in self.clients:
            if client.sid != node.sid:
                continue
            if keep is ClientsKept.IDLE:
                client.held = client.attached and client.outstanding is None
            kept = client.held if keep in (ClientsKept.IDLE, ClientsKept.HELD) else keep is ClientsKept.UNHELD and not client.held
            if not kept:
                self.disconnect(client, "the server stopped serving")

    # ----------------------------------------------------------------- requests
    def _issue(self, client: Client, now: int) -> None:
        node = self._node(client)
        if not node.serving:  # held through an election: a write or sync closes the connection
            self.disconnect(client, "a request while its server does not serve")
            return
        client.cxid += 1
        roll = self.rng.random()
        client.last_touch = now
        node.engine.touch(client.session_id)
        try:
            if roll < CLOSE_SESSION_PROBABILITY:
                client.outstanding = Outstanding(client.cxid, "close", now, 0)
                node.engine.close_session(client.session_id, client.cxid, lambda txn, result: self._answered(client, node, txn))
            elif roll < CLOSE_SESSION_PROBABILITY + self.options.sync_probability:
                client.outstanding = Outstanding(client.cxid, "sync", now, self.checker.acked_max)
                self.stats["syncs"] += 1
                node.engine.client_sync(client.session_id, client.cxid, lambda: self._synced(client, node))
            else:
                reconfig = self.rng.random() < self.options.reconfig_probability
                op, args = (OpCode.RECONFIG, self._reconfig(node)) if reconfig else self._op(client)
                client.outstanding = Outstanding(client.cxid, "write", now, 0)
                self.stats["reconfigs" if reconfig else "writes"] += 1
                caller = Caller(client.session_id, [("digest", SUPER_DIGEST)] if reconfig else [], superuser=reconfig)
                node.engine.submit(op, args, caller, client.cxid, lambda txn, result: self._answered(client, node, txn))
        except ZabbyError as exc:
            client.outstanding = None
            if exc.code == Err.NOTREADONLY:  # a server that takes no writes (no member): go elsewhere
                self.disconnect(client, str(exc))
                client.sid = self.rng.choice(sorted(self.cluster.nodes))
            return
        self.cluster.log(f"client {client.index} -> server {node.sid}: {client.outstanding.kind} cxid {client.cxid}")
        self.cluster.drain(node)

    def _op(self, client: Client) -> tuple[int, tuple[Any, ...]]:
        rng = self.rng
        key = rng.choice(KEYS)
        data = rng.randbytes(rng.randint(0, 8))
        kind = rng.random()
        if kind < 0.04:  # reaped by the leader once its last child goes
            return OpCode.CREATE_CONTAINER, (key, data, ACL, int(CreateMode.CONTAINER), None)
        if kind < 0.07:  # reaped by the leader once its TTL passes untouched
            ttl_ms = rng.randint(1, 40) * TICK_MS
            return OpCode.CREATE_TTL, (f"{key}/t", data, ACL, int(CreateMode.PERSISTENT_WITH_TTL), ttl_ms)
        if kind < 0.1:
            return OpCode.DELETE, (f"{key}/m", -1)
        if kind < 0.25:
            return OpCode.CREATE, (key, data, ACL, int(CreateMode.PERSISTENT), None)
        if kind < 0.35:
            return OpCode.CREATE, (f"{key}/s-", data, ACL, int(CreateMode.PERSISTENT_SEQUENTIAL), None)
        if kind < 0.45:
            return OpCode.CREATE, (f"/e{client.index}-{rng.randint(0, 2)}", data, ACL, int(CreateMode.EPHEMERAL), None)
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

    def _reconfig(self, node: Node) -> tuple[Any, ...]:
        """A reconfig as an operator would ask for one, of the membership ``node`` knows:
        add a server (a spare, or one removed before), remove one, flip one's role, or name
        a whole new membership; conditional on the version sometimes (and then sometimes a
        stale one).  Some make no valid membership: those must fail cleanly."""
        rng = self.rng
        membership = node.peer.membership
        members = sorted(membership.sids)
        outside = sorted(set(self.cluster.nodes) - membership.sids)
        joining: list[str] = []
        leaving: list[int] = []
        new_members: list[str] = []
        kind = rng.random()
        if kind < 0.35 and outside:
            joining.append(_spec(rng.choice(outside), rng.random() < 0.2))
        elif kind < 0.65:
            leaving.append(rng.choice(members))
        elif kind < 0.8:
            sid = rng.choice(members)
            joining.append(_spec(sid, sid in membership.voters))
        else:
            chosen = rng.sample(sorted(self.cluster.nodes), rng.randint(1, len(self.cluster.nodes)))
            new_members = [_spec(sid, rng.random() < 0.2) for sid in sorted(chosen)]
        from_config = rng.choice((-1, -1, membership.version, max(0, membership.version - 1)))
        self.cluster.log(f"reconfig of {membership.version:x} asked of server {node.sid}: joining {joining} "
                         f"leaving {leaving} members {new_members} from {from_config:x}")  # fmt: skip
        return (",".join(joining), ",".join(str(sid) for sid in leaving), ",".join(new_members), from_config)

    # ----------------------------------------------------------------- answers
    def _answered(self, client: Client, node: Node, txn: Txn) -> None:
        out = client.outstanding
        if out is None or out.cxid != txn.cxid or client.sid != node.sid or out.kind not in ("write", "close"):
            return
        client.outstanding = None
        self.stats["acked"] += 1
        self.cluster.log(f"client {client.index} acked by server {node.sid}: cxid {txn.cxid} at 0x{txn.zxid:x}")
        self.checker.on_acked(AckedWrite(txn.zxid, txn.session_id, txn.cxid, node.sid, self.cluster.now))
        if out.kind == "close":
            self.stats["closed"] += 1
            self.disconnect(client, "its session closed")
            client.session_id = 0

    def _synced(self, client: Client, node: Node) -> None:
        out = client.outstanding
        if out is None or out.kind != "sync" or client.sid != node.sid:
            return
        client.outstanding = None
        self.stats["synced"] += 1
        self.cluster.log(f"client {client.index} synced by server {node.sid} at 0x{node.tree_zxid:x}")
        self.checker.on_sync_answered(node.sid, node.tree_zxid, out.needed)


def _spec(sid: int, observer: bool) -> str:
    return f"server.{sid}={sim_member(sid, observer).spec()}"
