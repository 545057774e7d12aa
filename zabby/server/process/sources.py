"""Counting what each source address holds, so one source (or many) cannot take what the
others need: the peer ports' slots for links that have not said who they are, and the admin
port's connections.

A source is an IPv4 address, or an IPv6 address's /64 (one host is handed a whole /64, so
counting its addresses one by one would count nothing); an IPv4 address mapped into IPv6
counts as itself.  Pure: no sockets, no clock.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable

IPV6_PREFIX_BITS = 64


def normal_ip(address: str) -> str | None:
    """``address`` as one spelling of its IP (an IPv4-mapped IPv6 address as the IPv4 one);
    None if it is no IP address."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


def source_of(address: str | None) -> str:
    """The source an address counts as ("" when the socket could not say)."""
    if not address:
        return ""
    ip = normal_ip(address)
    if ip is None:
        return address
    if ":" in ip:
        return str(ipaddress.IPv6Network((ip, IPV6_PREFIX_BITS), strict=False))
    return ip


class SourceCounts:
    """What is held at once, in all (at most ``total_max``) and per source (at most
    ``per_source_max``); the state is one count per source that holds something."""

    def __init__(self, total_max: int, per_source_max: int) -> None:
        self.total_max = total_max
        self.per_source_max = per_source_max
        self.total = 0
        self._held: Counter[str] = Counter()

    def take(self, source: str) -> str | None:
        """Take one for ``source``; None if taken, else why not (for a log line)."""
        if self.total >= self.total_max:
            return f"{self.total_max} are held"
        if self._held[source] >= self.per_source_max:
            return f"{self.per_source_max} are held from {source}"
        self._held[source] += 1
        self.total += 1
        return None

    def give_back(self, source: str) -> None:
        self.total -= 1
        self._held[source] -= 1
        if not self._held[source]:
            del self._held[source]

    def held(self, source: str) -> int:
        return self._held.get(source, 0)

    def sources(self) -> int:
        return len(self._held)


class SessionSources:
    """The sessions this server created for each source, while they live: a client that
    opens sessions and drops their connections leaves each open until it expires, and one
    source could take all of ``maxSessions`` from the others.

    Reconciled lazily with the sessions that live (``alive``, the tree's): a source at its
    bound, and every entry once they pass twice the bound of all (``entries_max``), are
    checked again, so the state stays at most ``entries_max`` ids whatever closes or expires."""

    def __init__(self, per_source_max: int, alive: Callable[[int], bool], entries_max: int) -> None:
        self.per_source_max = per_source_max
        self.alive = alive
        self.entries_max = entries_max
        self._ids: dict[str, set[int]] = {}
        self._entries = 0

    def admit(self, source: str) -> bool:
        """Whether ``source`` may have one more session made here."""
        ids = self._ids.get(source)
        if ids is None or len(ids) < self.per_source_max:
            return True
        return len(self._prune(source, ids)) < self.per_source_max

    def created(self, source: str, session_id: int) -> None:
        ids = self._ids.setdefault(source, set())
        if session_id in ids:
            return
        ids.add(session_id)
        self._entries += 1
        if self._entries > 2 * self.entries_max:
            for held_source, ids in list(self._ids.items()):
                self._prune(held_source, ids)

    def held(self, source: str) -> int:
        return len(self._ids.get(source, ()))

    def _prune(self, source: str, ids: set[int]) -> set[int]:
        live = {session_id for session_id in ids if self.alive(session_id)}
        self._entries -= len(ids) - len(live)
        if live:
            self._ids[source] = live
        else:
            del self._ids[source]
        return live
