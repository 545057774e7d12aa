"""``ProxiedEnsemble``: ``zabby.testing.Ensemble`` with every peer link through a proxy of
``harness.local.netproxy``, so a test can cut, blackhole or heal any directed link.

Server j reaches server i through ``proxies[(j, i)]`` (a quorum and an election proxy): its
zoo.cfg names the proxies' ports for every other server (``Ensemble.peer_ports``)."""

from __future__ import annotations

from pathlib import Path

from harness.local.netproxy import LinkProxy, Mode, ProxyHub
from zabby.testing.ensembles import Ensemble
from zabby.testing.processes import free_port


class ProxiedEnsemble(Ensemble):
    def __init__(self, workdir: Path, size: int, **settings: object) -> None:
        self.hub = ProxyHub()
        self.proxies: dict[tuple[int, int], tuple[LinkProxy, LinkProxy]] = {}
        try:
            super().__init__(workdir, size, **settings)  # type: ignore[arg-type]  # (settings are zoo.cfg lines)
        except BaseException:
            self.hub.close()
            raise

    def peer_ports(self, sid: int, other: int) -> tuple[int, int] | None:
        if other == sid:
            return None
        member = self.members[other]
        if (sid, other) not in self.proxies:
            self.proxies[(sid, other)] = (self.hub.add(member.quorum_port, port=free_port()), self.hub.add(member.election_port, port=free_port()))
        quorum, election = self.proxies[(sid, other)]
        return quorum.port, election.port

    def links_across(self, group: set[int]) -> list[LinkProxy]:
        """The proxies of every link between ``group`` and the other servers, both ways."""
        return [proxy for (source, target), pair in self.proxies.items() if (source in group) != (target in group) for proxy in pair]

    def partition(self, group: set[int], cut: bool = True) -> None:
        """Cut (or heal) every link between ``group`` and the other servers, both ways."""
        for proxy in self.links_across(group):
            if cut:
                proxy.set_mode(Mode.CUT)
            else:
                proxy.heal()

    def blackhole(self, group: set[int], on: bool = True) -> None:
        """Stop (or restart) every byte on the links between ``group`` and the others, both
        ways, keeping the connections up: the servers notice only by their timeouts.  Turning
        it off closes the connections it stalled: the servers connect again."""
        for proxy in self.links_across(group):
            if on:
                proxy.set_mode(Mode.BLACKHOLE)
            else:
                proxy.set_mode(Mode.CUT)
                proxy.heal()

    def stop_all(self) -> None:
        super().stop_all()
        self.hub.close()

    def kill_all(self) -> None:
        super().kill_all()
        self.hub.close()
