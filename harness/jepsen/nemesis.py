"""The nemesis: a schedule of faults drawn from the run's seed, and the thread that injects
them into a ``Cluster``.

The schedule alternates a quiet stretch and a fault: ``quiet_s`` of calm, then one fault for
about ``fault_s`` (drawn between 0.5x and 1.5x), then the heal, then calm again; the last
fault lasts until the run's duration, when the runner heals everything.  Each fault carries a ``draw``, a number from the seed that picks its targets
when it starts (which server leads is only known then).  At the end of every fault the whole
cluster heals: links pass, stopped servers continue, killed servers restart, disks are fast.

Fault kinds (``KINDS``):

* ``kill-leader`` / ``kill-follower`` / ``kill-random`` / ``kill-majority``: SIGKILL, restart at the heal;
* ``pause-leader`` / ``pause-random``: SIGSTOP, SIGCONT at the heal;
* ``partition-leader``: the leader cut off from everyone, both ways;
* ``partition-halves``: a random minority cut off from the majority;
* ``partition-one-way``: bytes from one server (the leader half the time) to the others are
  held while it still hears them;
* ``partition-blackhole``: the leader's links hold every byte with connections left open;
* ``partition-flapping``: a random minority cut and healed every 0.2-1.5 s;
* ``client-reset``: client connections of a random server reset (RST) every 0.1-1 s,
  mid-request since the workers never pause;
* ``slow-disk``: fsync on the leader, or on a majority, delayed by 200 ms (zabby only: the
  server reads ``ZABBY_DISK_FAULTS``; ZooKeeper has no such hook).

Membership changes (``RECONFIG_KINDS``, ``harness.jepsen.reconfig``): ``reconfig-remove``,
``reconfig-observer``, ``reconfig-replace`` and ``reconfig-partition``, in the groups
``reconfig`` and ``mixed-reconfig`` (every kind above and these); ``mixed`` does not draw
them.  With a ``Reconfigurer``, every heal also puts the original membership back.

Hostile clients (``HOSTILE_KINDS``, the attacks of ``harness.jepsen.hostile``): ``reset-storm``,
``duplicate-xids``, ``decreasing-xids``, ``never-read``, ``slowloris``, ``oversized-frames``,
``connection-flood`` and ``watch-hoard``, in the group ``clients`` with ``client-reset``.  They
are not faults of the schedule: a misbehaving client does not wait for a calm stretch, so a
``HostileLoad`` thread (``harness.jepsen.hostile_load``) runs them one after another, beside the
schedule, for the whole run.
Groups and kinds combine: ``mixed,clients`` is every fault of ``mixed`` plus the attacks.
"""

from __future__ import annotations

import random
import threading
from typing import cast
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from harness.jepsen.cluster import Cluster
from harness.jepsen.history import FAIL, OK, History
from harness.jepsen.attacks import ATTACKS
from harness.local.netproxy import Direction, Mode
from harness.jepsen.reconfig import RECONFIG_KINDS, Reconfigurer

KINDS = (
    "kill-leader", "kill-follower", "kill-random", "kill-majority", "pause-leader", "pause-random",
    "partition-leader", "partition-halves", "partition-one-way", "partition-blackhole", "partition-flapping",
    "client-reset", "slow-disk",
)  # fmt: skip
HOSTILE_KINDS = tuple(ATTACKS)
GROUPS = {
    "mixed": KINDS,
    "kill": tuple(k for k in KINDS if k.startswith("kill-")),
    "pause": tuple(k for k in KINDS if k.startswith("pause-")),
    "partition": tuple(k for k in KINDS if k.startswith("partition-")),
    "clients": HOSTILE_KINDS + ("client-reset",),
    "disk": ("slow-disk",),
    "none": (),
    "reconfig": RECONFIG_KINDS,
    "mixed-reconfig": KINDS + RECONFIG_KINDS,
}
ALL_KINDS = KINDS + RECONFIG_KINDS + HOSTILE_KINDS
ZABBY_ONLY = frozenset({"slow-disk"})
SLOW_FSYNC_MS = 200
FAULTS_MAX = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    start_s: float
    duration_s: float
    kind: str
    draw: int  # seeds the choice of targets when the fault starts


def kinds_for(nemesis: str) -> tuple[str, ...]:
    """``nemesis``: groups and kinds, comma-separated (``mixed``, ``mixed,clients``,
    ``kill-leader,pause-random``), each kind once, in the order named.  The schedule draws from
    all of them on every system, so one seed means one schedule on zabby and on ZooKeeper; a
    kind a system lacks (``supported``) is then a calm stretch there."""
    names: list[str] = []
    unknown: list[str] = []
    for part in filter(None, (part.strip() for part in nemesis.split(","))):
        expanded = GROUPS.get(part, (part,) if part in ALL_KINDS else None)
        if expanded is None:
            unknown.append(part)
        else:
            names.extend(name for name in expanded if name not in names)
    if unknown:
        raise ValueError(f"unknown nemesis {unknown}: use groups {sorted(GROUPS)} and/or kinds {list(ALL_KINDS)}, comma-separated")
    return tuple(names)


