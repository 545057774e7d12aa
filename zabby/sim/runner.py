"""``run(seed)``: one deterministic simulation, a safety phase and then a liveness phase.

Safety phase (``ticks_safety`` ticks): the workload runs while faults are injected —
crashes (some inside a Ready), restarts with the disk kept, connection breaks, partitions
(symmetric or one-way), clock jumps (a burst of ticks on one server) and stalls (a server's
ticks stop, as in a long GC pause), plus rare duplicated or reordered messages.  Every
step is checked by ``checkers``.

Liveness phase: everything heals, crashed servers restart, faults stop.  Within
``ticks_liveness_max`` ticks the cluster must converge: one established leader, every
server serving, at least one new write acknowledged, all trees at the same zxid with equal
digests, every acknowledged write present, and each server's disk recovering to its tree.

Everything random comes from one ``random.Random(seed)`` split into sub-seeds per
component; there is no wall clock and no thread, so a seed replays exactly.
"""

from __future__ import annotations

import copy
import errno
import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from zabby.core.types import ServerState
from zabby.engine import Recovered
from zabby.engine.storage import Storage
from zabby.sim.checkers import Checker, Violation
from zabby.sim.cluster import FLIPPED, TICK_MS, Cluster, Node
from zabby.sim.forge import forge
from zabby.sim.options import SimOptions, swarm
from zabby.sim.workload import Workload

EVENTS_PER_TICK_MAX = 100_000


@dataclass(slots=True)
class Result:
    seed: int
    ok: bool
    error: str = ""
    ticks: int = 0
    options: SimOptions | None = None
    stats: dict[str, int] = field(default_factory=dict)
    reconfig_share: float = 0.0
    forge_share: float = 0.0

    def reproduce(self) -> str:
        share = f" --reconfig {self.reconfig_share}" if self.reconfig_share else ""
        share += f" --forge {self.forge_share}" if self.forge_share else ""
        return f"reproduce: python -m zabby.sim --seed {self.seed}{share}"


