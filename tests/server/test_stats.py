"""The latency histograms /metrics exposes count as Prometheus's own Histogram does."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from zabby.engine.stats import LATENCY_BUCKETS_S, ServerStats
from zabby.server.adminport.metrics import LatencyCollector

# on the bounds, between them, below the first and above the last
SECONDS = [0.0, 0.00005, *LATENCY_BUCKETS_S, 0.0003, 0.0011, 0.07, 0.4999, 2.6, 30.0]


def _lines(registry: CollectorRegistry, name: str) -> list[str]:
    return sorted(line for line in generate_latest(registry).decode().splitlines() if line.startswith(name) and "_created" not in line)


def test_request_and_fsync_histograms_match_prometheus_histograms() -> None:
    stats = ServerStats()
    reference = CollectorRegistry()
    requests = Histogram("zabby_request_latency_seconds", "", ["kind"], buckets=LATENCY_BUCKETS_S, registry=reference)
    fsync = Histogram("zabby_fsync_latency_seconds", "", buckets=LATENCY_BUCKETS_S, registry=reference)
    for i, seconds in enumerate(SECONDS):
        stats.record_request(seconds, write=i % 3 == 0)
        requests.labels("write" if i % 3 == 0 else "read").observe(seconds)
        stats.record_fsync(seconds / 2)
        fsync.observe(seconds / 2)
    exposed = CollectorRegistry()
    exposed.register(LatencyCollector(stats))
    for name in ("zabby_request_latency_seconds", "zabby_fsync_latency_seconds"):
        assert _lines(exposed, name) == _lines(reference, name)
    assert stats.fsync.count == len(SECONDS)
