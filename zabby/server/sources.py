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


class SourceRate:
    """Attempts slowed by source and in all (a token bucket as GCRA: one deadline per source).

    Each attempt of a source is due ``1 / per_source_per_s`` after the one before, a burst of
    ``burst`` allowed; all sources together, ``total_per_s``.  ``delay_s`` reserves the next
    slot and says how long the attempt must wait for it, the same whatever the attempt turns
    out to be (so a right password is as slow as a wrong one); an attempt that would wait
    longer than ``wait_s_max`` is refused and reserves nothing.  State: one deadline per source
    that is still paying for its attempts, at most ``sources_max`` (a source past its deadline
    is as good as new and is forgotten; past the bound, new sources share one deadline).
    """

    OTHERS = "(others)"

    def __init__(self, per_source_per_s: float, total_per_s: float, burst: int, wait_s_max: float, sources_max: int = 4096) -> None:
        self.interval_s = 1 / per_source_per_s
        self.total_interval_s = 1 / total_per_s
        self.burst = burst
        self.wait_s_max = wait_s_max
        self.sources_max = sources_max
        self._due: dict[str, float] = {}  # source -> when its next attempt is due, past its burst
        self._total_due = float("-inf")

    def delay_s(self, source: str, now: float) -> float | None:
        """How long the attempt from ``source`` at ``now`` waits; None: refused (it would wait
        past ``wait_s_max``)."""
        key = self._key(source, now)
        due = max(self._due.get(key, now), now)
        total_due = max(self._total_due, now)
        start = max(due - (self.burst - 1) * self.interval_s, total_due - (self.burst - 1) * self.total_interval_s, now)
        if start - now > self.wait_s_max:
            return None
        self._due[key] = due + self.interval_s
        self._total_due = total_due + self.total_interval_s
        return start - now

    def _key(self, source: str, now: float) -> str:
        if source in self._due or len(self._due) < self.sources_max:
            return source
        for old in [s for s, due in self._due.items() if due <= now]:
            del self._due[old]
        return source if len(self._due) < self.sources_max else self.OTHERS

    def sources(self) -> int:
        return len(self._due)
