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
from pathlib import Path
from typing import Any

from zabby.local.processes import ServerProcess, ZooKeeperProcess

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
