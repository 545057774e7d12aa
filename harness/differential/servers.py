"""The two servers a differential run compares: Apache ZooKeeper 3.8 (Debian's jars) and zabby,
each standalone on 127.0.0.1 with the same settings wherever both have them.

Settings that matter to the comparison:

* ``extendedTypesEnabled=true`` on both (TTL nodes; zabby's default, not ZooKeeper's);
* the same container/TTL reaping interval (``REAP_INTERVAL_MS``), so both reap promptly;
* a super digest (``SUPER_USER``) the harness alone uses, to watch reaping and clean up under
  any ACL the workload set;
* ``tickTime=2000`` so that sessions may last 40 s: a busy machine must not expire them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zabby.testing
from harness.local.zookeeper import ZooKeeperEnsemble, ZooKeeperProcess
from zabby.testing import ServerProcess
from zabby.testing.ensembles import QUORUM_LIMITS
from harness.local.mixed import ZABBY, MixedEnsemble

REAP_INTERVAL_MS = 200
SUPER_USER, SUPER_PASSWORD = "super", "differential"
SUPER_DIGEST = "super:HdDzQ+9LJmjeZta3MbXZ2oSZCBU="  # base64(sha1("super:differential"))

COMMON: dict[str, Any] = {
    "tickTime": 2000,
    "4lw.commands.whitelist": "*",
    "admin.enableServer": "false",
    "forceSync": "no",  # durability is not under test; fsyncs would only slow both down
    "maxClientCnxns": 0,
    "extendedTypesEnabled": "true",
}


def zookeeper_server(workdir: Path) -> ZooKeeperProcess:
    """A standalone ZooKeeper (not yet started): a small JVM that starts fast, the reaping
    interval and the super digest as system properties (ZooKeeper reads them only so)."""
    properties = {"znode.container.checkIntervalMs": REAP_INTERVAL_MS, "zookeeper.DigestAuthenticationProvider.superDigest": SUPER_DIGEST}
    return ZooKeeperProcess(workdir, heap="256m", jvm_options=("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"), properties=properties, **COMMON)


def mixed_ensemble(workdir: Path, kinds: dict[int, str], *, observers: tuple[int, ...] = (), zk_properties: dict[str, Any] | None = None,
                   bridged: tuple[int, ...] = (), **settings: Any) -> MixedEnsemble:  # fmt: skip
    """ZooKeeper and zabby servers in one ensemble (``MixedEnsemble``; not started) with the
    settings ``zookeeper_server`` and ``zabby_server`` use, so that the differential can run
    through any member; ``settings`` go to the zabby members, ``zk_properties`` to the JVMs."""
    properties = {"znode.container.checkIntervalMs": REAP_INTERVAL_MS, "zookeeper.DigestAuthenticationProvider.superDigest": SUPER_DIGEST,
                  **(zk_properties or {})}  # fmt: skip
    shared = {key: value for key, value in COMMON.items() if key not in ("tickTime", "4lw.commands.whitelist", "admin.enableServer")}
    return MixedEnsemble(workdir, kinds, observers=observers, tick_ms=COMMON["tickTime"], zk_settings=shared, zk_properties=properties,
                         bridged=bridged, **shared, **{"znode.container.checkIntervalMs": REAP_INTERVAL_MS, "superDigest": SUPER_DIGEST, **settings})  # fmt: skip


def zabby_server(workdir: Path) -> ServerProcess:
    """A standalone zabby server with the settings ``zookeeper_server`` uses (not yet started)."""
    settings: dict[str, Any] = {**COMMON, "znode.container.checkIntervalMs": REAP_INTERVAL_MS, "superDigest": SUPER_DIGEST}
    return ServerProcess(workdir, **settings)


@contextmanager
def running_pair(workdir: Path) -> Iterator[tuple[ZooKeeperProcess, ServerProcess]]:
    """ZooKeeper and zabby, standalone, started side by side (ZooKeeper first: its JVM takes
    longest) and killed at the end."""
    reference, zabby = zookeeper_server(workdir / "zookeeper"), zabby_server(workdir / "zabby")
    try:
        reference.start()
        zabby.start(60)
        yield reference, zabby
    finally:
        zabby.kill()
        reference.kill()


@contextmanager
def running_mixed_pair(workdir: Path, kinds: dict[int, str]) -> Iterator[tuple[ZooKeeperProcess, ServerProcess, str]]:
    """A standalone ZooKeeper and a mixed ensemble of ``kinds`` (``mixed_ensemble``), every
    member serving; the ensemble's zabby member of the lowest id (what the differential talks
    to, in place of a standalone zabby) and what it is ("server 3 of 3, leader"); all killed
    at the end."""
    members = [sid for sid, kind in sorted(kinds.items()) if kind == ZABBY]
    if not members or len(kinds) < 3:
        raise ValueError(f"a mixed ensemble of at least 3 servers with a zabby member, not {kinds}")
    reference, ensemble = zookeeper_server(workdir / "zookeeper"), mixed_ensemble(workdir / "mixed", kinds)
    try:
        reference.start()
        ensemble.start(90)
        ensemble.wait_leader(60, everyone=True)
        member = ensemble.servers[members[0]]
        assert isinstance(member, ServerProcess)
        yield reference, member, f"server {members[0]} of {len(kinds)}, {member.mode()}"
    finally:
        ensemble.kill_all()
        reference.kill()


# --- a system on 1 or 3 servers, for the other clients' suites (harness.differential.clients) ----

SYSTEMS = ("zookeeper", "zabby")
CORE_RESTART = "restarting the core"  # zabby's log line when its engine restarts from disk (zabby/engine/engine.py)
# The settings of a client's own suite: ZooKeeper's defaults wherever its tests depend on them
# (a container is reaped after 60 s, as aiozk's test_multi_watcher expects), the session
# bounds of tickTime=2000 (4 s to 40 s) on both systems.
SUITE_SETTINGS: dict[str, Any] = {"tickTime": 2000, "4lw.commands.whitelist": "*", "admin.enableServer": "false", "forceSync": "no", "maxClientCnxns": 0}


@dataclass(slots=True)
class RunningSystem:
    """A started system: its client ``hosts`` (``host:port,...``), each server's log."""

    system: str
    hosts: str
    logs: list[Path]

    def core_restarts(self) -> int:
        """How many times a zabby server's core restarted from disk (0 for ZooKeeper)."""
        return sum(path.read_text(errors="replace").count(CORE_RESTART) for path in self.logs if path.exists())


