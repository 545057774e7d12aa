"""N simulated servers: each a ``core.Peer`` with a sim disk, a DataTree and a Preparer.

Theory of operation: ``Node`` is the simulated shell.  It executes every Ready exactly in
the documented order (zabby.core.ready): epochs → truncate (reloading the tree from disk if
it is ahead) → append → fsync → apply → send (a ``Snap`` is followed by the tree's records)
→ drop links, requests, sync replies → ``advance``.  A crash may land inside a Ready, at any
of those stages; the disk then loses what was appended but not synced.  A restart rebuilds
``DurableState`` from the disk and the tree from snapshot + log, as ``zabby.storage`` does.

Shell rules the core relies on, which the simulator therefore also tests:

* a snapshot is written only when the tree holds nothing but committed txns (the last apply
  came from a Ready's ``committed``), never of a tree that recovery replayed an unsynced,
  maybe-uncommitted tail into (ZooKeeper's ZOOKEEPER-1549);
* a learner installs a leader's snapshot only while it still syncs with that leader, then
  calls ``snapshot_installed`` before stepping the next message.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from zabby.core.messages import Diff, Message, Request, Snap, SnapChunk, Sync, Trunc
from zabby.core.peer import DurableState, Peer, PeerConfig
from zabby.core.ready import Ready, SoftState
from zabby.core.types import ServerState
from zabby.errors import ZabbyError
from zabby.opcodes import OpCode
from zabby.sim.checkers import Checker, Violation
from zabby.sim.disk import Disk, Snapshot
from zabby.sim.network import Event, Network
from zabby.sim.options import SimOptions
from zabby.tree.datatree import DataTree
from zabby.tree.prep import Caller, Preparer
from zabby.tree.txns import Txn

# Crash stages inside a Ready: the crash happens right before the named step.
STAGES = ("early", "epochs", "truncate", "append", "sync", "apply", "send", "rest", "advance")
READY_SPINS_MAX = 10_000  # a Ready loop that never ends is a core bug, not a long run


@dataclass(slots=True)
class QueuedRequest:
    request: Request
    from_sid: int  # the learner that forwarded it, or the leader itself for its own clients


@dataclass(slots=True)
class Node:
    sid: int
    config: PeerConfig
    disk: Disk = field(default_factory=Disk)
    alive: bool = True
    peer: Peer = None  # type: ignore[assignment]
    tree: DataTree = field(default_factory=DataTree)
    tree_zxid: int = 0
    tree_chain: int = 0
    tree_committed: bool = True  # everything in the tree is known to be committed
    preparer: Preparer | None = None
    snap_in: tuple[int, int] | None = None  # (leader, zxid) of a snapshot being received
    requests: list[QueuedRequest] = field(default_factory=list)
    txns_since_snapshot: int = 0
    crash_armed: bool = False
    restart_at: int = 0
    stalled_until: int = 0
    soft: SoftState | None = None

    @property
    def serving(self) -> bool:
        return self.alive and self.soft is not None and self.soft.serving

    @property
    def is_leader(self) -> bool:
        return self.serving and self.soft is not None and self.soft.state == ServerState.LEADING


class Cluster:
    def __init__(self, options: SimOptions, rng: random.Random, checker: Checker, trace: Callable[[str], None] | None) -> None:
        self.options = options
        self.rng = rng
        self.checker = checker
        self.trace = trace
        self.now = 0
        self.network = Network(random.Random(rng.getrandbits(64)), options)
        voters = frozenset(range(1, options.voter_count + 1))
        observers = frozenset(range(options.voter_count + 1, options.node_count + 1))
        self.nodes: dict[int, Node] = {}
        for sid in sorted(voters | observers):
            config = PeerConfig(
                sid=sid, voters=voters, observers=observers,
                init_limit_ticks=options.init_limit_ticks, sync_limit_ticks=options.sync_limit_ticks,
                ping_interval_ticks=options.ping_interval_ticks, finalize_wait_ticks=options.finalize_wait_ticks,
                notify_interval_ticks_min=options.notify_interval_ticks_min,
                notify_interval_ticks_max=options.notify_interval_ticks_max,
                commit_log_count=options.commit_log_count,
            )  # fmt: skip
            self.nodes[sid] = Node(sid, config)
        # workload hooks, set by the workload
        self.on_applied: Callable[[Node, Txn, Any], None] = lambda node, txn, result: None
        self.on_request_failed: Callable[[Node, Request], None] = lambda node, request: None
        self.on_sync_reply: Callable[[Node, Sync], None] = lambda node, sync: None
        self.on_node_down: Callable[[Node], None] = lambda node: None
        self.stats: dict[str, int] = {"crashes": 0, "crashes_in_ready": 0, "lost_unsynced": 0, "snaps": 0,
                                      "truncs": 0, "reloads": 0, "elections": 0, "restarts": 0}  # fmt: skip
        for node in self.nodes.values():
            self.restart(node)

    def log(self, text: str) -> None:
        if self.trace is not None:
            self.trace(f"[{self.now:5d}] {text}")

    # ----------------------------------------------------------------- lifecycle
    def restart(self, node: Node) -> None:
        """Boot from disk: the tree is the snapshot plus the whole log after it."""
        node.alive = True
        self._reload_tree(node, node.disk.last_zxid)
        node.tree_committed = node.tree_zxid == node.disk.snapshot.zxid and node.disk.snapshot.confirmed
        history = tuple(txn for txn, _ in node.disk.log[-node.config.commit_log_count:])
        durable = DurableState(node.disk.accepted_epoch, node.disk.current_epoch, node.disk.last_zxid,
                               node.tree_zxid, history, node.disk.snapshot.zxid)
        node.peer = Peer(node.config, durable)
        node.soft = None
        node.snap_in = None
        node.preparer = None
        node.requests = []
        node.crash_armed = False
        self.stats["restarts"] += 1
        self.log(f"server {node.sid} starts: epochs {durable.accepted_epoch}/{durable.current_epoch}, "
                 f"log to 0x{durable.last_logged:x}, snapshot 0x{node.disk.snapshot.zxid:x}")  # fmt: skip
        self.drain(node)

    def _reload_tree(self, node: Node, upto: int) -> None:
        snapshot = node.disk.snapshot
        node.tree = DataTree() if snapshot.records is None else DataTree.from_records(snapshot.records)
        node.tree_zxid, node.tree_chain = snapshot.zxid, snapshot.chain
        for txn, _ in node.disk.entries_after(snapshot.zxid, upto):
            self._apply(node, txn, committed=False)
        node.preparer = None

    def crash(self, node: Node, *, in_ready: bool = False) -> None:
        lost = node.disk.crash(self.rng)
        self.stats["crashes"] += 1
        self.stats["crashes_in_ready"] += in_ready
        self.stats["lost_unsynced"] += lost
        self.log(f"server {node.sid} CRASHES{' inside a Ready' if in_ready else ''}; lost {lost} unsynced txns")
        node.alive = False
        node.soft = None
        node.preparer = None
        node.requests = []
        node.restart_at = self.now + self.rng.randint(1, max(1, self.options.restart_ticks_max))
        for other in sorted(self.nodes):
            if other != node.sid:
                self.network.close(self.now, node.sid, other)
        self.on_node_down(node)

    # ----------------------------------------------------------------- inputs
    def tick(self, node: Node) -> None:
        if node.alive:
            node.peer.tick()
            self.drain(node)

    def deliver(self, event: Event) -> None:
        if event.kind == "down":
            node = self.nodes[event.src]
            if node.alive:
                if node.snap_in is not None and node.snap_in[0] == event.dst:
                    node.snap_in = None
                node.peer.link_down(event.dst)
                self.drain(node)
            return
        node = self.nodes[event.dst]
        if not node.alive:
            return
        message: Message = event.message
        if isinstance(message, SnapChunk):
            self._receive_snapshot(node, event.src, message)
            return
        if isinstance(message, Snap):
            node.snap_in = (event.src, message.zxid)
        node.peer.step(event.src, message)
        self.drain(node)

    def _receive_snapshot(self, node: Node, sender: int, chunk: SnapChunk) -> None:
        expected, node.snap_in = node.snap_in, None
        # As zabby.server.node does: only the snapshot this very sync waits for.  A chunk of
        # an earlier sync with the same leader (delayed past a new SNAP) is dropped (seed 5862).
        if expected is None or not node.peer.expects_snapshot(sender, expected[1]):
            return  # a snapshot for a sync that is over: drop it
        zxid = expected[1]
        tree = DataTree.from_records(chunk.records)
        if tree.last_zxid != zxid:  # an earlier sync's snapshot that the new SNAP overtook
            node.snap_in = expected  # the one this sync waits for may still come
            return
        chain = self.checker.chain_hash(zxid)
        # The log above the snapshot goes too, committed txns included: the leader resends
        # them (its pending txns) right after.  A crash in between is a window the final
        # checks watch; it is not flagged here.
        node.disk.save_snapshot(Snapshot(zxid, chunk.records, chain, confirmed=False), 0, clear_log=True)
        node.tree = tree
        node.tree_zxid, node.tree_chain, node.tree_committed = zxid, chain, False
        self.stats["snaps"] += 1
        self.log(f"server {node.sid} installs a snapshot at 0x{zxid:x} from {sender}")
        node.peer.snapshot_installed(zxid)
        self.drain(node)

    def submit(self, node: Node, item: Request | Sync) -> bool:
        """A client's write or sync reaches ``node``; False if it cannot take it now."""
        if not node.serving:
            return False
        if isinstance(item, Sync):
            node.peer.client_sync(item)
        elif node.is_leader:
            node.requests.append(QueuedRequest(item, node.sid))
        else:
            node.peer.forward(item)
        self.drain(node)
        return True

    # ----------------------------------------------------------------- the Ready loop
    def drain(self, node: Node) -> None:
        for _ in range(READY_SPINS_MAX):
            if not node.alive:
                return
            if node.peer.has_ready():
                ready = node.peer.ready()
                self.execute(node, ready)
                continue
            if node.requests and node.is_leader:
                self._propose(node)
                continue
            self._check_settled(node)
            return
        raise Violation(f"server {node.sid}: the Ready loop does not settle")

    def execute(self, node: Node, rd: Ready) -> None:
        if node.crash_armed:
            self._execute_crashing(node, rd)
            return
        disk = node.disk
        if rd.early_messages:
            self._send(node, rd.early_messages)
        if rd.accepted_epoch is not None or rd.current_epoch is not None:
            disk.save_epochs(rd.accepted_epoch, rd.current_epoch)
        if rd.truncate_to is not None:
            self._truncate(node, rd.truncate_to)
        if rd.append:
            disk.append(rd.append)
        if rd.must_sync:
            disk.sync()
        for txn in rd.committed:
            self._apply(node, txn, committed=True)
        if rd.messages:
            self._send(node, rd.messages)
        self._rest(node, rd)
        node.peer.advance(rd)
        self._after_ready(node, rd)

    def _execute_crashing(self, node: Node, rd: Ready) -> None:
        """The same steps, with a crash right before one of them."""
        crash_at = self._crash_stage(node, rd)
        disk = node.disk
        for stage in STAGES:
            if stage == crash_at:
                self.crash(node, in_ready=True)
                return
            if stage == "early":
                if rd.early_messages:
                    self._send(node, rd.early_messages)
            elif stage == "epochs":
                disk.save_epochs(rd.accepted_epoch, rd.current_epoch)
            elif stage == "truncate" and rd.truncate_to is not None:
                self._truncate(node, rd.truncate_to)
            elif stage == "append" and rd.append:
                disk.append(rd.append)
            elif stage == "sync" and rd.must_sync:
                disk.sync()
            elif stage == "apply":
                for txn in rd.committed:
                    self._apply(node, txn, committed=True)
            elif stage == "send":
                self._send(node, rd.messages)
            elif stage == "rest":
                self._rest(node, rd)
        node.peer.advance(rd)
        self._after_ready(node, rd)

    def _crash_stage(self, node: Node, rd: Ready) -> str | None:
        if not node.crash_armed:
            return None
        node.crash_armed = False
        if rd.append and self.rng.random() < 0.5:
            return "sync"  # the interesting one: appended, not yet fsynced
        return self.rng.choice(STAGES)

    def _truncate(self, node: Node, zxid: int) -> None:
        self.stats["truncs"] += 1
        self.log(f"server {node.sid} truncates its log after 0x{zxid:x} (log at 0x{node.disk.last_zxid:x})")
        cut = node.disk.truncate(zxid)
        self.checker.on_truncate(node.sid, cut)
        if node.tree_zxid > zxid:
            self.stats["reloads"] += 1
            self._reload_tree(node, zxid)
            node.tree_committed = False

    def _apply(self, node: Node, txn: Txn, *, committed: bool) -> None:
        node.tree_chain = self.checker.on_apply(node.sid, node.tree_zxid, node.tree_chain, txn, committed=committed)
        node.tree_zxid = txn.zxid
        result, _ = node.tree.apply(txn)
        if committed:
            node.tree_committed = True
            node.txns_since_snapshot += 1
            if node.preparer is not None:
                node.preparer.applied(txn.zxid)
            self.on_applied(node, txn, result)

    def _send(self, node: Node, messages: list[tuple[int, Message]]) -> None:
        for dst, message in messages:
            self.network.send(self.now, node.sid, dst, message)
            if self.trace is not None and isinstance(message, (Diff, Trunc, Snap)):
                self.log(f"server {node.sid} -> {dst}: {message} (log at 0x{node.disk.last_zxid:x})")
            if isinstance(message, Snap):
                if node.tree_zxid != message.zxid:
                    raise Violation(f"server {node.sid} sends a snapshot at 0x{message.zxid:x} of a tree at 0x{node.tree_zxid:x}")
                self.network.send(self.now, node.sid, dst, SnapChunk(records=tuple(node.tree.records()), last=True))

    def _rest(self, node: Node, rd: Ready) -> None:
        if not (rd.drop_links or rd.requests or rd.sync_replies):
            return
        for dst in rd.drop_links:
            self.network.close(self.now, node.sid, dst)
        for sid, request in rd.requests:
            node.requests.append(QueuedRequest(request, sid))
        for sync in rd.sync_replies:
            self.on_sync_reply(node, sync)

    def _after_ready(self, node: Node, rd: Ready) -> None:
        soft = rd.soft_state
        if soft != node.soft:
            self._soft_changed(node, soft)
        if (node.tree_committed and node.txns_since_snapshot >= self.options.snapshot_every_txns
                and node.tree_zxid > node.disk.snapshot.zxid):  # fmt: skip
            snapshot = Snapshot(node.tree_zxid, tuple(node.tree.records()), node.tree_chain)
            node.disk.save_snapshot(snapshot, self.options.log_keep_count, clear_log=False)
            node.txns_since_snapshot = 0

    def _check_settled(self, node: Node) -> None:
        """With no Ready pending, the core and the shell agree on the log and the tree."""
        peer = node.peer
        if peer.applied != node.tree_zxid:
            raise Violation(f"server {node.sid}: core applied 0x{peer.applied:x}, tree at 0x{node.tree_zxid:x}")
        if peer.last_logged != node.disk.last_zxid:
            raise Violation(f"server {node.sid}: core logged 0x{peer.last_logged:x}, disk at 0x{node.disk.last_zxid:x}")

    def _soft_changed(self, node: Node, soft: SoftState) -> None:
        old, node.soft = node.soft, soft
        self.log(f"server {node.sid}: {soft.state.value} {soft.phase.value} leader={soft.leader} "
                 f"epoch={soft.epoch}{' serving' if soft.serving else ''}")  # fmt: skip
        if soft.state == ServerState.LOOKING and (old is None or old.state != ServerState.LOOKING):
            self.stats["elections"] += 1
        if soft.serving and not node.disk.snapshot.confirmed:
            node.disk.snapshot.confirmed = True  # the leader is established: that history is committed
        if soft.serving and soft.state == ServerState.LEADING:
            if node.preparer is None:
                self.checker.on_established(node.sid, soft.epoch, node.tree_zxid)
                node.preparer = Preparer(node.tree)
        else:
            node.preparer = None
            self._fail_requests(node)

    def _fail_requests(self, node: Node) -> None:
        queued, node.requests = node.requests, []
        for item in queued:
            if item.from_sid == node.sid:
                self.on_request_failed(node, item.request)

    # ----------------------------------------------------------------- the leader's prep
    def _propose(self, node: Node) -> None:
        """Prepare the queued requests into txns with consecutive zxids and propose them."""
        assert node.preparer is not None
        queued, node.requests = node.requests, []
        zxid = node.peer.next_zxid
        txns: list[Txn] = []
        for item in queued:
            request = item.request
            caller = Caller(request.session_id, [tuple(a) for a in request.auth_ids], request.superuser)  # type: ignore[misc]
            try:
                txn_type, body = node.preparer.prepare(request.op, request.args, caller, zxid, self.now * 10)
            except ZabbyError as exc:
                if item.from_sid == node.sid:
                    self.on_request_failed(node, request)
                    continue
                txn_type, body = OpCode.ERROR, (int(exc.code),)  # the learner learns of the error in order
            txns.append(Txn(zxid, request.session_id, request.cxid, self.now * 10, int(txn_type), body))
            zxid += 1
        if txns:
            node.peer.propose(txns)
