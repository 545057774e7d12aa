"""N simulated servers, each the server's own ``Engine`` run by the server's own shell.

Theory of operation: ``Node`` is one simulated server: the engine, carried out by the same
``zabby.shell.EffectExecutor`` the server runs, over the simulator's I/O (``zabby.sim.shell_io``):
the same ``Storage`` (the server's log, snapshots, epoch files and recovery) over a simulated
file system (``zabby.sim.fs``), and a simulated network and clock instead of sockets and
time: a ``Send`` queues messages on the packet simulator (a SNAP's tree image goes out as
SnapChunk messages through the same faulty network), ``Reload`` and a restart recover with
``Storage.recover``, ``WriteSnapshot`` writes the frozen image (at once, or as a child
writing in the background does: finished some ticks later, and never if the server crashes
first).  A fork is a frozen copy of the records at the zxid it was taken (``CopyFreezer``).
What this module keeps is the world: the network, the file system's faults, the clock,
crashes, and the checks.

A crash may land before any effect, or right after an append and before its fsync; the file
system then loses, tears or reorders what was written but not synced.  The disk may also
fail a call (EIO: the server fail-stops and is restarted) or fill up (ENOSPC: it refuses
writes until space comes back).  The engine repairs itself when a unit of work fails; in the
simulator nothing but an injected disk fault may make it fail, so any other repair is a
finding.

Inputs are batched as in the server: everything the network delivers in one round is queued
into the engines first, and each engine then works through all of it (one Ready for many
messages), which is where a SNAP and later commits meet in one Ready.
"""

from __future__ import annotations

import functools
import inspect
import random
import traceback
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zabby.config import ServerConfig
from zabby.core.messages import Inform, Proposal, Request, Sync
from zabby.core.peer import Peer, PeerConfig
from zabby.core.ready import SoftState
from zabby.core.types import ServerState
from zabby.engine import ClientsKept, Engine, Recovered, WriteSnapshot
from zabby.errors import ZabbyError
from zabby.membership import Member, Membership
from zabby.sim.checkers import Checker, Violation
from zabby.sim.fs import SimFS
from zabby.sim.network import UP, Event, Network, pair
from zabby.sim.options import SimOptions
from zabby.shell import EffectExecutor, run_now
from zabby.sim.shell_io import EFFECTS_PER_DRAIN_MAX, TICK_MS, Crashed, SimIO, SimStorage, Sleep
from zabby.storage.snapshot import SnapshotWriter
from zabby.tree.datatree import DataTree
from zabby.tree.prep import Caller
from zabby.tree.txns import Txn, follows

FLIPPED, REPAIRING = 1, 2  # Node.flipped


class SimClock:
    """The cluster's time, plus this server's clock jumps."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.offset_ms = 0

    def wall_ms(self) -> int:
        return self.cluster.now * TICK_MS + self.offset_ms

    def monotonic_ms(self) -> int:
        return self.cluster.now * TICK_MS + self.offset_ms


class CopyFreezer:
    """The simulated fork: a frozen copy of the tree's records, taken at the call."""

    @staticmethod
    def image_for_peer(tree: DataTree, sid: int) -> tuple[Any, ...]:
        return tuple(tree.records())

    @staticmethod
    def image_for_disk(tree: DataTree) -> tuple[Any, ...]:
        return tuple(tree.records())

    @staticmethod
    def discard(image: Any) -> None:
        pass


