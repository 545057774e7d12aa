"""``MixedEnsemble``: ZooKeeper 3.8 servers and zabby servers in one ensemble on 127.0.0.1, for
the mixed-ensemble tests, the differential through a zabby member and the rolling
replacement's rehearsal (``harness.differential.rolling``).

A server's kind is ``"zookeeper"``, ``"zabby"`` (speaking ZooKeeper's peer protocol:
``quorum.protocol=zookeeper``) or ``"zabby-native"`` (zabby's own, as an ensemble of zabby
servers switches to).  Every kind has the same ``server.N`` lines (without client addresses,
as ZooKeeper's static files have them), tickTime, initLimit and syncLimit."""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.local.zookeeper import ZooKeeperProcess
from zabby.testing.ensembles import QUORUM_LIMITS, Ensemble, Member, server_lines
from zabby.testing.processes import ServerProcess, poll_until, write_myid

ZOOKEEPER, ZABBY, ZABBY_NATIVE = "zookeeper", "zabby", "zabby-native"


class MixedEnsemble(Ensemble):
    """``kinds`` maps each server id (1..n) to its kind; ``observers``: the ids that observe.
    ``zk_settings`` and ``zk_properties`` (-D options) go to the ZooKeeper servers only,
    ``settings`` to the zabby ones; ``bridged``: the zabby servers with ``quorum.protocol.bridge=true``."""

    def __init__(self, workdir: Path, kinds: Mapping[int, str], *, observers: Iterable[int] = (), tick_ms: int = 200,
                 zk_settings: Mapping[str, object] | None = None, zk_properties: Mapping[str, object] | None = None,
                 bridged: Iterable[int] = (), **settings: object) -> None:  # fmt: skip
        if sorted(kinds) != list(range(1, len(kinds) + 1)):
            raise ValueError(f"server ids 1..{len(kinds)}, not {sorted(kinds)}")
        self.servers: dict[int, ServerProcess | ZooKeeperProcess] = {}  # type: ignore[assignment]
        self.workdir = workdir
        self.settings = settings
        self.kinds = dict(kinds)
        self.members = {sid: Member.on_free_ports(sid) for sid in sorted(kinds)}
        self.roles = {sid: "observer" for sid in observers}
        self.common = {"tickTime": tick_ms, **QUORUM_LIMITS, **server_lines(self.members.values(), self.roles, client=False)}
        self.zk_settings = dict(zk_settings or {})
        self.zk_properties = dict(zk_properties or {})
        self.bridged = set(bridged)  # zabby servers that take both peer protocols (quorum.protocol.bridge)
        for sid, kind in self.kinds.items():
            write_myid(self._folder(sid) / "data", sid)
            self.servers[sid] = self._server_of(sid, kind)

    def _launch(self, wait_s: float) -> None:
        """The zabby servers first, and their election ports listening, then the others.  A
        JVM's start is no slower than Python's on an idle machine, and two ZooKeeper servers
        that find each other first elect one of themselves before a zabby server with a larger
        id has voted: a topology's expected leader would then be a matter of timing."""
        first = [sid for sid, kind in self.kinds.items() if kind != ZOOKEEPER]
        for sid in first:
            self.servers[sid].launch()
        for sid in first:
            _wait_listening(self.members[sid].election_port, self.servers[sid], wait_s)
        for sid, server in self.servers.items():
            if sid not in first:
                server.launch()

    def _folder(self, sid: int) -> Path:
        return self.workdir / f"server{sid}"

    def _server_of(self, sid: int, kind: str) -> ServerProcess | ZooKeeperProcess:
        folder, client = self._folder(sid), self.members[sid].client_port
        if kind == ZOOKEEPER:
            settings: dict[str, Any] = {"4lw.commands.whitelist": "*", "admin.enableServer": "false", **self.common, **self.zk_settings}
            return ZooKeeperProcess(folder, port=client, properties=self.zk_properties, **settings)
        if kind not in (ZABBY, ZABBY_NATIVE):
            raise ValueError(f"server {sid}: kind {kind!r} is none of {ZOOKEEPER!r}, {ZABBY!r}, {ZABBY_NATIVE!r}")
        protocol: dict[str, Any] = {"quorum.protocol": "zookeeper"} if kind == ZABBY else {}
        if sid in self.bridged:
            protocol["quorum.protocol.bridge"] = "true"
        return ServerProcess(folder, port=client, **{**self.common, **protocol, **self.settings})

    def replace(self, sid: int, kind: str) -> tuple[ServerProcess | ZooKeeperProcess, Path]:
        """Server ``sid`` as another kind (not started): same id, ports and server lines, in a
        fresh folder holding only its myid; its old folder kept aside as ``server<sid>.<n>``
        (returned, with the new server): the caller moves its data."""
        folder = self._folder(sid)
        aside = 1
        while folder.with_name(f"server{sid}.{aside}").exists():
            aside += 1
        old = folder.rename(folder.with_name(f"server{sid}.{aside}"))
        write_myid(folder / "data", sid)
        self.kinds[sid] = kind
        self.bridged.discard(sid)
        server = self.servers[sid] = self._server_of(sid, kind)
        return server, old

    def switch_protocol(self, sid: int, kind: str, *, bridge: bool = False) -> ServerProcess:
        """Zabby server ``sid`` (not running) on the other peer protocol: ``kind`` ZABBY for
        ZooKeeper's, ZABBY_NATIVE for zabby's own; its folder and data kept.  ``bridge``: it
        takes both protocols (``quorum.protocol.bridge=true``), so that it serves with the
        others whichever they speak."""
        if self.kinds[sid] not in (ZABBY, ZABBY_NATIVE) or kind not in (ZABBY, ZABBY_NATIVE):
            raise ValueError(f"server {sid} is {self.kinds[sid]}: only a zabby server switches between {ZABBY!r} and {ZABBY_NATIVE!r}, not to {kind!r}")
        self.kinds[sid] = kind
        (self.bridged.add if bridge else self.bridged.discard)(sid)
        server = self.servers[sid] = self._server_of(sid, kind)
        assert isinstance(server, ServerProcess)
        return server


def _wait_listening(port: int, server: ServerProcess | ZooKeeperProcess, wait_s: float) -> None:
    """Until something accepts connections on 127.0.0.1:``port``; ``server`` must stay running."""

    def listening() -> bool:
        server.check_running()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
        except OSError:
            return False
        return True

    if not poll_until(listening, wait_s, interval_s=0.02):
        raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {wait_s} s")
