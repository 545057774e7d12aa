"""The Java leg on three servers: reconfig and getConfig through ZooKeeper's own Java client
(``ZooKeeperAdmin``), on a ZooKeeper 3.8 ensemble and on a zabby ensemble, compared.

A standalone server refuses every reconfig, so the seeded runs only show that refusal; here a
fixed script removes a follower, adds a member and removes it again, and tries what must fail
(a stale ``fromConfig``, a membership without quorum, bad specs), with a getConfig watch set
throughout.  The session talks to a follower ("the connected server").

Servers have other numbers and ports on the two systems (whichever was elected leads), so a
configuration's text is compared by role: each server's number and ports are replaced by its
role (``L`` the leader, ``C`` the connected follower, ``V`` the follower the script removes),
``version=`` by ``V``, and its lines are sorted.

One known difference: ZooKeeper gives a static configuration, at the first leader's
establishment, the version of that leader's NEWLEADER zxid (ZOOKEEPER-1783); zabby keeps it
at 0 until the first reconfig.  Both set ``/zookeeper/config``'s mzxid to the version its text
names, so a Stat whose mzxid is its text's version is compared with mzxid and mtime as 0, and
its dataLength as whether it is the text's length: what is compared is those rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.differential.compare import Normalizer, first_difference
from harness.differential.java_client import JavaExecutor
from harness.differential.model import Op, Outcome, Stat
from harness.jepsen.cluster import Cluster, ClusterSpec
from zabby.membership import Membership

ROOT = "/reconfig-leg"
ABSENT = "server.9=127.0.0.1:1:2;127.0.0.1:3"  # a member that never runs


def script(roles: dict[str, int]) -> list[Op]:
    """The ops, for servers with ``roles`` (role → server number)."""
    victim, connected, leader = roles["V"], roles["C"], roles["L"]
    return [
        Op("a", "get_config", (True,)),
        Op("a", "reconfig", (None, str(victim), None, -1)),  # a follower leaves
        Op("a", "get_config", (True,)),
        Op("a", "reconfig", (None, str(victim), None, -1)),  # no longer a member: no change
        Op("a", "reconfig", (ABSENT, None, None, -1)),  # a member joins (quorum: the two running)
        Op("a", "get_config", (True,)),
        Op("a", "reconfig", (None, f"{connected},{leader}", None, -1)),  # only the absent one would be left
        Op("a", "reconfig", (None, "9", None, 1)),  # a stale fromConfig
        Op("a", "reconfig", (None, "9", None, -1)),  # it leaves again
        Op("a", "reconfig", ("server.x=127.0.0.1:1:2", None, None, -1)),
        Op("a", "reconfig", ("server.8=127.0.0.1:1", None, None, -1)),
        Op("a", "reconfig", (None, None, None, -1)),
        Op("a", "reconfig", (None, "abc", None, -1)),
        Op("a", "get_config", (False,)),
        Op("a", "exists", ("/zookeeper/config", False)),
    ]


@dataclass
class Leg:
    """One system's run: its outcomes and the role → server map it ran with."""

    outcomes: list[Outcome]
    owners: dict[int, str]
    masks: list[tuple[str, str]]


def run_leg(system: str, workdir: Path) -> Leg:
    """Start a 3-server ensemble of ``system`` with reconfig on, run the script, stop it."""
    cluster = Cluster(ClusterSpec(system=system, servers=3, workdir=workdir, reconfig=True))
    try:
        if not cluster.start():
            raise RuntimeError(f"{system}: the ensemble did not come up: {cluster.modes()}")
        leader = cluster.leader()
        assert leader is not None
        connected, victim = sorted(sid for sid in cluster.servers if sid != leader)
        roles = {"L": leader, "C": connected, "V": victim}
        executor = JavaExecutor(cluster.direct_hosts(connected), ROOT)
        executor.open()
        try:
            outcomes = [executor.run(op) for op in script(roles)]
        finally:
            executor.close()
        return Leg(outcomes, dict(executor.owners), _masks(cluster, roles))
    finally:
        cluster.stop()


def _masks(cluster: Cluster, roles: dict[str, int]) -> list[tuple[str, str]]:
    masks = []
    for role, sid in roles.items():
        server = cluster.servers[sid]
        masks.append((f"server.{sid}=", f"server.{role}="))
        for kind, port in (("q", server.quorum_port), ("e", server.election_port), ("c", server.client_port)):
            masks.append((f":{port}", f":{kind}{role}"))
    return masks


def masked(value: Any, masks: list[tuple[str, str]]) -> Any:
    """``value`` with every configuration text in it put by role (see the module's doc)."""
    if isinstance(value, tuple) and len(value) == 3 and value[0] == "data" and isinstance(value[2], Stat):
        _, data, stat = value
        if data and stat.mzxid == Membership.parse(data.decode()).version:  # see the module's doc: ZOOKEEPER-1783
            stat = stat._replace(mzxid=0, mtime=0, dataLength=stat.dataLength == len(data))
        return ("data", masked(data, masks), stat)
    if isinstance(value, bytes) and b"version=" in value:
        text = value.decode()
        for real, role in masks:
            text = text.replace(real, role)
        text = re.sub(r"version=[0-9a-f]+", "version=V", text)
        return "\n".join(sorted(text.splitlines())).encode()
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(masked(item, masks) for item in value)
    return value


def first_divergence(reference: Leg, zabby: Leg) -> str | None:
    """The first op whose normalized outcome differs, described; None when all agree."""
    reference_norm, zabby_norm = Normalizer(), Normalizer()
    ops = script({"L": 0, "C": 0, "V": 0})
    for index, (mine, theirs) in enumerate(zip(reference.outcomes, zabby.outcomes, strict=True)):
        mine = Outcome(masked(mine.result, reference.masks), mine.logs, mine.unreaped)
        theirs = Outcome(masked(theirs.result, zabby.masks), theirs.logs, theirs.unreaped)
        found = first_difference(reference_norm.outcome(mine, reference.owners), zabby_norm.outcome(theirs, zabby.owners))
        if found is not None:
            where, expected, got = found
            return f"op {index} ({ops[index].kind}{ops[index].args}): at {where}: ZooKeeper {expected!r}, zabby {got!r}"
    return None
