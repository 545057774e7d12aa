"""zabby's own Prometheus metrics, beside mntr's ``zk_*`` gauges: what the alert rules and the
dashboard in ``deploy/`` need that mntr does not say as a number.

    zabby_serving                      1 while the server serves clients
    zabby_server_state{state}          1 for the server's mode, 0 for the others
    zabby_current_epoch                the Zab epoch: it steps at every leader election
    zabby_learner_lag_txns{sid}        the leader's view of each learner: txns not yet acked
    zabby_disk_free_bytes{dir}         free space where dataDir ("data") and dataLogDir ("log") live
    zabby_disk_total_bytes{dir}
    zabby_disk_space_low               1 while the txn log cannot reserve space (writes refused)

Like every figure of the admin endpoint, they come from one frozen ``ServerStatistics``.
``exposition`` is the whole of /metrics: these, mntr's figures as ``zk_*`` gauges and the
request and fsync latency histograms.  prometheus_client (and the 60 modules it imports) is
imported with this module, by the admin endpoint at its first scrape: a server that is never
scraped does not pay for it at start.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from zabby.engine.stats import ServerStats
from zabby.server.adminport import fourletter
from zabby.server.adminport.statistics import Monitored, Part, ServerStatistics, snapshot
from zabby.tree.txns import zxid_counter, zxid_epoch

STATES = ("leader", "follower", "observer", "standalone", "read-only", "looking", "syncing")
SERVING_STATES = frozenset({"leader", "follower", "observer", "standalone", "read-only"})


def learner_lag(leader_zxid: int, acked_zxid: int) -> int:
    """Txns a learner has not acked: within one epoch the counters' difference; a learner
    still in an older epoch lacks every txn of the leader's."""
    if zxid_epoch(acked_zxid) == zxid_epoch(leader_zxid):
        return max(0, leader_zxid - acked_zxid)
    return zxid_counter(leader_zxid)


def families(s: ServerStatistics) -> Iterator[GaugeMetricFamily]:
    yield GaugeMetricFamily("zabby_serving", "1 while this server serves clients", value=int(s.state in SERVING_STATES))
    state = GaugeMetricFamily("zabby_server_state", "1 for this server's mode", labels=["state"])
    for name in STATES:
        state.add_metric([name], int(s.state == name))
    yield state
    yield GaugeMetricFamily("zabby_current_epoch", "the Zab epoch (steps at each leader election)", value=s.current_epoch)
    lag = GaugeMetricFamily("zabby_learner_lag_txns", "leader only: txns each learner has not acked", labels=["sid"])
    for sid, acked in s.learner_acked:
        lag.add_metric([str(sid)], learner_lag(s.last_zxid, acked))
    yield lag
    free = GaugeMetricFamily("zabby_disk_free_bytes", "bytes free for the server in its data folders", labels=["dir", "path"])
    total = GaugeMetricFamily("zabby_disk_total_bytes", "size of the filesystems of the data folders", labels=["dir", "path"])
    for space in s.disk_space or ():
        free.add_metric([space.folder, space.path], space.free_bytes)
        total.add_metric([space.folder, space.path], space.total_bytes)
    yield free
    yield total
    yield GaugeMetricFamily("zabby_disk_space_low", "1 while the txn log cannot reserve space: writes refused", value=int(s.space_low))


class ZabbyCollector(Collector):
    def __init__(self, server: Monitored) -> None:
        self.server = server

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from families(snapshot(self.server, Part.DISK_SPACE))


class MntrCollector(Collector):
    def __init__(self, server: Monitored) -> None:
        self.server = server

    def collect(self) -> Iterator[GaugeMetricFamily]:
        figures = snapshot(self.server, fourletter.parts("mntr"))
        quotas = fourletter.quota_metrics(figures)
        per_namespace = {f"{namespace}_{name}" for name, values in quotas.items() for namespace in values}
        for key, value in fourletter.mntr_data(figures).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in per_namespace:
                yield GaugeMetricFamily(f"zk_{key}", f"mntr {key}", value=value)
        for name, values in quotas.items():  # a namespace is a label: it need not be a metric name
            family = GaugeMetricFamily(f"zk_{name}", f"mntr {name}", labels=["key"])
            for namespace, value in values.items():
                family.add_metric([namespace], value)
            yield family


class LatencyCollector(Collector):
    def __init__(self, stats: ServerStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[HistogramMetricFamily]:
        stats = self.stats
        requests = HistogramMetricFamily("zabby_request_latency_seconds", "Client request latency by kind", labels=["kind"])
        for kind, histogram in (("read", stats.read_latency), ("write", stats.write_latency)):
            requests.add_metric([kind], histogram.buckets(), histogram.total_s)
        yield requests
        fsync = HistogramMetricFamily("zabby_fsync_latency_seconds", "Transaction log fsync latency")
        fsync.add_metric([], stats.fsync_latency.buckets(), stats.fsync_latency.total_s)
        yield fsync


def exposition(server: Monitored) -> bytes:
    """/metrics: the Prometheus text of every collector above, read now."""
    registry = CollectorRegistry()
    for collector in (LatencyCollector(server.stats), MntrCollector(server), ZabbyCollector(server)):
        registry.register(collector)
    return generate_latest(registry)
