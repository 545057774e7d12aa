"""A hand-driven cluster for interaction tests: the simulator's shell, with no faults and a
fixed one-tick delay, so a test reads like the scenario it checks.

    c = Scenario(voters=3)
    c.preload(1, epoch=1, txns=creates(1, 5))   # disk contents before boot
    c.down(1); c.boot(); c.run_until(c.serving_leader)
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from zabby.core.messages import Message, Request
from zabby.core.types import ServerState
from zabby.opcodes import CreateMode, OpCode
from zabby.sim.checkers import Checker
from zabby.sim.cluster import Cluster, Node
from zabby.engine.storage import Storage
from zabby.sim.fs import SimFS
from zabby.sim.network import Network
from zabby.sim.options import SimOptions
from zabby.tree.acl import OPEN_ACL_UNSAFE
from zabby.tree.prep import Caller
from zabby.tree.txns import ZXID_COUNTER_LAST, Txn, make_zxid

ACL = [list(entry) for entry in OPEN_ACL_UNSAFE]
WRITER_SESSION_TIMEOUT_MS = 600_000  # write() outlives any scenario


def create_txn(epoch: int, counter: int, path: str, parent_cversion: int) -> Txn:
    """A CREATE of a child of "/" (whose cversion is then ``parent_cversion``)."""
    return Txn(make_zxid(epoch, counter), 0x99, counter, 0, int(OpCode.CREATE),
               (path, b"", OPEN_ACL_UNSAFE, 0, parent_cversion))  # fmt: skip


def creates(epoch: int, count: int, *, first: int = 1, cversion: int = 1, prefix: str = "/n") -> list[Txn]:
    return [create_txn(epoch, first + i, f"{prefix}{epoch}-{first + i}", cversion + i) for i in range(count)]


class Scenario:
    def __init__(self, voters: int = 3, observers: int = 0, **options: Any) -> None:
        defaults: dict[str, Any] = {
            "seed": 0, "voter_count": voters, "observer_count": observers, "delay_ticks_min": 1, "delay_ticks_max": 1,
            "init_limit_ticks": 60, "sync_limit_ticks": 30, "ping_interval_ticks": 5, "finalize_wait_ticks": 2,
            "snapshot_every_txns": 10_000, "log_segment_bytes_max": 1 << 20,
        }  # fmt: skip
        defaults.update(options)
        self.lines: list[str] = []
        self.sent: list[tuple[int, int, int, Message]] = []  # (tick, src, dst, message)
        self.checker = Checker(zxid_counter_last=defaults.get("zxid_counter_last", ZXID_COUNTER_LAST))
        self.cluster = Cluster(SimOptions(**defaults), random.Random(0), self.checker, self.lines.append)
        self._record_sends()
        self.cxid = 0
        self._writer = -1  # the session of write(), opened at its first call

    def _record_sends(self) -> None:
        network, sent, cluster = self.cluster.network, self.sent, self.cluster
        original = Network.send

        def send(now: int, src: int, dst: int, message: Any) -> None:
            sent.append((cluster.now, src, dst, message))
            original(network, now, src, dst, message)

        network.send = send  # type: ignore[method-assign]

    # ----------------------------------------------------------------- setup
    def node(self, sid: int) -> Node:
        return self.cluster.nodes[sid]

    def preload(self, sid: int, *, accepted_epoch: int, current_epoch: int | None = None, txns: list[Txn],
                snapshot: tuple[int, tuple[Any, ...]] | None = None) -> None:  # fmt: skip
        """Replace a server's disk with one that holds ``txns`` (then ``restart`` it to boot
        from it), and a snapshot ``(zxid, records)`` written after them."""
        node = self.node(sid)
        node.fs = SimFS()
        storage = Storage(node.config, fs=node.fs)
        storage.recover(None)
        storage.write_accepted_epoch(accepted_epoch)
        storage.write_current_epoch(accepted_epoch if current_epoch is None else current_epoch)
        storage.append(txns)
        storage.sync()
        if snapshot is not None:
            zxid, records = snapshot
            storage.write_snapshot(zxid, records)
            self.cluster.checker.chain.setdefault(zxid, (hash(("preloaded", zxid)), 0))  # a history of its own
        storage.close()

    def restart(self, sid: int) -> None:
        self.cluster.restart(self.node(sid))

    def down(self, sid: int) -> None:
        node = self.node(sid)
        if node.alive:
            self.cluster.crash(node)
        node.restart_at = 10**9

    # ----------------------------------------------------------------- running
    def step(self) -> None:
        cluster = self.cluster
        cluster.now += 1
        self._deliver()
        for sid in sorted(cluster.nodes):
            node = cluster.nodes[sid]
            if node.alive:
                cluster.tick(node)
        self._deliver()

    def _deliver(self) -> None:
        while (event := self.cluster.network.pop_due(self.cluster.now)) is not None:
            self.cluster.deliver(event)

    def run_until(self, condition: Callable[[], Any], ticks_max: int = 2000) -> Any:
        for _ in range(ticks_max):
            found = condition()
            if found:
                return found
            self.step()
        raise AssertionError(f"not reached in {ticks_max} ticks:\n" + "\n".join(self.lines[-40:]))

    def run(self, ticks: int) -> None:
        for _ in range(ticks):
            self.step()

    # ----------------------------------------------------------------- queries
    def serving_leader(self) -> Node | None:
        for node in self.cluster.nodes.values():
            if node.is_leader:
                return node
        return None

    def all_serving(self) -> bool:
        return all(n.serving for n in self.cluster.nodes.values() if n.alive)

    def converged(self) -> bool:
        alive = [n for n in self.cluster.nodes.values() if n.alive]
        leader = self.serving_leader()
        return (leader is not None and all(n.serving for n in alive)
                and all(n.tree_zxid == leader.peer.last_logged for n in alive))  # fmt: skip

    def messages(self, kind: type, *, src: int | None = None, dst: int | None = None) -> list[Any]:
        return [m for _, s, d, m in self.sent if isinstance(m, kind) and src in (None, s) and dst in (None, d)]

    def write(self, sid: int, path: str) -> None:
        """A client create through server ``sid``: on the leader with no session (id 0, the
        leader's own writes, checked against none), through a learner in a session of its own
        (a forwarded write's session must be open: id 0 bypasses nothing there)."""
        session_id = 0
        if not self.node(sid).is_leader:
            if self._writer not in self.node(sid).tree.sessions:
                self._writer = self.open_session(sid, WRITER_SESSION_TIMEOUT_MS)
            session_id = self._writer
        self.cxid += 1
        request = Request(session_id=session_id, cxid=self.cxid, op=int(OpCode.CREATE),
                          args=(path, b"x", ACL, int(CreateMode.PERSISTENT), None))  # fmt: skip
        assert self.cluster.submit(self.node(sid), request), f"server {sid} is not serving"

    def state(self, sid: int) -> ServerState:
        return self.node(sid).peer.state

    # ----------------------------------------------------------------- clients with sessions
    def open_session(self, sid: int, timeout_ms: int) -> int:
        """A session created through server ``sid`` (as a connection's handshake does)."""
        created: list[Txn] = []
        self.node(sid).engine.create_session(timeout_ms, lambda txn, result: created.append(txn))
        self.cluster.drain(self.node(sid))
        self.run_until(lambda: created)
        return created[0].session_id

    def call(self, sid: int, session_id: int, op: OpCode, *args: Any) -> list[tuple[Txn, Any]]:
        """Submit one write through server ``sid``; the list gets (txn, result) when answered."""
        answers: list[tuple[Txn, Any]] = []
        self.cxid += 1
        engine = self.node(sid).engine
        engine.submit(int(op), tuple(args), Caller(session_id, []), self.cxid, lambda txn, result: answers.append((txn, result)))
        self.cluster.drain(self.node(sid))
        return answers