@contextmanager
def running_system(system: str, size: int, workdir: Path, **settings: Any) -> Iterator[RunningSystem]:
    """``size`` servers (1: standalone) of ``system`` ("zabby" or "zookeeper") on 127.0.0.1 with
    ``SUITE_SETTINGS`` and ``settings``, every one serving; killed at the end."""
    if system not in SYSTEMS:
        raise ValueError(f"unknown system {system!r}: one of {', '.join(SYSTEMS)}")
    merged = {**SUITE_SETTINGS, **(QUORUM_LIMITS if size > 1 else {}), **settings}
    if system == "zookeeper":
        reference = ZooKeeperEnsemble(workdir, size, jvm_options=("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"), **merged)
        try:
            reference.start(120)
            yield RunningSystem(system, reference.hosts, [server.log_path for server in reference.servers.values()])
        finally:
            reference.kill_all()
        return
    if size == 1:
        server = ServerProcess(workdir, **merged)
        try:
            server.start(60)
            yield RunningSystem(system, server.hosts, [server.log_path])
        finally:
            server.kill()
        return
    with zabby.testing.ensemble(size, workdir=workdir, wait_s=60, **merged) as ensemble:
        yield RunningSystem(system, ensemble.hosts, [server.log_path for server in ensemble.servers.values()])
