"""The cut-over of docs/operations.md ("Moving from ZooKeeper"), rehearsed step by step with
clients connected throughout, and the way back.

Three ZooKeeper 3.8 servers serve a kazoo client holding an ephemeral znode, a kazoo writer
setting a znode every ``WRITE_INTERVAL_S``, and a Curator LeaderLatch (``CuratorSuite``'s
``cutover`` scenario).  While the latch's client waits at its "midpoint", the ensemble moves
onto three zabby servers on the same client ports (the page's steps: check, stop ZooKeeper,
import the leader's data dir, start the converted server, then the others, which sync from it
by SNAP, check); at "back", onto ZooKeeper again (stop zabby, export the leader's data dir,
start the exported server, then the others, check).  Each phase reports its write outage: the
longest time between two writes that succeeded.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from zabby.cli.admin import main_captured
from harness.jepsen.clients import kazoo_reconnect_retry
from harness.jepsen.history import longest_gap_s
from zabby.client.fourletter import mntr, server_mode, srvr
from harness.local.zookeeper import ZooKeeperEnsemble, ZooKeeperProcess
from zabby.testing import Ensemble, ServerProcess, wait_until
from zabby.testing.processes import stop_processes

WRITE_INTERVAL_S = 0.05
SESSION_TIMEOUT_S = 60.0
SETTINGS: dict[str, Any] = {"tickTime": 2000, "initLimit": 10, "syncLimit": 5, "4lw.commands.whitelist": "*", "admin.enableServer": "false"}
ZABBY_SETTINGS: dict[str, Any] = {"maxSessionTimeout": 120_000}  # the clients' 60 s sessions, not cut to 40 s


@dataclass
class Check:
    """What an operator reads off each server (``srvr`` and ``mntr``)."""

    modes: dict[int, str]
    zxids: dict[int, int]
    znodes: int
    ephemerals: int

    @property
    def leader(self) -> int:
        return next(sid for sid, mode in self.modes.items() if mode == "leader")


def check(ports: dict[int, int]) -> Check:
    """``echo srvr | nc`` and ``echo mntr | nc`` on every server (all serving); the counts are
    the leader's."""
    modes, zxids = {}, {}
    for sid, port in ports.items():
        fields = srvr(port)
        modes[sid], zxids[sid] = fields.get("Mode", "not serving"), int(fields.get("Zxid", "-1"), 16)
    leader = next(port for sid, port in ports.items() if modes[sid] == "leader")
    figures = mntr(leader)
    return Check(modes, zxids, int(figures["zk_znode_count"]), int(figures["zk_ephemerals_count"]))


class Writer(threading.Thread):
    """A kazoo session setting one znode every ``WRITE_INTERVAL_S``; the times of the writes
    that succeeded."""

    def __init__(self, hosts: str, path: str) -> None:
        super().__init__(daemon=True)
        self.client = client(hosts)
        self.path = path
        self.client.ensure_path(path)
        self.done: list[float] = []
        self.failure = ""  # the last write's error, if it failed
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.client.set_async(self.path, str(len(self.done)).encode()).get(timeout=1.0)
                self.done.append(time.monotonic())
            except Exception as exc:  # noqa: BLE001 -- any failure is a write that did not happen; the next one is tried
                self.failure = f"{type(exc).__name__}: {exc}"
            self.stop.wait(WRITE_INTERVAL_S)

    def outage_s(self, since: float, until: float) -> float:
        """The longest time without a successful write between ``since`` and ``until``."""
        return longest_gap_s(self.done, since, until)


def client(hosts: str) -> KazooClient:
    """A kazoo client that retries its connection every second at most while the servers move."""
    made = KazooClient(hosts=hosts, timeout=SESSION_TIMEOUT_S, connection_retry=kazoo_reconnect_retry())
    made.start(timeout=30)
    return made


@dataclass
class Phase:
    name: str
    before: Check
    after: Check
    outage_s: float
    converted: list[str] = field(default_factory=list)  # what zabby-admin printed


