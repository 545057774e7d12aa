"""N simulated servers, each the server's own ``Engine`` driven by a simulated shell.

Theory of operation: ``Node`` is the simulated driver.  It carries out the engine's effects
as ``zabby.server.node`` does, through the same ``Storage`` (the server's log, snapshots,
epoch files and recovery) over a simulated file system (``zabby.sim.fs``), and with a
simulated network and clock instead of sockets and time: ``Send`` queues messages on the
packet simulator (a SNAP's tree image goes out as SnapChunk messages through the same faulty
network), ``Reload`` and a restart recover with ``Storage.recover``, ``WriteSnapshot`` writes
the frozen image (at once, or as a child writing in the background does: finished some ticks
later, and never if the server crashes first).  A fork is a frozen copy of the records at the
zxid it was taken (``CopyFreezer``).

A crash may land between any two effects, or inside ``Persist`` between the append and the
fsync; the file system then loses, tears or reorders what was written but not synced.  The
disk may also fail a call (EIO: the server fail-stops and is restarted) or fill up (ENOSPC:
it refuses writes until space comes back).  The engine repairs itself when a unit of work
fails; in the simulator nothing but an injected disk fault may make it fail, so any other
repair is a finding.

Inputs are batched as in the server: everything the network delivers in one round is queued
into the engines first, and each engine then works through all of it (one Ready for many
messages), which is where a SNAP and later commits meet in one Ready.
"""

from __future__ import annotations

import functools
import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zabby.config import ServerConfig
from zabby.core.messages import Diff, Inform, Proposal, Request, Snap, SnapChunk, Sync, Trunc
from zabby.core.peer import Peer, PeerConfig
from zabby.core.ready import SoftState
from zabby.core.types import ServerState
from zabby.engine import (
    Append, CheckSpace, CloseClients, DropLinks, Effect, Engine, FailStop, Install, Pause, Persist, Purge,
    Reconfigure, Recovered, Reload, Send, StageSnapshot, WriteSnapshot,
)  # fmt: skip
from zabby.engine.storage import Storage
from zabby.errors import ZabbyError
from zabby.membership import Member, Membership
from zabby.sim.checkers import Checker, Violation
from zabby.sim.fs import SimFS
from zabby.sim.network import UP, Event, Network, pair
from zabby.sim.options import SimOptions
from zabby.storage.datadir import RecoveryError
from zabby.storage.files import DiskFailure, DiskFull
from zabby.storage.snapshot import CorruptSnapshotError, SnapshotWriter, read_snapshot
from zabby.storage.txnlog import CorruptLogError
from zabby.tree.datatree import DataTree, records_digest
from zabby.tree.prep import Caller
from zabby.tree.txns import Txn, follows

