"""The reconfig nemesis: membership changes through ZooKeeper's ``reconfig``, and their undoing.

Kinds (``RECONFIG_KINDS``), each planned from the current membership when the fault starts:

* ``reconfig-remove``: a voter (the leader a third of the time) is reconfigured out; half the
  time it is also stopped once the change committed, else it keeps running outside the
  ensemble;
* ``reconfig-observer``: a voter (the leader a third of the time) is demoted to observer;
* ``reconfig-replace``: a spare server (an id beyond the ensemble's) is started with the
  current members plus itself, joins as a participant while a voter (the leader a third of
  the time) leaves in the same reconfig; the one that left is stopped;
* ``reconfig-partition``: a random minority (or the leader) is cut off, and during that a
  voter is reconfigured out (the change completes on the side holding both quorums, or
  not at all).

Only voters the membership can spare are touched: at least three voters must remain before
a removal or a demotion, so the rest still form a quorum.

Every heal (``Reconfigurer.restore``) puts the original membership back, from what the
servers report rather than from what the nemesis believes happened (a reconfig whose
outcome is unknown may or may not have committed): the original voters that are missing or
observers join as participants (a stopped one is first restarted with a zoo.cfg listing the
current members plus itself), the spares leave and are stopped.  It retries until the
servers report the original voters, or its deadline passes.

The reconfigs go through an admin client of their own, connected straight to the servers'
client ports (the servers run with ``skipACL=yes``, so its session may reconfigure); each
one is recorded in the history (process ``nemesis``, f ``reconfig``) as ok, fail (the
server refused: it did not happen) or unknown.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from harness.jepsen import clients
from harness.jepsen.cluster import SERVING_MODES, Cluster
from harness.jepsen.history import FAIL, OK, UNKNOWN, History
from zabby.membership import Membership

RECONFIG_KINDS = ("reconfig-remove", "reconfig-observer", "reconfig-replace", "reconfig-partition")
CONFIG_PATH = "/zookeeper/config"
VOTERS_MIN = 3  # a removal or a demotion leaves at least two voters
LEADER_SHARE = 1 / 3
STOP_SHARE = 1 / 2
REQUEST_TIMEOUT_S = 10.0
SESSION_TIMEOUT_S = 10.0
JOINER_WAIT_S = 10.0
RESTORE_S = 60.0
RETRY_PAUSE_S = 1.0
# refusals: the reconfig certainly did not happen
DEFINITE = frozenset({"NewConfigNoQuorumError", "ReconfigInProcessError", "ReconfigDisabledError", "UnimplementedError"}) | clients.DEFINITE_ERRORS


class NotPossible(Exception):
    """The membership cannot take this change now (too few voters, no spare)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """One reconfig and what goes with it."""

    joining: tuple[int, ...] = ()  # join (or are promoted) as participants
    observers: tuple[int, ...] = ()  # join (or are demoted) as observers
    leaving: tuple[int, ...] = ()
    start: tuple[int, ...] = ()  # (re)started with the current members plus itself, before the reconfig
    stop: tuple[int, ...] = ()  # stopped once the reconfig committed

    @property
    def empty(self) -> bool:
        return not (self.joining or self.observers or self.leaving)

    def describe(self) -> dict[str, list[int]]:
        return {key: list(value) for key, value in asdict(self).items() if value}


def roles(membership: Membership) -> dict[int, str]:
    return {m.sid: "observer" if m.observer else "participant" for m in membership.members}


def pick_voter(voters: list[int], leader: int | None, rng: random.Random) -> int:
    """The leader a third of the time (when it is a voter), else any voter."""
    if leader in voters and rng.random() < LEADER_SHARE:
        return leader
    return rng.choice(sorted(voters))


def plan_fault(kind: str, current: dict[int, str], leader: int | None, spares: list[int], rng: random.Random) -> Change:
    """The change a fault of ``kind`` makes to the membership ``current`` (sid -> role).

    Raises:
        NotPossible: fewer than VOTERS_MIN voters, or no spare for a replacement.
    """
    voters = sorted(sid for sid, role in current.items() if role == "participant")
    if len(voters) < VOTERS_MIN:
        raise NotPossible(f"only {len(voters)} voters: none can be spared")
    target = pick_voter(voters, leader, rng)
    if kind == "reconfig-remove":
        return Change(leaving=(target,), stop=(target,) if rng.random() < STOP_SHARE else ())
    if kind == "reconfig-observer":
        return Change(observers=(target,))
    if kind == "reconfig-replace":
        free = sorted(sid for sid in spares if sid not in current)
        if not free:
            raise NotPossible("no spare server")
        spare = rng.choice(free)
        return Change(start=(spare,), joining=(spare,), leaving=(target,), stop=(target,))
    if kind == "reconfig-partition":
        return Change(leaving=(target,))
    raise ValueError(f"not a reconfig kind: {kind}")


def plan_restore(current: dict[int, str], original: tuple[int, ...], stopped: set[int]) -> Change:
    """The change that brings ``current`` back to ``original`` (all participants): missing
    or demoted originals join as participants (stopped ones are started first), the others
    leave and are stopped.  Empty when nothing differs."""
    joining = tuple(sorted(sid for sid in original if current.get(sid) != "participant"))
    leaving = tuple(sorted(sid for sid in current if sid not in original))
    start = tuple(sid for sid in joining if sid not in current and sid in stopped)
    return Change(joining=joining, leaving=leaving, start=start, stop=leaving)