@dataclass(slots=True)
class Node:
    sid: int
    config: ServerConfig
    peer_config: PeerConfig
    clock: SimClock
    fs: SimFS = field(default_factory=SimFS)
    storage: SimStorage = None  # type: ignore[assignment]  # set at each start
    membership: Membership | None = None  # the dynamic configuration file: the last committed reconfig
    alive: bool = True
    engine: Engine = None  # type: ignore[assignment]
    tree_zxid: int = 0  # the tree's zxid and rolling hash, for the checkers
    tree_chain: int = 0
    soft: SoftState | None = None
    executor: EffectExecutor = None  # type: ignore[assignment]  # set at each start
    io: SimIO = None  # type: ignore[assignment]
    peer_task: Coroutine[Any, Any, None] | None = None  # the shell's peer task, suspended by a Pause
    paused_until: int = 0  # ticks: the peer task sleeps until then
    crash_armed: bool = False
    restart_at: int = 0
    stalled_until: int = 0
    repairs_seen: int = 0
    snap_sent: tuple[int, int] | None = None  # last SNAP sent (to, zxid), for the trace
    writing: tuple[int, WriteSnapshot, SnapshotWriter] | None = None  # a snapshot a child writes: (done at tick, it, its file)
    disk_faulted: bool = False  # a disk fault was injected since the start: a repair or a fail-stop may follow
    disk_full_until: int = 0  # ticks: the disk has no space until then
    flipped: int = 0  # a bit flipped in its files: FLIPPED while the damaged byte is on disk unread, REPAIRING until a leader syncs it
    flipped_byte: tuple[Path, int, int] | None = None  # the flip: its file, offset and damaged byte

    def forget_flip_if_gone(self) -> None:
        """No longer FLIPPED once the damaged byte is gone from the disk (cut off, written over,
        deleted): nothing can read it any more."""
        if self.flipped == FLIPPED and not (self.flipped_byte is not None and self.fs.holds_flip(*self.flipped_byte)):
            self.flipped = 0

    @property
    def faulted(self) -> bool:
        """A disk fault was injected, or a bit flipped, since it started: its storage may fail."""
        return self.disk_faulted or bool(self.flipped)

    @property
    def peer(self) -> Peer:
        return self.engine.peer

    @property
    def tree(self) -> DataTree:
        return self.engine.tree

    @property
    def serving(self) -> bool:
        return self.alive and self.engine is not None and self.engine.serving

    @property
    def is_leader(self) -> bool:
        return self.serving and self.engine.is_leader


def _configs(options: SimOptions) -> dict[int, tuple[ServerConfig, PeerConfig]]:
    """The first membership's servers, and spares outside it: a spare starts as a server
    joining does, with the first membership plus itself (a participant) in its configuration."""
    voters = frozenset(range(1, options.voter_count + 1))
    observers = frozenset(range(options.voter_count + 1, options.voter_count + options.observer_count + 1))
    spares = frozenset(range(options.voter_count + options.observer_count + 1, options.node_count + 1))
    members = sorted(voters | observers)
    out = {}
    for sid in sorted(voters | observers | spares):
        known = members + [sid] if sid in spares else members
        addresses = tuple(sim_member(peer, peer in observers) for peer in known) if len(known) > 1 else ()
        config = ServerConfig(
            data_dir=Path(f"/sim/{sid}"), data_log_dir=Path(f"/sim/{sid}"), tick_ms=4 * TICK_MS,
            session_timeout_ms_min=8 * TICK_MS, session_timeout_ms_max=400 * TICK_MS, election_client_hold_ms=options.client_hold_ticks * TICK_MS,
            snap_count=max(2, options.snapshot_every_txns), container_check_interval_ms=40 * TICK_MS,
            log_reserve_bytes=options.log_reserve_bytes, turn_ops_max=options.turn_ops_max,
            commit_log_count=options.commit_log_count, zxid_counter_last=options.zxid_counter_last,
            peers=addresses, server_id=sid,
            reconfig_enabled=options.reconfig_probability > 0, super_digest=SUPER_DIGEST,
        )  # fmt: skip
        peer_config = PeerConfig(
            sid=sid, voters=voters | {sid} if sid in spares else voters, observers=observers,
            init_limit_ticks=options.init_limit_ticks, sync_limit_ticks=options.sync_limit_ticks,
            ping_interval_ticks=options.ping_interval_ticks, finalize_wait_ticks=options.finalize_wait_ticks,
            notify_interval_ticks_min=options.notify_interval_ticks_min,
            notify_interval_ticks_max=options.notify_interval_ticks_max,
            commit_log_count=options.commit_log_count, zxid_counter_last=options.zxid_counter_last,
        )  # fmt: skip
        out[sid] = (config, peer_config)
    return out


SUPER_DIGEST = "super:simulated"  # the digest identity a client proves to reconfigure (superDigest)


def sim_member(sid: int, observer: bool = False) -> Member:
    """A simulated server's addresses: every one reaches every other by its id."""
    return Member(sid, "sim", sid, sid, observer)


