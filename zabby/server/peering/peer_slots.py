"""Slots for peer links that have not said who they are yet: from the accept until the hello
is admitted or refused (the hello's deadline bounds that to 2 s; with ``quorum.auth`` the
hello's MAC must check out first).

Theory of operation: the members' hosts are known from their ``server.N`` lines.  A link from
a member's host takes one of that host's own slots (``quorum.memberHostLinksMax`` each); a link
from any other address takes one of the shared ones (``quorum.unidentifiedLinksMax``), at most
``quorum.unidentifiedLinksPerHost`` per source (``zabby.server.process.sources``).  So outsiders,
however many addresses they have, never take a slot a member needs to link to us; a process
on a member's host can take that host's slots only.

A member's host given by name is resolved at most once per ``RESOLVE_INTERVAL_S`` (and again
after a membership change), so a flood of links costs no DNS lookups.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import trio

from zabby.config import PeerLinkLimits
from zabby.server.process.sources import SourceCounts, normal_ip, source_of

LOGGER = logging.getLogger("zabby.server.transport")
STRANGER_LINKS_MAX = 16  # links at once from servers no membership names
RESOLVE_INTERVAL_S = 30.0
RESOLVE_TIMEOUT_S = 2.0


@dataclass(slots=True)
class Slot:
    counts: SourceCounts
    source: str

    def release(self) -> None:
        self.counts.give_back(self.source)


class UnidentifiedSlots:
    def __init__(self, limits: PeerLinkLimits, member_hosts: Callable[[], Iterable[str]]) -> None:
        self.limits = limits
        self.member_hosts = member_hosts  # the hosts of the server.N lines, now
        self.shared = SourceCounts(limits.unidentified_max, limits.unidentified_per_host_max)
        self.members = SourceCounts(2**62, limits.member_host_max)  # per member host; their number is the members'
        self._member_ips: frozenset[str] = frozenset()
        self._resolved_at = float("-inf")
        self._resolving = trio.Lock()

    def forget_hosts(self) -> None:
        """The membership changed: resolve its hosts again at the next link."""
        self._resolved_at = float("-inf")

    async def take(self, address: str | None) -> Slot | str:
        """A slot for a link from ``address``; or, if none is free, why (for a log line)."""
        ip = normal_ip(address) if address else None
        if ip is not None and ip in await self._members():
            counts, source = self.members, ip
        else:
            counts, source = self.shared, source_of(address)
        refused = counts.take(source)
        if refused is not None:
            return f"{refused} ({'a member host' if counts is self.members else 'not from a member host'})"
        return Slot(counts, source)

    async def _members(self) -> frozenset[str]:
        """The IP addresses of the members' hosts (names resolved now and then)."""
        if time.monotonic() - self._resolved_at < RESOLVE_INTERVAL_S:
            return self._member_ips
        async with self._resolving:
            if time.monotonic() - self._resolved_at >= RESOLVE_INTERVAL_S:
                self._member_ips = frozenset(await _resolve_all(set(self.member_hosts())))
                self._resolved_at = time.monotonic()
        return self._member_ips


async def _resolve_all(hosts: set[str]) -> set[str]:
    found: set[str] = set()
    for host in hosts:
        ip = normal_ip(host)
        if ip is not None:
            found.add(ip)
            continue
        with trio.move_on_after(RESOLVE_TIMEOUT_S):
            try:
                infos = await trio.socket.getaddrinfo(host, None)
            except OSError as exc:
                LOGGER.warning("cannot resolve member host %s: %s", host, exc)
                continue
            found.update(ip for info in infos if (ip := normal_ip(str(info[4][0]))) is not None)
    return found
