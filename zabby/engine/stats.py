"""Counters and latency figures behind the four-letter words, the admin endpoint and /metrics.

These are live and mutable; each has ``statistics()``, a frozen copy for readers
(``zabby.server.adminport.statistics``).  /metrics exposes the latency histograms through
``zabby.server.adminport.metrics``.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import dataclass, field, fields
from typing import Any

LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass
class LatencyStat:
    """Min/avg/max in ms, as ZooKeeper's ``srvr`` prints them."""

    count: int = 0
    total_ms: float = 0.0
    min_ms: float = 0.0
    max_ms: float = 0.0

    def add(self, ms: float) -> None:
        if self.count == 0 or ms < self.min_ms:
            self.min_ms = ms
        if ms > self.max_ms:
            self.max_ms = ms
        self.count += 1
        self.total_ms += ms

    @property
    def avg_ms(self) -> float:
        return self.total_ms / self.count if self.count else 0.0

    def reset(self) -> None:
        self.count, self.total_ms, self.min_ms, self.max_ms = 0, 0.0, 0.0, 0.0

    def statistics(self) -> LatencyFigures:
        return LatencyFigures(count=self.count, total_ms=self.total_ms, min_ms=self.min_ms, max_ms=self.max_ms, avg_ms=self.avg_ms)


class LatencyHistogram:
    """Counts per bucket of ``LATENCY_BUCKETS_S`` (the last: above them all), for /metrics.
    Prometheus's own Histogram takes a lock on every observation, which cost more than the
    fsync it timed: here one thread observes, and a scrape reads the counts (``families``)."""

    __slots__ = ("counts", "total_s")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self.total_s = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS_S, seconds)] += 1  # a bucket holds what is <= its bound
        self.total_s += seconds

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative counts by upper bound, as Prometheus exposes them."""
        cumulative, running = [], 0
        for bound, count in zip((*map(str, LATENCY_BUCKETS_S), "+Inf"), self.counts, strict=True):
            running += count
            cumulative.append((bound, running))
        return cumulative


@dataclass(frozen=True, slots=True, kw_only=True)
class LatencyFigures:
    count: int
    total_ms: float
    min_ms: float
    max_ms: float
    avg_ms: float


@dataclass
class ServerStats:
    started_s: float = field(default_factory=time.time)
    packets_received: int = 0
    packets_sent: int = 0
    latency: LatencyStat = field(default_factory=LatencyStat)
    fsync: LatencyStat = field(default_factory=LatencyStat)
    snapshot: LatencyStat = field(default_factory=LatencyStat)
    commit_count: int = 0
    snap_count: int = 0  # SNAP syncs sent to learners (ZooKeeper's zk_snap_count)
    diff_count: int = 0  # DIFF (and TRUNC) syncs sent to learners
    snapshots_taken: int = 0
    snapshots_skipped: int = 0  # due while the last one was still being written (ZooKeeper skips them too)
    connection_rejected: int = 0
    connection_drop_count: int = 0
    auth_failed_count: int = 0
    auth_throttled_count: int = 0  # attempts at a secret refused unread: their source tried too often (zabby)
    large_requests_rejected: int = 0
    ttl_node_deleted_count: int = 0
    last_client_response_size: int = -1  # bytes of the last reply or watch event, length prefix excluded (-1: none yet)
    min_client_response_size: int = -1
    max_client_response_size: int = -1
    startup_txns_loaded: int = 0  # txns replayed from the log at start-up
    startup_load_ms: float = 0.0  # the whole recovery: snapshot, replay and all
    startup_snap_load_ms: float = 0.0  # reading the snapshot
    startup_txns_load_ms: float = 0.0  # replaying the log after it
    digest_mismatches: int = 0  # the leader's tree digest differed from ours (then: resync by SNAP)
    zk_digests_checked: int = 0  # a learner's txns applied whose ZooKeeper leader sent a digest to compare
    repairs: int = 0  # times the core was restarted in place after a failure

    def __post_init__(self) -> None:
        self.read_latency = LatencyHistogram()
        self.write_latency = LatencyHistogram()
        self.fsync_latency = LatencyHistogram()

    def record_request(self, seconds: float, write: bool) -> None:
        self.latency.add(seconds * 1000.0)
        (self.write_latency if write else self.read_latency).observe(seconds)

    def record_response(self, size: int) -> None:
        """A reply or watch event of ``size`` bytes (its length prefix excluded) was queued:
        ZooKeeper's client_response figures (BufferStats); the connect response is not one."""
        self.last_client_response_size = size
        if self.min_client_response_size < 0 or size < self.min_client_response_size:
            self.min_client_response_size = size
        if size > self.max_client_response_size:
            self.max_client_response_size = size

    def record_fsync(self, seconds: float) -> None:
        self.fsync.add(seconds * 1000.0)
        self.fsync_latency.observe(seconds)

    def reset(self) -> None:
        self.packets_received = self.packets_sent = 0
        self.latency.reset()

    def statistics(self) -> Counters:
        """The counters as they are now, frozen."""
        values: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(Counters)}
        for name, value in values.items():
            if isinstance(value, LatencyStat):
                values[name] = value.statistics()
        return Counters(**values)


@dataclass(frozen=True, slots=True, kw_only=True)
class Counters:
    """A frozen copy of ``ServerStats``'s figures (its fields of the same names)."""

    started_s: float
    packets_received: int
    packets_sent: int
    latency: LatencyFigures
    fsync: LatencyFigures
    snapshot: LatencyFigures
    commit_count: int
    snap_count: int
    diff_count: int
    snapshots_taken: int
    snapshots_skipped: int
    connection_rejected: int
    connection_drop_count: int
    auth_failed_count: int
    auth_throttled_count: int
    large_requests_rejected: int
    ttl_node_deleted_count: int
    last_client_response_size: int
    min_client_response_size: int
    max_client_response_size: int
    startup_txns_loaded: int
    startup_load_ms: float
    startup_snap_load_ms: float
    startup_txns_load_ms: float
    digest_mismatches: int
    zk_digests_checked: int
    repairs: int