class Cluster:
    def __init__(self, options: SimOptions, rng: random.Random, checker: Checker, trace: Callable[[str], None] | None) -> None:
        self.options = options
        self.rng = rng
        self.checker = checker
        self.trace = trace
        self.now = 0
        self.network = Network(random.Random(rng.getrandbits(64)), options)
        self.engine_rng = random.Random(rng.getrandbits(64))
        # per direction: (the connection's generation, the last zxid PROPOSED or INFORMED on it)
        self.txn_streams: dict[tuple[int, int], tuple[int, int]] = {}
        self.nodes: dict[int, Node] = {}
        for sid, (config, peer_config) in _configs(options).items():
            self.nodes[sid] = Node(sid, config, peer_config, SimClock(self))
        # client hooks, set by the workload
        self.on_clients_closed: Callable[[Node, ClientsKept], None] = lambda node, keep: None
        self.on_node_down: Callable[[Node], None] = lambda node: None
        self.stats: dict[str, int] = {"forged": 0, "crashes": 0, "crashes_in_ready": 0, "lost_unsynced": 0, "snaps": 0,
                                      "truncs": 0, "reloads": 0, "elections": 0, "restarts": 0, "snapshots": 0,
                                      "snapshots_skipped": 0, "fail_stops": 0, "disk_faults": 0, "bit_flips": 0, "storage_repairs": 0}  # fmt: skip
        for node in self.nodes.values():
            self.restart(node)

    def log(self, text: str) -> None:
        if self.trace is not None:
            self.trace(f"[{self.now:5d}] {text}")

    # ----------------------------------------------------------------- lifecycle
    def restart(self, node: Node) -> None:
        """Boot from disk: the storage's own recovery, as the server's start-up runs it."""
        node.alive = True
        node.disk_faulted = False
        node.io = SimIO(self, node)
        node.storage = SimStorage(node, self, self.options.log_segment_bytes_max)
        node.executor = EffectExecutor(node.storage, node.io, ensemble=bool(node.config.peers))
        recovered = self.recover(node, snapshot_wanted=False, at_start=True)
        if recovered.durable.repairing:
            self.stats["storage_repairs"] += 1
            self.log(f"server {node.sid} found its history damaged: it starts empty, to be repaired by the leader")
        node.engine = Engine(node.config, node.peer_config, TICK_MS, recovered, clock=node.clock, freezer=CopyFreezer(),
                             rng=random.Random(self.engine_rng.getrandbits(64)),
                             on_applied=functools.partial(self._on_applied, node))  # fmt: skip
        node.engine.space_low = node.storage.space_low
        node.executor.drive(node.engine)
        node.soft = None
        node.peer_task, node.paused_until = None, 0
        node.crash_armed = False
        node.repairs_seen = 0
        node.writing = None
        self.stats["restarts"] += 1
        durable = recovered.durable
        self.log(f"server {node.sid} starts: epochs {durable.accepted_epoch}/{durable.current_epoch}, "
                 f"log to 0x{durable.last_logged:x}, snapshot 0x{durable.snapshot_zxid:x}")  # fmt: skip
        self.drain(node)

    def recover(self, node: Node, *, snapshot_wanted: bool, at_start: bool = False) -> Recovered:
        """``Storage.recover``; the checkers then see the txns it replayed from the log."""
        recovered = node.storage.recover(node.membership or node.config.membership, snapshot_wanted=snapshot_wanted,
                                         at_start=at_start)  # fmt: skip
        if recovered.durable.repairing and node.flipped:  # the recovery read the damage
            node.flipped = REPAIRING
        elif node.flipped == REPAIRING:
            node.flipped = 0
        else:  # it did not read that byte, which a later read may (a reload's, after a TRUNC made
            node.forget_flip_if_gone()  # the damaged segment the last one: seed 74454)
        base = node.storage.datadir.recovered.snapshot_zxid
        node.tree_zxid, node.tree_chain = base, self.checker.chain_hash(base) if base else 0
        for txn in node.storage.logged_after(base):
            if txn.zxid > recovered.tree.last_zxid:
                break
            self._track_apply(node, txn, committed=False)
        return recovered

    def crash(self, node: Node, *, in_ready: bool = False) -> None:
        options = self.options
        lost = node.fs.crash(self.rng, torn=options.torn_writes, reorder=options.reordered_writes)
        self.stats["crashes"] += 1
        self.stats["crashes_in_ready"] += in_ready
        self.stats["lost_unsynced"] += lost
        self.log(f"server {node.sid} CRASHES{' inside a Ready' if in_ready else ''}; {lost} unsynced writes lost or torn")
        node.alive = False
        node.soft = None
        if node.peer_task is not None and inspect.getcoroutinestate(node.peer_task) == inspect.CORO_SUSPENDED:
            node.peer_task.close()  # dies with the process (in a Pause: nothing to unwind)
        node.peer_task = None  # or it is the one crashing: ``Crashed`` unwinds it
        # the shell goes with it: a staged SNAP's .tmp files stay, if their names were synced (removed at start-up)
        if node.writing is not None:  # the server's child dies with it (PR_SET_PDEATHSIG); its .tmp file is never read
            self.log(f"server {node.sid}'s snapshot at 0x{node.writing[1].zxid:x} dies unfinished")
            node.writing = None
        self.stats["snapshots_skipped"] += node.engine.stats.snapshots_skipped
        node.restart_at = self.now + self.rng.randint(1, max(1, self.options.restart_ticks_max))
        for other in sorted(self.nodes):
            if other != node.sid:
                self.network.close(self.now, node.sid, other)
        self.on_node_down(node)

    # ----------------------------------------------------------------- inputs
    def tick(self, node: Node) -> None:
        if not node.alive:
            return
        try:
            if node.writing is not None and node.writing[0] <= self.now:
                node.io.snapshot_done(node.writing[1], node.writing[2])
            if not node.executor.sync_idle and self.rng.random() < 0.7:  # or at a later tick
                run_now(node.executor.sync_in_background())
        except Crashed:
            return
        node.engine.tick()
        self.drain(node)

    def deliver(self, event: Event) -> Node | None:
        """Queue one network event into its engine; returns the node with new work."""
        if event.kind == "down":
            node = self.nodes[event.src]
            if node.alive:
                node.engine.link_down(event.dst)
                return node
            return None
        node = self.nodes[event.dst]
        if not node.alive:
            return None
        node.engine.receive(event.src, event.message)
        return node

    def submit(self, node: Node, item: Request | Sync, done: Callable[..., None] = lambda *a: None) -> bool:
        """A client's write or sync reaches ``node``; False if it cannot take it now."""
        if not node.serving:
            return False
        try:
            if isinstance(item, Sync):
                node.engine.client_sync(item.session_id, item.cxid, done)
            else:
                caller = Caller(item.session_id, [tuple(a) for a in item.auth_ids], item.superuser)  # type: ignore[misc]
                node.engine.submit(item.op, item.args, caller, item.cxid, done)
        except ZabbyError:
            return False
        self.drain(node)
        return True

    # ----------------------------------------------------------------- the effect loop
    def drain(self, node: Node) -> None:
        """Run the node's shell until its engine has nothing more to do, turn after turn, as
        the server's tasks do: the task that fed the engine carries out what it can at once
        (``EffectExecutor.run_effects``), the peer task what must be awaited (``carry_out_awaited``,
        suspended by a ``Pause`` until its tick)."""
        executor = node.executor
        node.engine.begin_turn()
        node.io.effects = 0
        try:
            for _ in range(EFFECTS_PER_DRAIN_MAX):  # turns; SimIO bounds the effects too
                if not node.alive:
                    return
                if node.peer_task is not None and not self._resume(node):
                    return  # paused: input waits for it, as in the server
                executor.run_effects()
                if executor.awaited is not None:
                    node.peer_task = executor.carry_out_awaited()
                    if not self._resume(node):
                        return
                if not node.alive:
                    return
                self.check_step(node)
                if node.engine.has_work():
                    node.engine.begin_turn()
                    continue
                self._check_settled(node)
                return
        except Crashed:
            return  # the crash is done (``SimIO.crash_point``, ``fail_stop``)
        raise Violation(f"server {node.sid}: the engine's work does not settle")

    def _resume(self, node: Node) -> bool:
        """Run the suspended peer task on; False if it suspends again (a Pause until a tick)."""
        task = node.peer_task
        assert task is not None
        if node.paused_until > self.now:
            return False
        try:
            sleep = task.send(None)
        except StopIteration:
            node.peer_task, node.paused_until = None, 0
            return True
        if not isinstance(sleep, Sleep):
            raise Violation(f"server {node.sid}: the shell suspended on {sleep!r}, which the simulator does not run")
        node.paused_until = sleep.tick
        return False

    def check_step(self, node: Node) -> None:
        """After each of the engine's steps: repairs follow faults, and what the server became."""
        self._check_repairs(node)
        self._observe(node)

    def check_txn_stream(self, src: int, dst: int, message: Proposal | Inform) -> None:
        """On one connection, the txns a server proposes (or informs) follow each other with no
        gap and no step back (an INFORM may repeat what a DIFF proposed: its learner skips
        those).  The network keeps them in order (its injected reorders aside, which come
        after this), so a learner that found one out of order would resync for nothing: a
        sender's bug that the learner's recovery hides (a PROPOSAL held behind a sync,
        overtaken by a later one, did just that)."""
        conn = self.network.connections[pair(src, dst)]
        if conn.state != UP:
            return  # dropped: the learner sees the connection break, not a gap
        txns = message.txns
        stream = self.txn_streams.get((src, dst))
        last = stream[1] if stream is not None and stream[0] == conn.generation else None
        if last is not None and message.__class__ is Inform:
            txns = tuple(txn for txn in txns if txn.zxid > last)
        if not txns:
            return
        if last is not None and not follows(last, txns[0].zxid):
            raise Violation(f"server {src} sends txn 0x{txns[0].zxid:x} to {dst} right after 0x{last:x} on one connection")
        self.txn_streams[(src, dst)] = (conn.generation, txns[-1].zxid)

    # ----------------------------------------------------------------- what the checkers see
    def _on_applied(self, node: Node, txn: Txn, result: object) -> None:
        self._applied(node, txn)

    def _applied(self, node: Node, txn: Txn) -> None:
        self._track_apply(node, txn, committed=True)

    def _track_apply(self, node: Node, txn: Txn, *, committed: bool) -> None:
        node.tree_chain = self.checker.on_apply(node.sid, node.tree_zxid, node.tree_chain, txn, committed=committed)
        node.tree_zxid = txn.zxid

    def _check_repairs(self, node: Node) -> None:
        """A repair follows an injected disk fault, or it is a finding."""
        engine = node.engine
        if engine.stats.repairs == node.repairs_seen:
            return
        if node.faulted:
            node.repairs_seen = engine.stats.repairs
            return
        failure = engine.last_failure
        detail = "".join(traceback.format_exception(failure)[-6:]) if failure is not None else ""
        raise Violation(f"server {node.sid} had to repair itself (nothing in the simulator should fail):\n{detail}")

    def _observe(self, node: Node) -> None:
        soft = node.engine.soft
        if soft == node.soft:
            return
        old, node.soft = node.soft, soft
        self.log(f"server {node.sid}: {soft.state.value} {soft.phase.value} leader={soft.leader} "
                 f"epoch={soft.epoch}{' serving' if soft.serving else ''}")  # fmt: skip
        if soft.state == ServerState.LOOKING and (old is None or old.state != ServerState.LOOKING):
            self.stats["elections"] += 1
        if soft.serving and node.flipped == REPAIRING and not node.storage.datadir.repairing:
            node.flipped = 0  # a leader synced it
        if soft.serving and soft.state == ServerState.LEADING and not (old is not None and old.serving and old.state == ServerState.LEADING):
            leader = node.peer.leader
            self.checker.on_established(node.sid, soft.epoch, node.tree_zxid, leader.established_by if leader else None)

    def _check_settled(self, node: Node) -> None:
        """With no work pending, the core, the tree and the disk agree."""
        peer, tree = node.engine.peer, node.engine.tree
        if node.engine.receiving_snapshot:
            return
        if tree.last_zxid != node.tree_zxid:
            raise Violation(f"server {node.sid}: tree at 0x{tree.last_zxid:x}, its applies reached 0x{node.tree_zxid:x}")
        if node.engine.awaiting_sync and node.executor.sync_idle:
            raise Violation(f"server {node.sid}: Readys wait for a sync of the log that nobody runs")
        if peer.applied != node.engine.applied_once_synced:
            raise Violation(f"server {node.sid}: core applied 0x{peer.applied:x}, tree at 0x{node.tree_zxid:x}"
                            f" (0x{node.engine.applied_once_synced:x} once the log's sync is done)")
        logged = max(node.storage.log.last_zxid, node.tree_zxid)  # after a SNAP: the snapshot, an empty log
        if peer.last_logged != logged:
            raise Violation(f"server {node.sid}: core logged 0x{peer.last_logged:x}, disk at 0x{logged:x}")