def hostile_kinds(kinds: tuple[str, ...]) -> tuple[str, ...]:
    """The attacks among ``kinds``: what a ``HostileLoad`` runs (the schedule leaves them out)."""
    return tuple(kind for kind in kinds if kind in HOSTILE_KINDS)


def reconfigures(kinds: tuple[str, ...]) -> bool:
    """Whether the servers must accept reconfig (reconfigEnabled, a superuser)."""
    return any(kind in RECONFIG_KINDS for kind in kinds)


def spares_for(kinds: tuple[str, ...]) -> int:
    """Spare servers a schedule of ``kinds`` needs (one, to replace a member with)."""
    return 1 if "reconfig-replace" in kinds else 0


def supported(kind: str, system: str) -> bool:
    """Whether ``system`` has a hook for a fault ``kind`` (in a mixed ensemble, its zabby
    servers have: a slow disk there slows whichever of them it lands on)."""
    return system != "zookeeper" or kind not in ZABBY_ONLY


def schedule(seed: int, duration_s: float, kinds: tuple[str, ...], fault_s: float, quiet_s: float) -> list[Fault]:
    """Faults from the seed.  The last one lasts until ``duration_s``, so the run's final heal
    always ends a fault (and the convergence measured from it means something).  Hostile
    clients are left out (a ``HostileLoad`` runs them beside the schedule), so ``mixed,clients``
    has the schedule of ``mixed``."""
    kinds = tuple(kind for kind in kinds if kind not in HOSTILE_KINDS)
    rng = random.Random(seed)
    faults: list[Fault] = []
    at = quiet_s
    while kinds and len(faults) < FAULTS_MAX and at + 0.5 * fault_s <= duration_s:
        length = rng.uniform(0.5 * fault_s, 1.5 * fault_s)
        faults.append(Fault(start_s=at, duration_s=length, kind=rng.choice(kinds), draw=rng.getrandbits(32)))
        at += length + rng.uniform(0.5 * quiet_s, 1.5 * quiet_s)
    if faults:
        last = faults[-1]
        faults[-1] = Fault(start_s=last.start_s, duration_s=duration_s - last.start_s, kind=last.kind, draw=last.draw)
    return faults


class Nemesis(threading.Thread):
    """Runs a schedule against a cluster, recording every fault in the history."""

    def __init__(self, cluster: Cluster, history: History, faults: list[Fault], stop: threading.Event, reconfigurer: Reconfigurer | None = None) -> None:
        super().__init__(name="nemesis", daemon=True)
        self.cluster, self.history, self.faults, self.stop_event = cluster, history, faults, stop
        self.reconfigurer = reconfigurer
        self.injected: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()  # kinds this system has no hook for
        self.error = ""

    def run(self) -> None:
        try:
            for fault in self.faults:
                if self.stop_event.wait(max(0.0, fault.start_s - self.history.now_s())):
                    return
                self._inject(fault)
        except Exception as exc:  # noqa: BLE001 - recorded in the result; the runner heals
            self.error = f"{type(exc).__name__}: {exc}"

    def _inject(self, fault: Fault) -> None:
        if not supported(fault.kind, self.cluster.spec.system):
            self.skipped[fault.kind] += 1
            self.history.complete(self.history.invoke("nemesis", fault.kind, "", None), FAIL, None, f"not supported on {self.cluster.spec.system}")
            self.stop_event.wait(max(0.0, fault.start_s + fault.duration_s - self.history.now_s()))
            return
        rng = random.Random(fault.draw)
        op_id = self.history.invoke("nemesis", fault.kind, "", None)
        try:
            target = self._reconfig(fault.kind, rng) if fault.kind in RECONFIG_KINDS else START[fault.kind](self.cluster, rng)
            self.injected[fault.kind] += 1
            self.history.complete(op_id, OK, target)
            ends_at = self.history.now_s() + fault.duration_s
            if fault.kind == "partition-flapping":
                self._flap(cast("list[int]", target), rng, ends_at)
            elif fault.kind == "client-reset":
                self._reset_clients(cast(int, target), rng, ends_at)
            else:
                self.stop_event.wait(max(0.0, ends_at - self.history.now_s()))
        except Exception as exc:  # noqa: BLE001 - a fault that could not start is recorded
            self.history.complete(op_id, FAIL, None, f"{type(exc).__name__}: {exc}")
        finally:
            heal_id = self.history.invoke("nemesis", "heal", "", None)
            self.cluster.heal()
            restored = self.reconfigurer.restore() if self.reconfigurer is not None else True
            self.cluster.heal()  # (a server the restore started or stopped is as it should be)
            self.history.complete(heal_id, OK if restored else FAIL, None, "" if restored else "the original membership is not back")

    def _reconfig(self, kind: str, rng: random.Random) -> object:
        if self.reconfigurer is None:
            raise RuntimeError("no reconfigurer: the servers do not accept reconfig")
        if kind != "reconfig-partition":
            return self.reconfigurer.fault(kind, rng)
        cut = _halves(self.cluster, rng) if rng.random() < 0.5 else [_isolate_leader(self.cluster, rng, Mode.CUT)]
        self.stop_event.wait(rng.uniform(0.2, 2.0))  # the servers notice the cut, or not yet
        try:
            return {"cut": cut, **self.reconfigurer.fault(kind, rng)}
        except Exception as exc:  # noqa: BLE001 - no quorum on the admin's side: the cut still counts
            return {"cut": cut, "reconfig": f"not attempted: {type(exc).__name__}: {exc}"[:300]}

    def _flap(self, group: list[int], rng: random.Random, ends_at: float) -> None:
        cut = True
        while not self.stop_event.wait(rng.uniform(0.2, 1.5)) and self.history.now_s() < ends_at:
            cut = not cut
            isolate(self.cluster, set(group), Mode.CUT if cut else Mode.PASS)

    def _reset_clients(self, sid: int, rng: random.Random, ends_at: float) -> None:
        while not self.stop_event.wait(rng.uniform(0.1, 1.0)) and self.history.now_s() < ends_at:
            self.cluster.client_proxies[sid].reset_connections()