class Simulation:
    def __init__(self, options: SimOptions, trace: Callable[[str], None] | None = None) -> None:
        rng = random.Random(options.seed)
        self.options = options
        self.fault_rng = random.Random(rng.getrandbits(64))
        self.checker = Checker(zxid_counter_last=options.zxid_counter_last)
        self.checker.memberships.append((0, frozenset(range(1, options.voter_count + 1))))
        self.cluster = Cluster(options, random.Random(rng.getrandbits(64)), self.checker, trace)
        self.workload = Workload(random.Random(rng.getrandbits(64)), options, self.cluster, self.checker)
        self.partition_until = 0
        self.acked_at_liveness = 0

    # ----------------------------------------------------------------- one tick
    def step(self, *, faults: bool, issue: bool) -> None:
        cluster = self.cluster
        cluster.now += 1
        if faults:
            self._inject_faults()
        self._restart_due()
        self.workload.step(cluster.now, issue=issue)
        self._deliver()
        for sid in sorted(cluster.nodes):
            node = cluster.nodes[sid]
            if node.alive and node.stalled_until <= cluster.now:
                cluster.tick(node)
        self._deliver()

    def _deliver(self) -> None:
        """Deliver what is due.  In a batched round every event is queued into its engine
        first and each engine then works through all of them at once, as the server's peer
        task does with what arrived while it was busy; otherwise each event is worked
        through as it arrives."""
        cluster = self.cluster
        batched = self.fault_rng.random() < self.options.batch_probability
        busy: dict[int, Node] = {}
        for _ in range(EVENTS_PER_TICK_MAX):
            event = cluster.network.pop_due(cluster.now)
            if event is None:
                for sid in sorted(busy):
                    cluster.drain(busy[sid])
                return
            node = cluster.deliver(event)
            if node is not None:
                if batched:
                    busy[node.sid] = node
                else:
                    cluster.drain(node)
        raise Violation("the network does not settle within one tick")

    def _restart_due(self) -> None:
        for sid in sorted(self.cluster.nodes):
            node = self.cluster.nodes[sid]
            if node.disk_full_until and node.disk_full_until <= self.cluster.now:
                node.disk_full_until = 0
                node.fs.full = False
            if not node.alive and node.restart_at <= self.cluster.now:
                self.cluster.restart(node)
            elif node.alive and node.paused_until and node.paused_until <= self.cluster.now:
                node.paused_until = 0
                self.cluster.drain(node)

    def _inject_faults(self) -> None:
        options, rng, cluster = self.options, self.fault_rng, self.cluster
        sids = sorted(cluster.nodes)
        if options.crash_probability and rng.random() < options.crash_probability:
            node = cluster.nodes[rng.choice(sids)]
            if node.alive:
                if rng.random() < options.crash_in_ready_probability:
                    node.crash_armed = True  # lands inside its next Ready
                else:
                    cluster.crash(node)
        if options.clock_jump_probability and rng.random() < options.clock_jump_probability:
            node = cluster.nodes[rng.choice(sids)]
            burst = rng.randint(1, options.clock_jump_ticks_max)
            cluster.log(f"server {node.sid}: clock jumps {burst} ticks")
            node.clock.offset_ms += burst * TICK_MS
            for _ in range(burst):
                cluster.tick(node)
        if options.clock_stall_probability and rng.random() < options.clock_stall_probability:
            node = cluster.nodes[rng.choice(sids)]
            node.stalled_until = cluster.now + rng.randint(1, options.clock_jump_ticks_max)
            cluster.log(f"server {node.sid}: ticks stall until {node.stalled_until}")
        self._partitions(sids)
        if options.forge_probability and rng.random() < options.forge_probability:
            forge(cluster, rng)
        if options.disk_fault_probability and rng.random() < options.disk_fault_probability:
            self._disk_fault(cluster.nodes[rng.choice(sids)])
        if options.bit_flip_probability and rng.random() < options.bit_flip_probability:
            self._flip_bit(cluster.nodes[rng.choice(sids)])

    def _flip_bit(self, node: Node) -> None:
        """A bit of a server's log segment or snapshot flips (silent corruption, found at its
        next recovery), when
        every other server serves with its history whole: one damaged server at a time, as
        a repair needs a quorum of intact ones.  Not where clients reconfigure: a membership
        of two voters has no quorum without the damaged one, and waits for an operator, as
        a real one would.  Not on a standalone server: with nobody to repair it, it refuses
        to start (``tests/sim/test_fs.py``)."""
        cluster = self.cluster
        for each in cluster.nodes.values():
            each.forget_flip_if_gone()
        others = [n for n in cluster.nodes.values() if n is not node]
        is_voter = node.sid <= self.options.voter_count  # no reconfig here: the first membership stays
        if is_voter and self.options.voter_count < 3:
            return  # the others are no quorum of voters without it
        if node.flipped or not node.storage.repairs or self.options.reconfig_probability or any(not n.serving or n.flipped or n.storage.datadir.repairing for n in others):
            return
        files = [p for p in node.fs.paths() if p.name.startswith(("log.", "snapshot.")) and node.fs.durable_size(p)]
        if not files:
            return
        path = self.fault_rng.choice(files)
        offset = node.fs.flip_bit(self.fault_rng, path)
        node.flipped, node.flipped_byte = FLIPPED, (path, offset, node.fs.durable_byte(path, offset))
        cluster.stats["bit_flips"] += 1
        cluster.log(f"server {node.sid}: a bit flips in {path.name} at offset {offset}")

    def _disk_fault(self, node: Node) -> None:
        """The next write or fsync fails with EIO (the server fail-stops), or the disk fills
        up for a while (it refuses writes until space comes back)."""
        if not node.alive:
            return
        rng, cluster = self.fault_rng, self.cluster
        node.disk_faulted = True
        cluster.stats["disk_faults"] += 1
        kind = rng.choice(("write", "fsync", "allocate", "full"))
        if kind == "full":
            node.fs.full = True
            node.disk_full_until = cluster.now + rng.randint(1, 60)
            cluster.log(f"server {node.sid}: the disk is full until {node.disk_full_until}")
        else:
            node.fs.fail_next(kind, errno.ENOSPC if kind == "allocate" else errno.EIO)
            cluster.log(f"server {node.sid}: its next {kind} fails")

    def _partitions(self, sids: list[int]) -> None:
        options, rng, cluster = self.options, self.fault_rng, self.cluster
        if self.partition_until and cluster.now >= self.partition_until:
            self.partition_until = 0
            cluster.network.heal()
            cluster.log("partition heals")
        if self.partition_until or not options.partition_probability or rng.random() >= options.partition_probability:
            return
        if len(sids) < 2:
            return
        side = set(rng.sample(sids, rng.randint(1, len(sids) - 1)))
        symmetric = rng.random() < options.partition_symmetric_probability
        blocked = {(a, b) for a in sids for b in sids if (a in side) != (b in side) and (symmetric or a in side)}
        cluster.network.partition(cluster.now, blocked)
        self.partition_until = cluster.now + rng.randint(1, options.partition_ticks_max)
        cluster.log(f"partition {sorted(side)} | rest ({'symmetric' if symmetric else 'one-way'}) until {self.partition_until}")

    # ----------------------------------------------------------------- phases
    def run(self) -> None:
        for _ in range(self.options.ticks_safety):
            self.step(faults=True, issue=True)
        self._to_liveness()
        deadline = self.cluster.now + self.options.ticks_liveness_max
        quiet_from = self.cluster.now + self.options.ticks_liveness_max // 3
        while self.cluster.now < deadline:
            self.step(faults=False, issue=self.cluster.now < quiet_from or self._acked_since_liveness() == 0)
            if self.cluster.now % 5 == 0 and self._converged():
                self._final_checks()
                return
        raise Violation(f"no convergence within {self.options.ticks_liveness_max} liveness ticks: {self.describe()}")

    def _to_liveness(self) -> None:
        cluster = self.cluster
        cluster.log("--- liveness phase: heal, restart, no more faults")
        self.options = self.options.calm()
        cluster.options = self.options
        cluster.network.options = self.options
        cluster.network.heal()
        self.partition_until = 0
        for sid in sorted(cluster.nodes):
            node = cluster.nodes[sid]
            node.stalled_until = 0
            node.crash_armed = False
            if not node.alive:
                cluster.restart(node)
        self.acked_at_liveness = len(self.checker.acked)

    def _acked_since_liveness(self) -> int:
        return len(self.checker.acked) - self.acked_at_liveness

    def _converged(self) -> bool:
        """One leader; every member of its membership serving at its zxid (servers a
        reconfig left out may stay outside, as ZooKeeper's do)."""
        nodes = list(self.cluster.nodes.values())
        if not self.workload.idle() or self._acked_since_liveness() == 0:
            return False
        leaders = [n for n in nodes if n.soft is not None and n.soft.state == ServerState.LEADING]
        if len(leaders) != 1 or not leaders[0].serving or leaders[0].peer.proposed is not None:
            return False
        leader = leaders[0]
        members = [self.cluster.nodes[sid] for sid in sorted(leader.peer.membership.sids)]
        return all(n.serving and n.tree_zxid == leader.tree_zxid == leader.peer.last_logged for n in members)

    def _final_checks(self) -> None:
        leader = next(n for n in self.cluster.nodes.values() if n.is_leader)
        members = [self.cluster.nodes[sid] for sid in sorted(leader.peer.membership.sids)]
        digests = {n.sid: n.tree.content_hash() for n in members}
        if len(set(digests.values())) != 1:
            raise Violation(f"trees differ at 0x{leader.tree_zxid:x}: {digests}")
        self.checker.check_acked_present(leader.tree_zxid)
        for node in self.cluster.nodes.values():  # members, and others serving with no txn pending
            settled = node.serving and node.peer.last_logged == node.tree_zxid
            if not settled:
                continue
            recovered = _recover(node)
            if recovered.tree.content_hash() == node.tree.content_hash():
                continue
            if not (node.flipped and recovered.durable.repairing):  # a damaged disk must be found so
                raise Violation(f"server {node.sid}: its disk recovers a different tree than it holds")

    def describe(self) -> str:
        parts = []
        for sid in sorted(self.cluster.nodes):
            n = self.cluster.nodes[sid]
            if not n.alive:
                parts.append(f"{sid}:down")
                continue
            soft = n.peer.soft_state()
            parts.append(f"{sid}:{soft.state.value}/{soft.phase.value}/e{soft.epoch}/leader={soft.leader}/"
                         f"tree=0x{n.tree_zxid:x}/log=0x{n.peer.last_logged:x}")  # fmt: skip
        return ", ".join(parts) + f"; clients idle={self.workload.idle()} acked_since={self._acked_since_liveness()}"

    def stats(self) -> dict[str, int]:
        net = self.cluster.network.stats
        out = dict(self.cluster.stats)
        out["snapshots_skipped"] += sum(n.engine.stats.snapshots_skipped for n in self.cluster.nodes.values() if n.alive)  # the crashed ones' at their crash
        out.update(self.workload.stats)
        out.update(sent=net.sent, delivered=net.delivered, dropped=net.dropped, breaks=net.breaks,
                   duplicated=net.duplicated, reordered=net.reordered, applies=self.checker.applies,
                   committed=len(self.checker.committed), ticks=self.cluster.now,
                   memberships=len(self.checker.memberships) - 1)  # fmt: skip
        return out


