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
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from zabby.server.statistics import Monitored, Part, ServerStatistics, snapshot
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