# -- network helpers --------------------------------------------------------------------------


def isolate(cluster: Cluster, group: set[int], mode: Mode) -> None:
    """Every link between ``group`` and the rest, both ways, to ``mode``."""
    for (source, target), pair in cluster.links.items():
        if (source in group) != (target in group):
            for proxy in pair:
                proxy.set_mode(mode)


def one_way(cluster: Cluster, senders: set[int], receivers: set[int]) -> None:
    """Bytes from ``senders`` to ``receivers`` are held; the other way passes."""
    for (source, target), pair in cluster.links.items():
        for proxy in pair:
            if source in senders and target in receivers:
                proxy.hold(Direction.FORWARD)
            elif source in receivers and target in senders:
                proxy.hold(Direction.BACKWARD)


# -- fault starts: each returns its target (JSON-able) for the history -----------------------


def _leader_or_any(cluster: Cluster, rng: random.Random) -> int:
    leader = cluster.leader()
    return leader if leader is not None else rng.choice(sorted(cluster.servers))


def _follower(cluster: Cluster, rng: random.Random) -> int:
    leader = cluster.leader()
    return rng.choice([sid for sid in sorted(cluster.servers) if sid != leader])


def _minority(cluster: Cluster, rng: random.Random) -> list[int]:
    sids = sorted(cluster.servers)
    return sorted(rng.sample(sids, rng.randint(1, (len(sids) - 1) // 2)))


def _kill(cluster: Cluster, sids: list[int]) -> list[int]:
    for sid in sids:
        cluster.kill(sid)
    return sids


def _pause(cluster: Cluster, sid: int) -> int:
    cluster.pause(sid)
    return sid


def _isolate_leader(cluster: Cluster, rng: random.Random, mode: Mode) -> int:
    leader = _leader_or_any(cluster, rng)
    isolate(cluster, {leader}, mode)
    return leader


def _halves(cluster: Cluster, rng: random.Random) -> list[int]:
    group = _minority(cluster, rng)
    isolate(cluster, set(group), Mode.CUT)
    return group


def _one_way(cluster: Cluster, rng: random.Random) -> list[int]:
    sender = _leader_or_any(cluster, rng) if rng.random() < 0.5 else rng.choice(sorted(cluster.servers))
    one_way(cluster, {sender}, set(cluster.servers) - {sender})
    return [sender]


def _flapping(cluster: Cluster, rng: random.Random) -> list[int]:
    return _halves(cluster, rng)


def _kill_majority(cluster: Cluster, rng: random.Random) -> list[int]:
    sids = sorted(cluster.servers)
    return _kill(cluster, sorted(rng.sample(sids, len(sids) // 2 + 1)))


def _slow_disk(cluster: Cluster, rng: random.Random) -> list[int]:
    sids = sorted(cluster.servers)
    targets = [_leader_or_any(cluster, rng)] if rng.random() < 0.5 else sorted(rng.sample(sids, len(sids) // 2 + 1))
    for sid in targets:
        cluster.servers[sid].set_slow_disk(SLOW_FSYNC_MS)
    return targets


START: dict[str, Callable[[Cluster, random.Random], object]] = {
    "kill-leader": lambda c, r: _kill(c, [_leader_or_any(c, r)]),
    "kill-follower": lambda c, r: _kill(c, [_follower(c, r)]),
    "kill-random": lambda c, r: _kill(c, [r.choice(sorted(c.servers))]),
    "kill-majority": _kill_majority,
    "pause-leader": lambda c, r: _pause(c, _leader_or_any(c, r)),
    "pause-random": lambda c, r: _pause(c, r.choice(sorted(c.servers))),
    "partition-leader": lambda c, r: _isolate_leader(c, r, Mode.CUT),
    "partition-blackhole": lambda c, r: _isolate_leader(c, r, Mode.BLACKHOLE),
    "partition-halves": _halves,
    "partition-one-way": _one_way,
    "partition-flapping": _flapping,
    "client-reset": lambda c, r: r.choice(sorted(c.servers)),
    "slow-disk": _slow_disk,
}
assert set(START) == set(KINDS)