def _recover(node: Node) -> Recovered:
    """What a restart of ``node`` now would recover: the storage's own recovery, on a copy."""
    storage = Storage(node.config, fs=copy.deepcopy(node.fs))
    try:
        return storage.recover(node.membership or node.config.membership)
    finally:
        storage.close()


def options_for(seed: int, reconfig_share: float = 0.0, forge_share: float = 0.0, **overrides: object) -> SimOptions:
    from dataclasses import replace

    options = swarm(random.Random(seed ^ 0x5EED), seed, reconfig_share, forge_share)
    return replace(options, **overrides) if overrides else options  # type: ignore[arg-type]


def run(seed: int, *, trace: Callable[[str], None] | None = None, reconfig_share: float = 0.0, forge_share: float = 0.0,
        **overrides: object) -> Result:  # fmt: skip
    options = options_for(seed, reconfig_share, forge_share, **overrides)
    sim = Simulation(options, trace)
    try:
        sim.run()
    except Exception as exc:  # noqa: BLE001 -- a Violation, or whatever the core or tree raised: all are findings
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        if not isinstance(exc, Violation):
            detail += "\n" + "".join(traceback.format_tb(exc.__traceback__)[-4:])
        return Result(seed, False, detail, sim.cluster.now, options, sim.stats(), reconfig_share, forge_share)
    return Result(seed, True, "", sim.cluster.now, options, sim.stats(), reconfig_share, forge_share)