class CutOver:
    """ZooKeeper's three servers, then zabby's on the same client ports, then ZooKeeper's again."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.zookeeper = ZooKeeperEnsemble(workdir / "zookeeper", 3, **SETTINGS)
        self.ports = {sid: server.port for sid, server in self.zookeeper.servers.items()}
        self.hosts = self.zookeeper.hosts
        self.zabby = Ensemble(workdir / "zabby", 3, client_ports=self.ports, **ZABBY_SETTINGS)
        self.phases: list[Phase] = []
        self.writer: Writer | None = None

    def start(self) -> None:
        self.zookeeper.start()
        self._wait_serving()
        self.writer = Writer(self.hosts, "/cutover/beat")
        self.writer.start()

    def stop(self) -> None:
        if self.writer is not None:
            self.writer.stop.set()
            self.writer.join(10)
            self.writer.client.stop()
            self.writer.client.close()
        self.zookeeper.kill_all()
        self.zabby.kill_all()

    def _admin(self, *argv: str) -> list[str]:
        code, out, err = main_captured(list(argv))
        if code != 0:
            raise RuntimeError(f"zabby-admin {' '.join(argv)}: {err.strip()}")
        return out.splitlines()

    def _wait_serving(self) -> Check:
        serving = ["follower", "follower", "leader"]
        wait_until(lambda: sorted(server_mode(port) for port in self.ports.values()) == serving, 90, "a leader and two followers")
        return check(self.ports)

    def to_zabby(self) -> Phase:
        """Steps 1-5 of the page."""
        started, before = time.monotonic(), check(self.ports)  # 1. check
        stop_processes([server.proc for server in self.zookeeper.servers.values()])  # 2. stop ZooKeeper
        leader = before.leader
        target = self.zabby.servers[leader]
        converted = self._admin("zookeeper", "import", str(self.zookeeper.servers[leader].data_dir), "--data-dir", str(target.data_dir),
                                "--myid", str(leader))  # 3. convert the leader's data dir  # fmt: skip
        self._start_from(self.zabby.servers, leader)  # 4. the converted server and a bare majority, then the rest
        after = self._wait_serving()  # 5. check
        return self._phase("ZooKeeper to zabby", started, before, after, converted)

    def back_to_zookeeper(self) -> Phase:
        """The way back."""
        started, before = time.monotonic(), check(self.ports)
        stop_processes([server.proc for server in self.zabby.servers.values()])
        leader = before.leader
        for sid, server in self.zookeeper.servers.items():  # ZooKeeper's old data dirs moved aside
            shutil.move(server.data_dir, server.data_dir.with_name("data.before-zabby"))
            server.data_dir.mkdir()
            (server.data_dir / "myid").write_text(f"{sid}\n")
        converted = self._admin("zookeeper", "export", str(self.zabby.servers[leader].data_dir), "--out",
                                str(self.zookeeper.servers[leader].data_dir), "--myid", str(leader))  # fmt: skip
        self._start_from(self.zookeeper.servers, leader)
        after = self._wait_serving()
        return self._phase("zabby to ZooKeeper", started, before, after, converted)

    def _start_from(self, servers: Mapping[int, ServerProcess | ZooKeeperProcess], converted: int) -> None:
        """The converted server, and only as many empty ones as make a bare majority with it,
        so that every majority holds its data; once it leads (the others got its tree by
        SNAP), the rest.  Empty servers that were a majority of their own could elect one of
        themselves, and the converted server would follow and be emptied too."""
        others = sorted(sid for sid in servers if sid != converted)
        bare = len(servers) // 2
        for sid in [converted, *others[:bare]]:
            servers[sid].launch()
        wait_until(lambda: server_mode(self.ports[converted]) == "leader", 90, f"server {converted} leading")
        for sid in others[bare:]:
            servers[sid].launch()

    def _phase(self, name: str, started: float, before: Check, after: Check, converted: list[str]) -> Phase:
        assert self.writer is not None
        writer = self.writer
        wait_until(lambda: bool(writer.done and writer.done[-1] > time.monotonic() - 1), 60,
                   f"writes again (the writer's state {writer.client.state}, its last error {writer.failure!r})")  # fmt: skip
        phase = Phase(name, before, after, self.writer.outage_s(started, time.monotonic()), converted)
        self.phases.append(phase)
        return phase
