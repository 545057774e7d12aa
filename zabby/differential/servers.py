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

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from zabby.jepsen.cluster import JAVA_DIR, ZK_JAR
from zabby.local import CHECKOUT, ZOOKEEPER_LOG4J, free_port, server_mode
from zabby.local.processes import ServerProcess

INSTALL_SCRIPT = CHECKOUT / "scripts" / "install_zookeeper.sh"
APT_UNAVAILABLE = 3  # install_zookeeper.sh's exit code when apt-get (or root) is not there

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

class ZooKeeperUnavailable(RuntimeError):
    """Debian's zookeeper package or java is missing and cannot be installed here."""


def ensure_zookeeper() -> None:
    """Install Debian's zookeeper package when its jar is missing; raise ZooKeeperUnavailable
    when that cannot be done on this machine (no apt-get, no root)."""
    if ZK_JAR.exists() and shutil.which("java"):
        return
    try:
        done = subprocess.run(["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=900, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError("scripts/install_zookeeper.sh did not finish in 15 minutes") from exc
    if done.returncode == APT_UNAVAILABLE:
        raise ZooKeeperUnavailable(done.stderr.strip())
    if done.returncode != 0 or not ZK_JAR.exists():
        raise RuntimeError(f"scripts/install_zookeeper.sh failed: {done.stderr.strip()[-500:]}")
    if not shutil.which("java"):
        raise ZooKeeperUnavailable("no java on PATH")


class ZooKeeperServer:
    """One standalone ZooKeeper JVM in its own folder and process group."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        (workdir / "data").mkdir(parents=True, exist_ok=True)
        settings = {**COMMON, "dataDir": workdir / "data", "clientPort": self.port, "clientPortAddress": "127.0.0.1"}
        (workdir / "zoo.cfg").write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        (workdir / "log4j.properties").write_text(ZOOKEEPER_LOG4J)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        classpath = ":".join(str(p) for p in (ZK_JAR, JAVA_DIR / "slf4j-log4j12.jar", JAVA_DIR / "log4j-1.2.jar"))
        return [
            "java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            f"-Dzookeeper.log.dir={self.workdir}", f"-Dlog4j.configuration=file:{self.workdir / 'log4j.properties'}",
            f"-Dznode.container.checkIntervalMs={REAP_INTERVAL_MS}",  # read as a system property only
            f"-Dzookeeper.DigestAuthenticationProvider.superDigest={SUPER_DIGEST}",
            "-cp", classpath, "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self.workdir / "zoo.cfg"),
        ]  # fmt: skip

    def start(self, wait_s: float = 90.0) -> None:
        with open(self.workdir / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + wait_s
        while not self._serving():
            if self.proc.poll() is not None:
                raise RuntimeError(f"zookeeper exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"zookeeper not serving after {wait_s} s:\n{self.log_tail()}")
            time.sleep(0.1)

    def _serving(self) -> bool:
        return server_mode(self.port, 1.0) == "standalone"

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join((self.workdir / "zookeeper.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def zabby_server(workdir: Path) -> ServerProcess:
    """A standalone zabby server with the settings ZooKeeperServer uses (not yet started)."""
    settings: dict[str, Any] = {**COMMON, "znode.container.checkIntervalMs": REAP_INTERVAL_MS, "superDigest": SUPER_DIGEST}
    return ServerProcess(workdir, **settings)


@contextmanager
def running_pair(workdir: Path) -> Iterator[tuple[ZooKeeperServer, ServerProcess]]:
    """ZooKeeper and zabby, standalone, started side by side (ZooKeeper first: its JVM takes
    longest) and killed at the end."""
    reference, zabby = ZooKeeperServer(workdir / "zookeeper"), zabby_server(workdir / "zabby")
    try:
        reference.start()
        zabby.start(60)
        yield reference, zabby
    finally:
        zabby.kill()
        reference.kill()
