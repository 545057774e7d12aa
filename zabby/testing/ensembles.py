"""An ensemble of real zabby servers on 127.0.0.1, and the one place its ``server.N=`` lines are
made (``Member``): ``Ensemble`` here, the harness's proxied ensemble and fault-harness cluster,
its ZooKeeper ensembles and ``scripts/ensemble.py`` all write them through ``Member.line``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from zabby.testing.processes import LEADING_MODES, SERVING_MODES, ServerProcess, free_port, kill_processes, stop_processes, write_myid

QUORUM_LIMITS = {"initLimit": 10, "syncLimit": 5}  # in ticks, in every ensemble's zoo.cfg


@dataclass(frozen=True, slots=True)
class Member:
    """One server's place in an ensemble on 127.0.0.1: its id and its three ports."""

    sid: int
    quorum_port: int
    election_port: int
    client_port: int

    @classmethod
    def on_free_ports(cls, sid: int, client_port: int | None = None) -> Member:
        return cls(sid, free_port(), free_port(), client_port or free_port())

    def spec(self, role: str = "", *, client: bool = True, via: tuple[int, int] | None = None) -> str:
        """The value of its ``server.N=`` line: ``127.0.0.1:quorum:election[:role][;127.0.0.1:client]``.
        ``role``: participant, observer, or none (a participant); ``client``: with its client
        address (a reconfig's joiner needs it in ZooKeeper); ``via``: the quorum and election
        ports through which the server whose file it is reaches this one (a proxy's)."""
        quorum, election = via or (self.quorum_port, self.election_port)
        text = f"127.0.0.1:{quorum}:{election}{':' + role if role else ''}"
        return f"{text};127.0.0.1:{self.client_port}" if client else text

    def line(self, role: str = "", *, client: bool = True, via: tuple[int, int] | None = None) -> str:
        """Its ``server.N=...`` line (see ``spec``)."""
        return f"server.{self.sid}={self.spec(role, client=client, via=via)}"


def server_lines(members: Iterable[Member], roles: Mapping[int, str] | None = None, *, client: bool = True) -> dict[str, str]:
    """``server.N`` -> spec for each member, as zoo.cfg settings."""
    return dict(m.line((roles or {}).get(m.sid, ""), client=client).split("=", 1) for m in members)


class Ensemble:
    """``size`` servers (and ``observers``) on 127.0.0.1 under ``workdir``/server<N>, each with its
    own folder, myid and zoo.cfg; ``settings`` go to every zoo.cfg.  Not started: ``start()``,
    then ``wait_leader()``; ``stop_all()`` or ``kill_all()`` at the end."""

    def __init__(self, workdir: Path, size: int, *, observers: int = 0, client_ports: Mapping[int, int] | None = None,
                 **settings: object) -> None:  # fmt: skip
        """``client_ports``: server id -> its client port (others' are free ones): servers that
        take over another ensemble's."""
        self.servers: dict[int, ServerProcess] = {}
        self.workdir = workdir
        self.settings = settings
        total = size + observers
        self.members = {sid: Member.on_free_ports(sid, (client_ports or {}).get(sid)) for sid in range(1, total + 1)}
        self.roles = {sid: "observer" for sid in range(size + 1, total + 1)}
        for sid in self.members:
            lines = {f"server.{m.sid}": m.spec(self.roles.get(m.sid, ""), via=self.peer_ports(sid, m.sid)) for m in self.members.values()}
            self.servers[sid] = self._server(sid, lines)

    def peer_ports(self, sid: int, other: int) -> tuple[int, int] | None:
        """The quorum and election ports through which server ``sid`` reaches server ``other``;
        None: ``other``'s own (a proxied ensemble puts its proxies here)."""
        return None

    def _server(self, sid: int, lines: Mapping[str, str]) -> ServerProcess:
        folder = self.workdir / f"server{sid}"
        write_myid(folder / "data", sid)
        return ServerProcess(folder, port=self.members[sid].client_port, **{**QUORUM_LIMITS, **lines, **self.settings})

    @property
    def ports(self) -> dict[int, tuple[int, int, int]]:
        """Each server's own quorum, election and client port."""
        return {sid: (m.quorum_port, m.election_port, m.client_port) for sid, m in self.members.items()}

    def spec(self, sid: int, observer: bool = False) -> str:
        """Server ``sid``'s line of a dynamic configuration (its own ports, never a proxy's)."""
        return self.members[sid].line("observer" if observer else "participant")

    def new_server(self, sid: int, members: set[int]) -> ServerProcess:
        """A server that is to join: its config lists ``members`` and itself (as ZooKeeper's
        joining servers do; it syncs without voting until a reconfig adds it).  Not started."""
        self.members[sid] = Member.on_free_ports(sid)
        lines = dict(self.spec(other).split("=", 1) for other in sorted(members | {sid}))
        server = self.servers[sid] = self._server(sid, lines)
        return server

    @property
    def hosts(self) -> str:
        """The connect string of every server."""
        return ",".join(s.hosts for s in self.servers.values())

    def start(self, wait_s: float = 30.0) -> None:
        """Launch every server, then wait until each serves; on failure kill them all."""
        try:
            self._launch(wait_s)
            for server in self.servers.values():
                server.wait_serving(wait_s)
        except BaseException:
            self.kill_all()  # never leave processes behind a failed start
            raise

    def _launch(self, wait_s: float) -> None:
        """Launch every server (a kind of ensemble may order the launches, within ``wait_s``)."""
        for server in self.servers.values():
            server.launch()

    def modes(self) -> dict[int, str]:
        return {sid: server.mode() for sid, server in self.servers.items()}

    def leader(self, modes: dict[int, str] | None = None) -> int | None:
        """The one server leading (or standalone), if there is exactly one."""
        leaders = [sid for sid, mode in (modes or self.modes()).items() if mode in LEADING_MODES]
        return leaders[0] if len(leaders) == 1 else None

    def wait_leader(self, wait_s: float = 30.0, excluding: int | None = None, everyone: bool = False) -> int:
        """Until a leader (not ``excluding``) is elected and a majority serves; with ``everyone``,
        until every server serves (one that exited fails the wait at once)."""
        deadline = time.monotonic() + wait_s
        needed = len(self.servers) if everyone else len(self.servers) // 2 + 1
        while time.monotonic() < deadline:
            for server in self.servers.values() if everyone else ():
                server.check_running()
            modes = self.modes()
            sid = self.leader(modes)
            if sid is not None and sid != excluding and sum(m in SERVING_MODES for m in modes.values()) >= needed:
                return sid
            time.sleep(0.02)
        raise TimeoutError(f"no leader after {wait_s}s: {self.modes()}")

    def stop_all(self) -> None:
        """SIGTERM every server at once, SIGKILL those not ended within 10 s."""
        stop_processes(server.proc for server in self.servers.values())

    def kill_all(self) -> None:
        """SIGKILL every server at once."""
        kill_processes(server.proc for server in self.servers.values())