TICK_MS = 50  # one simulator tick is one core tick of a server
FLIPPED, REPAIRING = 1, 2  # Node.flipped
STORAGE_ERRORS = (DiskFull, DiskFailure, CorruptLogError, CorruptSnapshotError, RecoveryError)  # what a fault may raise
SNAP_CHUNK_RECORDS = 8  # small: a SNAP crosses the network as several messages
EFFECTS_PER_DRAIN_MAX = 10_000  # a work loop that never ends is an engine bug, not a long run


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
    storage: Storage = None  # type: ignore[assignment]  # set at each start
    membership: Membership | None = None  # the dynamic configuration file: the last committed reconfig
    alive: bool = True
    engine: Engine = None  # type: ignore[assignment]
    tree_zxid: int = 0  # the tree's zxid and rolling hash, for the checkers
    tree_chain: int = 0
    soft: SoftState | None = None
    answer: Any = None  # the result of the last effect, for the engine's next step
    error: Exception | None = None  # or what carrying it out raised
    paused_until: int = 0  # ticks: the engine asked to Pause
    crash_armed: bool = False
    restart_at: int = 0
    stalled_until: int = 0
    repairs_seen: int = 0
    snap_sent: tuple[int, int] | None = None  # last SNAP sent (to, zxid), for the trace
    staged: dict[int, SnapshotWriter] = field(default_factory=dict)  # SNAP streams being written, by leader
    writing: tuple[int, WriteSnapshot, SnapshotWriter] | None = None  # a snapshot a child writes: (done at tick, it, its file)
    disk_faulted: bool = False  # a disk fault was injected since the start: a repair or a fail-stop may follow
    disk_full_until: int = 0  # ticks: the disk has no space until then
    flipped: int = 0  # a bit flipped in its files: FLIPPED until a recovery reads them, REPAIRING until a leader syncs it
    sync_wanted: bool = False  # an Append left the log's sync to the background: done at a later tick

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
            session_timeout_ms_min=8 * TICK_MS, session_timeout_ms_max=400 * TICK_MS,
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
        self.on_clients_closed: Callable[[Node], None] = lambda node: None
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
        node.storage = Storage(node.config, fs=node.fs, segment_bytes_max=self.options.log_segment_bytes_max)
        recovered = self._recover(node, snapshot_wanted=False, at_start=True)
        if recovered.durable.repairing:
            self.stats["storage_repairs"] += 1
            self.log(f"server {node.sid} found its history damaged: it starts empty, to be repaired by the leader")
        node.engine = Engine(node.config, node.peer_config, TICK_MS, recovered, clock=node.clock, freezer=CopyFreezer(),
                             rng=random.Random(self.engine_rng.getrandbits(64)),
                             on_applied=functools.partial(self._on_applied, node))  # fmt: skip
        node.engine.space_low = node.storage.space_low
        node.soft = None
        node.answer, node.error = None, None
        node.paused_until = 0
        node.crash_armed = False
        node.repairs_seen = 0
        node.writing = None
        node.sync_wanted = False
        self.stats["restarts"] += 1
        durable = recovered.durable
        self.log(f"server {node.sid} starts: epochs {durable.accepted_epoch}/{durable.current_epoch}, "
                 f"log to 0x{durable.last_logged:x}, snapshot 0x{durable.snapshot_zxid:x}")  # fmt: skip
        self.drain(node)

    def _recover(self, node: Node, *, snapshot_wanted: bool, at_start: bool = False) -> Recovered:
        """``Storage.recover``; the checkers then see the txns it replayed from the log."""
        recovered = node.storage.recover(node.membership or node.config.membership, snapshot_wanted=snapshot_wanted,
                                         at_start=at_start)  # fmt: skip
        if node.flipped:  # the recovery read the damage, or the flip hit no byte it reads
            node.flipped = REPAIRING if recovered.durable.repairing else 0
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
        node.staged.clear()  # the .tmp files stay, if their names were synced: removed at start-up
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
        if node.alive:
            if node.writing is not None and node.writing[0] <= self.now:
                self._snapshot_done(node, node.writing[1], node.writing[2])
            if node.sync_wanted and self.rng.random() < 0.7:  # or at a later tick
                self._synced_in_background(node)
            node.engine.tick()
            self.drain(node)

    def _synced_in_background(self, node: Node) -> None:
        """The background sync an Append asked for is done: all the log holds now is durable
        (or the sync failed, and the engine decides what that means)."""
        node.sync_wanted = False
        zxid = node.storage.log.last_zxid
        try:
            node.storage.sync()
        except DiskFailure as exc:
            node.engine.log_synced(zxid, exc)
            return
        node.engine.log_synced(zxid)

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
        """Carry out the node's effects until its engine has nothing more to do, turn after
        turn, as the server's driver does (its other tasks run between turns)."""
        node.engine.begin_turn()
        for _ in range(EFFECTS_PER_DRAIN_MAX):
            if not node.alive or node.paused_until > self.now:
                return
            effect = node.engine.next_effect(node.answer, node.error)
            node.answer, node.error = None, None
            self._check_repairs(node)
            self._observe(node)
            if effect is None and node.engine.has_work():
                node.engine.begin_turn()
                continue
            if effect is None:
                self._check_settled(node)
                return
            if node.crash_armed and self._crash_here(node, effect):
                return
            if node.sync_wanted and not isinstance(effect, (Send, Append, DropLinks, CloseClients, StageSnapshot)):
                self._synced_in_background(node)  # the server awaits its background sync before these
            try:
                node.answer = self._carry_out(node, effect)
            except STORAGE_ERRORS as exc:
                self._expect_fault(node, exc)
                node.error = exc  # handed back, as the server's driver does: the engine decides
            if not node.alive:
                return
        raise Violation(f"server {node.sid}: the engine's work does not settle")

    def _crash_here(self, node: Node, effect: Effect) -> bool:
        """An armed crash lands before this effect, half the time (or between a Persist's or
        an Append's append and its fsync, the interesting spot)."""
        try:
            if isinstance(effect, Persist) and effect.append and effect.sync and self.rng.random() < 0.5:
                self._persist(node, effect, sync=False)
            elif isinstance(effect, Append) and effect.txns and self.rng.random() < 0.5:
                node.storage.append(effect.txns)
            elif self.rng.random() < 0.5:
                return False
        except STORAGE_ERRORS as exc:  # the disk failed first: the crash lands all the same
            self._expect_fault(node, exc)
        node.crash_armed = False
        self.crash(node, in_ready=True)
        return True

    def _carry_out(self, node: Node, effect: Effect) -> Any:  # noqa: C901 -- one branch per effect
        if isinstance(effect, Send):
            self._send(node, effect)
        elif isinstance(effect, Append):
            return self._append(node, effect)
        elif isinstance(effect, Persist):
            return self._persist(node, effect, sync=effect.sync)
        elif isinstance(effect, Reload):
            self.stats["reloads"] += 1
            self._discard_staged(node)
            return self._recover(node, snapshot_wanted=effect.snapshot_wanted)
        elif isinstance(effect, StageSnapshot):
            self._stage(node, effect)
        elif isinstance(effect, Install):
            return self._install(node, effect)
        elif isinstance(effect, DropLinks):
            for dst in effect.sids:
                self.network.close(self.now, node.sid, dst)
        elif isinstance(effect, CloseClients):
            self.on_clients_closed(node)
        elif isinstance(effect, WriteSnapshot):
            self._write_snapshot(node, effect)
        elif isinstance(effect, Pause):
            node.paused_until = -(-effect.until_ms // TICK_MS)
        elif isinstance(effect, FailStop):
            if not node.faulted:
                raise Violation(f"server {node.sid} failed its disk with no fault injected: {effect.reason}")
            self.stats["fail_stops"] += 1
            self.log(f"server {node.sid} fail-stops: {effect.reason}")
            self.crash(node)  # the process exits (74); its supervisor starts it again
        elif isinstance(effect, Purge):
            node.storage.purge()
        elif isinstance(effect, CheckSpace):
            return not node.storage.retry_reserve()
        elif isinstance(effect, Reconfigure):  # every simulated server reaches every other by its id
            if effect.committed and effect.membership.version:
                self.checker.on_membership(node.sid, effect.membership)
                node.membership = effect.membership
                self.log(f"server {node.sid} records membership {effect.membership.version:x}: "
                         f"voters {sorted(effect.membership.voters)} observers {sorted(effect.membership.observers)}")  # fmt: skip
        return None

    def _send(self, node: Node, effect: Send) -> None:
        for dst, message in effect.messages:
            if dst not in self.nodes:  # a forged sender's (zabby.sim.forge): nobody there
                continue
            self.network.send(self.now, node.sid, dst, message)
            if message.__class__ is Proposal or message.__class__ is Inform:
                self._check_txn_stream(node.sid, dst, message)
            if self.trace is not None and isinstance(message, (Diff, Trunc, Snap)):
                self.log(f"server {node.sid} -> {dst}: {message} (log at 0x{node.storage.log.last_zxid:x})")
            if isinstance(message, Snap):
                records = effect.images[(dst, message.zxid)]
                if records[0][1] != message.zxid:
                    raise Violation(f"server {node.sid} sends a SNAP at 0x{message.zxid:x} of a tree at 0x{records[0][1]:x}")
                for start in range(0, len(records), SNAP_CHUNK_RECORDS):
                    last = start + SNAP_CHUNK_RECORDS >= len(records)
                    chunk = SnapChunk(records=records[start:start + SNAP_CHUNK_RECORDS], last=last)
                    self.network.send(self.now, node.sid, dst, chunk)

    def _check_txn_stream(self, src: int, dst: int, message: Proposal | Inform) -> None:
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

    def _persist(self, node: Node, effect: Persist, *, sync: bool) -> bool:
        """The Persist's parts in the order the server carries them out (``zabby.server.node``)."""
        storage = node.storage
        if effect.accepted_epoch is not None:
            storage.write_accepted_epoch(effect.accepted_epoch)
        if effect.truncate_to is not None:
            self._truncate(node, effect.truncate_to)
        if effect.append:
            storage.append(effect.append)
            self.checker.on_logged(effect.append)
        if not sync and effect.sync:
            return False  # a crash between the append and the fsync: the current epoch waits too
        if sync:
            storage.sync()
        if effect.current_epoch is not None:
            storage.write_current_epoch(effect.current_epoch)
        return storage.space_low

    def _truncate(self, node: Node, zxid: int) -> None:
        storage = node.storage
        snapshot_zxid = storage.datadir.newest_snapshot_zxid()
        if zxid < snapshot_zxid:
            raise Violation(f"server {node.sid}: TRUNC to 0x{zxid:x} is below its snapshot at 0x{snapshot_zxid:x}")
        self.stats["truncs"] += 1
        self.log(f"server {node.sid} truncates its log after 0x{zxid:x} (log at 0x{storage.log.last_zxid:x})")
        try:
            cut = storage.logged_after(zxid)
        except CorruptLogError as exc:  # a flipped bit: the truncation reads it too, and fails as it does
            self._expect_fault(node, exc)
            cut = []
        self.checker.on_truncate(node.sid, cut)
        storage.truncate_after(zxid)

    def _append(self, node: Node, effect: Append) -> tuple[bool, bool]:
        """Append; sync at once (a server syncing inline always does, one syncing in the
        background does for one write alone) or leave it to a later tick (its kernel's AIO)."""
        storage = node.storage
        storage.append(effect.txns)
        self.checker.on_logged(effect.txns)
        if not effect.sync:
            return storage.space_low, False
        if not node.sync_wanted and (not self.options.sync_in_background or self.rng.random() < 0.3):
            storage.sync()
            return storage.space_low, True
        node.sync_wanted = True
        return storage.space_low, False

    def _stage(self, node: Node, effect: StageSnapshot) -> None:
        """As the server does: the stream goes into the snapshot's ``.tmp`` file as it comes."""
        if effect.start:
            self._discard_staged(node, effect.sid)
            node.staged[effect.sid] = node.storage.stage_snapshot(effect.zxid, effect.sid)
            return
        writer = node.staged.get(effect.sid)
        if writer is None or writer.zxid != effect.zxid:
            raise Violation(f"server {node.sid} stages records of a SNAP at 0x{effect.zxid:x} from {effect.sid} it did not begin")
        if effect.encoded:
            writer.add_encoded(effect.encoded, len(effect.records))
        else:
            writer.add(effect.records)

    def _discard_staged(self, node: Node, sid: int | None = None) -> None:
        for staged_sid in [sid] if sid is not None else list(node.staged):
            writer = node.staged.pop(staged_sid, None)
            if writer is not None:
                writer.discard()

    def _install(self, node: Node, effect: Install) -> int | None:
        chain = self.checker.chain_hash(effect.zxid)
        writer = node.staged.pop(effect.sid, None)
        if writer is None or writer.zxid != effect.zxid or writer.count != effect.tree.record_count():
            raise Violation(f"server {node.sid} installs a SNAP at 0x{effect.zxid:x} from {effect.sid} that is not "
                            f"the stream it staged")  # fmt: skip
        # The log above the snapshot goes too, committed txns included: the leader resends
        # them (its pending txns) right after.  A crash in between is a window the final
        # checks watch; it is not flagged here.
        path = node.storage.install_snapshot(writer)
        # what went to disk is the stream as it came; it must be the tree the engine built from it
        _, stored = read_snapshot(path, fs=node.fs)
        records = tuple(stored)
        if records != tuple(effect.tree.records()):
            raise Violation(f"server {node.sid} installed a SNAP at 0x{effect.zxid:x} whose file is not the tree it built")
        node.tree_zxid, node.tree_chain = effect.zxid, chain
        self.stats["snaps"] += 1
        self.log(f"server {node.sid} installs a snapshot at 0x{effect.zxid:x}")
        # the digest of the staged stream, as the server's digest child computes it; for every
        # other zxid none, as when that child failed, and the engine computes the tree's
        return None if effect.zxid & 1 else records_digest(records)

    def _write_snapshot(self, node: Node, effect: WriteSnapshot) -> None:
        """At once, or in the background as the server's child writes it: its file is written
        now and finished some ticks later, unless the server crashes first (the engine skips
        the snapshots due meanwhile, and the start-up removes the ``.tmp`` file)."""
        if node.writing is not None:
            raise Violation(f"server {node.sid} asked for a snapshot at 0x{effect.zxid:x} while writing one at 0x{node.writing[1].zxid:x}")
        node.storage.snapshot_due()
        try:
            writer = SnapshotWriter(node.storage.snap_dir, effect.zxid, fs=node.fs)
            writer.add(effect.image)
        except STORAGE_ERRORS as exc:  # the child could not write it: its exit status says so
            self._expect_fault(node, exc)
            node.engine.snapshot_written(effect.zxid, False, 0.0)
            return
        if self.options.snapshot_ticks_max:
            node.writing = (self.now + self.rng.randint(1, self.options.snapshot_ticks_max), effect, writer)
        else:
            self._snapshot_done(node, effect, writer)

    def _snapshot_done(self, node: Node, effect: WriteSnapshot, writer: SnapshotWriter) -> None:
        node.writing = None
        try:
            writer.finish()
        except STORAGE_ERRORS as exc:  # the child's exit status says it failed
            self._expect_fault(node, exc)
            writer.discard()
            node.engine.snapshot_written(effect.zxid, False, 0.0)
            return
        self.stats["snapshots"] += 1
        node.engine.snapshot_written(effect.zxid, True, 0.0)

    # ----------------------------------------------------------------- what the checkers see
    def _on_applied(self, node: Node, txn: Txn, result: object) -> None:
        self._applied(node, txn)

    def _applied(self, node: Node, txn: Txn) -> None:
        self._track_apply(node, txn, committed=True)

    def _track_apply(self, node: Node, txn: Txn, *, committed: bool) -> None:
        node.tree_chain = self.checker.on_apply(node.sid, node.tree_zxid, node.tree_chain, txn, committed=committed)
        node.tree_zxid = txn.zxid

    @staticmethod
    def _expect_fault(node: Node, exc: Exception) -> None:
        if not node.faulted:
            raise Violation(f"server {node.sid}: its storage failed with no fault injected: {exc}") from exc

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
        if node.engine.awaiting_sync and not node.sync_wanted:
            raise Violation(f"server {node.sid}: Readys wait for a sync of the log that nobody runs")
        if peer.applied != node.engine.applied_once_synced:
            raise Violation(f"server {node.sid}: core applied 0x{peer.applied:x}, tree at 0x{node.tree_zxid:x}"
                            f" (0x{node.engine.applied_once_synced:x} once the log's sync is done)")
        logged = max(node.storage.log.last_zxid, node.tree_zxid)  # after a SNAP: the snapshot, an empty log
        if peer.last_logged != logged:
            raise Violation(f"server {node.sid}: core logged 0x{peer.last_logged:x}, disk at 0x{logged:x}")

