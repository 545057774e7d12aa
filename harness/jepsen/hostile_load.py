"""The ``clients`` family of the fault harness: hostile clients one after another, beside the
workload and the schedule's faults, for the whole run (``HostileLoad``), and a well-behaved
client whose latencies are the run's measure of what they cost everyone else
(``HostileSide``).  The attacks themselves are ``harness.jepsen.hostile``'s; which kinds a run
has, ``harness.jepsen.nemesis`` (``kinds_for``, ``hostile_kinds``)."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from harness.jepsen.cluster import Cluster
from harness.jepsen.history import FAIL, OK, History
from harness.jepsen import amplify
from harness.jepsen.attacks import ATTACKS
from harness.jepsen.hostile import Address, Bystander, Outcome, attack_from
from harness.jepsen.nemesis import HOSTILE_KINDS, hostile_kinds

BYSTANDER_SID = 1  # the well-behaved client's server: a follower at the start (the election favors the highest id)
HOSTILE_JOIN_S = 30.0

ATTACKER_HOST = "127.0.0.2"  # the attacks' source address: their maxClientCnxns is not the harness's (127.0.0.1)
CALM_S = (0.5, 2.0)  # between two attacks (a flood's connections take a moment to leave the per-IP count)
NEVER_READ_BYTES = 512 * 1024
XIDS_WAIT_S = 5.0
# Each attack's bounds, drawn from the plan's seed: about 1-5 s each against a 3-server cluster
# on a 2-core machine (1,000 resets take 0.2 s while the accept backlog lasts, 5,000 take 3.8 s;
# 1,000 oversized frames 4.3 s; a 100k-watch setWatches 1.5 s).
ATTACK_BOUNDS: dict[str, Callable[[random.Random], dict[str, Any]]] = {
    "reset-storm": lambda r: {"count": r.randint(1000, 4000)},
    "duplicate-xids": lambda r: {"count": 1001, "wait_s": XIDS_WAIT_S},
    "decreasing-xids": lambda r: {"count": 1001, "wait_s": XIDS_WAIT_S},
    "never-read": lambda r: {"clients": r.randint(4, 8), "data_bytes": NEVER_READ_BYTES, "requests": 100, "hold_s": round(r.uniform(2.0, 4.0), 2)},
    "slowloris": lambda r: {"connections": r.randint(10, 20), "hold_s": round(r.uniform(2.0, 4.0), 2)},
    "oversized-frames": lambda r: {"count": r.randint(200, 800)},
    "connection-flood": lambda r: {"connections": 100, "hold_s": 2.0},
    "watch-hoard": lambda r: {"watches": 100_000, "hold_s": round(r.uniform(1.0, 2.0), 2)},
    # the amplifications (harness.jepsen.amplify), near their findings' sizes
    "auth-expansion": lambda r: {"ids": r.randint(100, 1_200), "creates": r.randint(1_000, 5_000)},
    "auth-flood": lambda r: {"count": r.randint(5_000, 20_000)},
    "quota-measures": lambda r: {"nodes": r.randint(500, 2_000), "measures": r.randint(100, 2_000)},
    "ip-acl-checks": lambda r: {"entries": r.choice((200, 30_000)), "reads": r.randint(50, 200), "watchers": r.randint(10, 50)},
    "acl-churn": lambda r: {"rounds": r.randint(10, 50), "entries": r.choice((256, 30_000))},
    "acl-bytes": lambda r: {"creates": r.randint(5, 20), "acl_bytes_each": r.randint(10_000, 530_000)},
    "history-flood": lambda r: {"multis": r.randint(20, 200), "ops": r.randint(500, 5_000)},
    "resume-scans": lambda r: {"resumes": r.randint(50, 200)},
    "zxid-waits": lambda r: {"connections": r.randint(5, 20), "waits": r.randint(200, 2_000)},
    "ephemeral-close": lambda r: {"count": r.randint(200, 2_000), "path_bytes": r.randint(100, 1_000)},
    "session-churn": lambda r: {"sessions": r.randint(500, 5_000)},
    "watch-storm": lambda r: {"watchers": r.randint(10, 50), "ops": r.randint(500, 5_000)},
    "tree-fill": lambda r: {"znodes": r.randint(1_000, 20_000), "data_bytes": r.randint(0, 1_000), "fresh_acls": r.randint(0, 1)},
    "bad-ops": lambda r: {"connections": r.randint(50, 200)},
    "multi-flood": lambda r: {"connections": r.randint(10, 50), "ops": r.randint(500, 5_000)},
    "set-watches-flood": lambda r: {"sessions": r.randint(2, 8), "paths": r.randint(2_000, 20_000)},
}
OUTCOME_COUNTS = ("connections", "refused", "closed_by_server", "replies")  # an Outcome's counts, summed per kind
UNSTOPPABLE = frozenset({"duplicate-xids", "decreasing-xids"}) | set(amplify.ATTACKS)  # bounded by their sizes; they take no stop
assert set(ATTACK_BOUNDS) == set(HOSTILE_KINDS)


@dataclass(frozen=True, slots=True, kw_only=True)
class Attack:
    kind: str
    target: int  # a server id: the attack goes to its own client port
    args: dict[str, Any]  # the attack function's bounds (``ATTACK_BOUNDS``)
    calm_s: float  # before it starts


def hostile_plan(seed: int, kinds: Sequence[str], targets: Sequence[int]) -> Iterator[Attack]:
    """The attacks of a run, from its seed, without end (the run's heal stops them): a kind
    among ``kinds``' hostile ones, a target among ``targets``, bounds, a calm before it."""
    rng = random.Random(seed)
    hostile = hostile_kinds(tuple(kinds))
    while hostile and targets:
        kind = rng.choice(hostile)
        target = rng.choice(list(targets))
        calm_s = round(rng.uniform(*CALM_S), 2)
        yield Attack(kind=kind, target=target, args=ATTACK_BOUNDS[kind](rng), calm_s=calm_s)


def direct_address(cluster: Cluster, sid: int) -> Address:
    """Server ``sid``'s own client port, not its proxy's."""
    host, port = cluster.direct_hosts(sid).rsplit(":", 1)
    return host, int(port)


def outcome_summary(outcome: Outcome) -> dict[str, Any]:
    """An attack's ``Outcome`` as the history and the result hold it (JSON-able)."""
    summary = asdict(outcome)
    summary.pop("attack")
    summary["errors"] = {str(code): count for code, count in outcome.errors.items()}
    summary["elapsed_s"] = round(outcome.elapsed_s, 3)
    return summary


class HostileLoad(threading.Thread):
    """Hostile clients (``harness.jepsen.hostile``) one after another against the servers' own
    client ports, from ``source``, until ``stop``: the ``clients`` family.  It runs beside the
    schedule's faults, so an attack may find its target killed, stopped or cut off; whatever it
    sees, or raises, is recorded in the history (process ``nemesis``, op the attack's kind), and
    the next attack follows.  ``stop`` ends the attack under way too (most take it; the xid
    pipelines end within ``XIDS_WAIT_S``)."""

    def __init__(self, cluster: Cluster, history: History, plan: Iterable[Attack], stop: threading.Event, source: str = ATTACKER_HOST) -> None:
        super().__init__(name="hostile", daemon=True)
        self.cluster, self.history, self.plan, self.stop_event, self.source = cluster, history, plan, stop, source
        self.made: Counter[str] = Counter()  # attacks that ran to their end (refused connections included)
        self.raised: Counter[str] = Counter()  # attacks that ended in an exception (their target down, say)
        self.totals: dict[str, Counter[str]] = {}  # per kind: connections, refused, closed_by_server, replies
        self.error = ""

    def run(self) -> None:
        attack_from(self.source)
        try:
            for attack in self.plan:
                if self.stop_event.wait(attack.calm_s):
                    return
                self._launch(attack)
        except Exception as exc:  # noqa: BLE001 - recorded in the result
            self.error = f"{type(exc).__name__}: {exc}"

    def _launch(self, attack: Attack) -> None:
        op_id = self.history.invoke("nemesis", attack.kind, "", {"target": attack.target, **attack.args})
        stop = {} if attack.kind in UNSTOPPABLE else {"stop": self.stop_event}
        try:
            outcome = ATTACKS[attack.kind](direct_address(self.cluster, attack.target), **attack.args, **stop)
        except Exception as exc:  # noqa: BLE001 - an attack on a server that is down (or stopped) may raise
            self.raised[attack.kind] += 1
            self.history.complete(op_id, FAIL, {"target": attack.target}, f"{type(exc).__name__}: {exc}"[:300])
            return
        self.made[attack.kind] += 1
        summary = outcome_summary(outcome)
        self.totals.setdefault(attack.kind, Counter()).update({key: summary[key] for key in OUTCOME_COUNTS})
        self.history.complete(op_id, OK, {"target": attack.target, **summary})

    def report(self) -> dict[str, dict[str, int]]:
        """Per kind: attacks made and raised, and their outcomes summed (for the result)."""
        kinds = sorted(set(self.made) | set(self.raised))
        return {kind: {"made": self.made[kind], "raised": self.raised[kind], **{key: self.totals.get(kind, Counter())[key] for key in OUTCOME_COUNTS}} for kind in kinds}



class HostileSide:
    """The ``clients`` family's side of a run, from the start of the workload to the heal: the
    attacks (``HostileLoad``) and a well-behaved client (``Bystander``, in a process of its own,
    so the harness's threads do not count in its latencies) on server ``BYSTANDER_SID``'s own
    port.  Its figures are the run's measure of what the attacks, and the faults beside them,
    cost everyone else."""

    def __init__(self, cluster: Cluster, history: History, kinds: tuple[str, ...], seed: int, stop: threading.Event) -> None:
        self.load = HostileLoad(cluster, history, hostile_plan(seed, kinds, cluster.original), stop)
        self.bystander = Bystander(direct_address(cluster, BYSTANDER_SID))
        self.figures: dict[str, Any] = {}
        self.started = self.stopped = False

    def start(self) -> None:
        self.bystander.start(ready_s=None)  # its server may be down at any moment of a run
        self.started = True
        self.load.start()

    def stop(self, notes: list[str]) -> None:
        """After the heal: the attack under way ends, the bystander reports.  Safe to call twice."""
        if self.stopped or not self.started:
            return
        self.stopped = True
        self.load.stop_event.set()
        if self.load.ident is not None:  # (started)
            self.load.join(HOSTILE_JOIN_S)
        if self.load.is_alive():
            notes.append(f"the hostile load was still in an attack {HOSTILE_JOIN_S:g}s after the stop (left behind)")
        try:
            figures = asdict(self.bystander.stop())
        except Exception as exc:  # noqa: BLE001 - reported as the run's failure
            self.figures = {"server": BYSTANDER_SID, "error": f"{type(exc).__name__}: {exc}"}
            return
        self.figures = {"server": BYSTANDER_SID, **{key: round(value, 1) if isinstance(value, float) else value for key, value in figures.items()}}