def applied(change: Change, current: dict[int, str]) -> bool:
    """Whether ``current`` shows ``change`` done."""
    return (all(current.get(sid) == "participant" for sid in change.joining)
            and all(current.get(sid) == "observer" for sid in change.observers)
            and not any(sid in current for sid in change.leaving))  # fmt: skip


class Reconfigurer:
    """Makes and undoes membership changes on a cluster, recording each reconfig."""

    def __init__(self, cluster: Cluster, history: History, client_kind: str) -> None:
        self.cluster, self.history, self.client_kind = cluster, history, client_kind
        self.outcomes: Counter[str] = Counter()
        self.restore_failures = 0
        self.last_error = ""  # why the last read failed (reported when a restore gives up)
        self._client: Any = None
        self._lock = threading.RLock()  # the nemesis and the runner's final heal

    # -- the admin client ----------------------------------------------------------------------

    def _admin(self) -> Any:
        if self._client is None:
            hosts = ",".join(self.cluster.direct_hosts(sid) for sid in sorted(self.cluster.every))
            self._client = clients.open_client(self.client_kind, hosts, SESSION_TIMEOUT_S, REQUEST_TIMEOUT_S)
        return self._client

    def _drop_admin(self) -> None:
        if self._client is not None:
            clients.close_quietly(self._client)
            self._client = None

    def close(self) -> None:
        with self._lock:
            self._drop_admin()

    def read(self) -> Membership:
        """The membership a server reports after a sync."""
        client = self._admin()
        try:
            clients.call(client.sync_async, "/", timeout_s=REQUEST_TIMEOUT_S)
            data, _ = clients.call(client.get_async, CONFIG_PATH, timeout_s=REQUEST_TIMEOUT_S)
        except Exception:
            self._drop_admin()
            raise
        return Membership.parse(data.decode())

    def _lines(self, change: Change) -> list[str]:
        every = self.cluster.every
        return [every[sid].member_spec(client=True) for sid in change.joining] + [every[sid].member_spec(observer=True, client=True) for sid in change.observers]

    def apply(self, change: Change, current: Membership) -> str:
        """Start who must start, reconfigure, stop who must stop; the reconfig's outcome."""
        for sid in change.start:
            members = [f"server.{m.sid}={m.spec()}" for m in current.members if m.sid != sid]
            self.cluster.rejoin(sid, [*members, self.cluster.every[sid].member_spec()])
        self._wait_serving(change.start)
        joining, leaving = ",".join(self._lines(change)), ",".join(str(sid) for sid in change.leaving)
        op_id = self.history.invoke("nemesis", "reconfig", "", {"joining": joining, "leaving": leaving})
        try:
            data, _ = clients.call(self._admin().reconfig_async, joining or None, leaving or None, None, -1, timeout_s=REQUEST_TIMEOUT_S)
            status = OK
            self.history.complete(op_id, OK, f"version {Membership.parse(data.decode()).version:x}")
        except Exception as exc:  # noqa: BLE001 - every outcome is recorded
            name = type(exc).__name__
            status = FAIL if name in DEFINITE else UNKNOWN
            self.history.complete(op_id, status, None, f"{name}: {exc}"[:300])
            if status == UNKNOWN:
                self._drop_admin()
        self.outcomes[status] += 1
        if status != FAIL and change.stop:
            try:
                done = status == OK or applied(change, roles(self.read()))
            except Exception:  # noqa: BLE001 - unknown stays unknown: the restore will see
                done = False
            if done:
                for sid in change.stop:
                    self.cluster.remove(sid)
        return status

    def _wait_serving(self, sids: tuple[int, ...]) -> None:
        deadline = time.monotonic() + JOINER_WAIT_S
        while sids and time.monotonic() < deadline:
            if all(self.cluster.every[sid].mode() in SERVING_MODES for sid in sids):
                return
            time.sleep(0.2)

    # -- faults and heals ----------------------------------------------------------------------

    def fault(self, kind: str, rng: random.Random) -> dict[str, Any]:
        """Plan and make the change of ``kind``; what was planned and how it went."""
        with self._lock:
            current = self.read()
            change = plan_fault(kind, roles(current), self.cluster.leader(), sorted(self.cluster.spares), rng)
            status = self.apply(change, current)
            return {**change.describe(), "reconfig": status}

    def restore(self, within_s: float = RESTORE_S) -> bool:
        """Back to the original voters (see the module's doc); whether the servers say so."""
        with self._lock:
            deadline = time.monotonic() + within_s
            while time.monotonic() < deadline:
                try:
                    current = self.read()
                except Exception as exc:  # noqa: BLE001 - no quorum yet, a server restarting: again
                    self.last_error = f"{type(exc).__name__}: {exc}"[:300]
                    time.sleep(RETRY_PAUSE_S)
                    continue
                stopped = {sid for sid, server in self.cluster.every.items() if server.removed}
                change = plan_restore(roles(current), self.cluster.original, stopped)
                if change.empty:
                    for sid in sorted(self.cluster.servers):
                        if sid not in self.cluster.original:
                            self.cluster.retire(sid)
                    return True
                if self.apply(change, current) != OK:
                    time.sleep(RETRY_PAUSE_S)
            self.restore_failures += 1
            return False
