"""The watch workload within a run (``runner``): start it after the setup, check it after the
final convergence, and put its figures and failures in the run's result.

``result["watch"]``: ``start_zxid`` (the setup's last write, where every watch starts),
``end_zxid`` (the end marker's), the merged logs' ``txns``, ``gaps`` and ``conflicts``, the
``expected`` events, the writer's outcomes, and per watcher its figures (``watch_checker``)
and whether it heard the marker (``caught_up``).  For zabby, every watcher must have caught up
with nothing missed, duplicated, reordered or mismatched and no HISTORY_LOST; for ZooKeeper
the same figures are the report (its client re-registers a persistent watch after a reconnect
without the changes made meanwhile).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.jepsen import clients
from harness.jepsen.cluster import Cluster
from harness.jepsen.converge import reader_kind
from harness.jepsen.txn_logs import LogKeeper
from harness.jepsen.watch_checker import CREATED, Change, CommittedHistory, WatchVerdict, check_unzxid_events, check_zxid_events
from harness.jepsen.watchers import (
    END_MARKER,
    FIXED,
    READY_TIMEOUT_S,
    WATCH_PATH,
    JavaWatcher,
    Watcher,
    WatchWriter,
    ZabbyWatcher,
    preferring,
    setup_watched,
    wait_caught_up,
)
from harness.jepsen.workloads import WorkloadSpec

CATCH_UP_S = 30.0
MARKER_TIMEOUT_S = 20.0
REPORTED_MAX = 10


def setup_watch(client: Any, timeout_s: float) -> int:
    """The writer's nodes; the zxid every watch starts at (the last of the setup's writes)."""
    setup_watched(client, timeout_s)
    return int(clients.call(client.exists_async, FIXED, timeout_s=timeout_s).czxid)


def committed_history(keeper: LogKeeper, kind_of: Callable[[int], str]) -> CommittedHistory:
    """Every server's kept log merged (``watch_checker.CommittedHistory``); ``kind_of``: a
    server's kind ("zabby" or "zookeeper"), whose log format it wrote."""
    history = CommittedHistory()
    for sid in sorted(keeper.data_dirs):
        history.add_log(keeper.server_txns(sid, kind_of(sid)), keeper.snapshots[sid])
    return history


class WatchSide:
    """One watcher per server (each preferring its server) and the watch writer."""

    def __init__(self, cluster: Cluster, spec: WorkloadSpec, seed: int, run_dir: Path, stop_writer: Any) -> None:
        self.cluster, self.spec, self.run_dir = cluster, spec, run_dir
        self.system = cluster.spec.system
        self.writer = WatchWriter(reader_kind(self.system), cluster.hosts, spec, seed, stop_writer)
        self.watchers: list[Watcher] = []
        self.keeper = LogKeeper({sid: server.data_dir for sid, server in cluster.every.items()}, run_dir / "kept-logs")
        self.start_zxid = 0
        self._closed = False

    def start(self, start_zxid: int) -> None:
        """Every watcher registered (bounded wait), then the writer started.

        Raises:
            RuntimeError: a watcher was not ready within READY_TIMEOUT_S.
        """
        self.start_zxid = start_zxid
        self.keeper.start()
        hosts = self.cluster.hosts.split(",")
        for index, sid in enumerate(sorted(self.cluster.every)):
            if sid not in self.cluster.servers:
                continue
            name, connect = f"watch-{sid}", preferring(hosts, index)
            watcher: Watcher
            if self.system == "zabby":
                watcher = ZabbyWatcher(name, connect, WATCH_PATH, start_zxid, self.spec)
            else:
                watcher = JavaWatcher(name, connect, WATCH_PATH, self.spec, self.run_dir / f"{name}.log")
            self.watchers.append(watcher)
            watcher.start()
        late = [w.name for w in self.watchers if not w.ready.wait(READY_TIMEOUT_S) or w.error]
        if late:
            errors = {w.name: w.error for w in self.watchers if w.error}
            raise RuntimeError(f"watchers not registered within {READY_TIMEOUT_S:g}s: {late} {errors or ''}")
        self.writer.start()

    def check(self, result: dict[str, Any], failures: list[str], notes: list[str]) -> None:
        """After the final convergence: the marker, each watcher's catch-up, the logs, the verdicts."""
        record: dict[str, Any] = {"start_zxid": self.start_zxid, "writer": dict(sorted(self.writer.outcomes.items()))}
        result["watch"] = record
        if self.writer.error:
            failures.append(f"watch writer stopped: {self.writer.error}")
        end_zxid = self._write_marker()
        caught_up = wait_caught_up(self.watchers, CREATED, END_MARKER, CATCH_UP_S)
        self.close()
        history = committed_history(self.keeper, self.cluster.spec.kind)
        record.update({"end_zxid": end_zxid, "txns": len(history.changes), "uncommitted": len(history.uncommitted), "conflicts": len(history.conflicts)})
        if self.keeper.error:
            notes.append(f"log keeper: {self.keeper.error}")
        if history.zxid_of(CREATED, END_MARKER) != end_zxid:
            failures.append(f"the watch's end marker (zxid 0x{end_zxid:x}) is not in the servers' txn logs")
            return
        holes = history.holes(self.start_zxid, end_zxid)
        expected = history.expected(WATCH_PATH, self.start_zxid, end_zxid)
        record.update({"holes": len(holes), "expected": len(expected), "watchers": {}})
        if holes:
            notes.append(f"no txn log covers the zxids between {[f'0x{a:x}..0x{b:x}' for a, b in holes[:REPORTED_MAX]]}: events there unverifiable")
        if history.uncommitted:
            notes.append(f"txns logged but never committed (past their epoch's committed end), not expected: {[f'0x{z:x}' for z in history.uncommitted[:REPORTED_MAX]]}")
        if history.conflicts:
            notes.append(f"txn logs disagree at zxids {[f'0x{z:x}' for z in history.conflicts[:REPORTED_MAX]]} (the first log's txn kept)")
        for watcher in self.watchers:
            verdict = self._verdict(watcher, expected, end_zxid, history)
            record["watchers"][watcher.name] = {**verdict.figures(), "caught_up": caught_up[watcher.name], **watcher.figures()}
            self._judge(watcher, verdict, caught_up[watcher.name], failures, notes)

    def _verdict(self, watcher: Watcher, expected: list[Change], end_zxid: int, history: CommittedHistory) -> WatchVerdict:
        if self.system == "zabby":
            return check_zxid_events(watcher.events, expected, self.start_zxid, end_zxid, history.covers)
        events = list(watcher.events)
        marker = next((i for i, e in enumerate(events) if e.type == CREATED and e.path == END_MARKER), None)
        return check_unzxid_events(events if marker is None else events[: marker + 1], expected)

    def _judge(self, watcher: Watcher, verdict: WatchVerdict, caught_up: bool, failures: list[str], notes: list[str]) -> None:
        figures = f"{verdict.missed} missed, {verdict.duplicated} duplicated, {verdict.reordered} reordered, {verdict.mismatched} mismatched"
        if watcher.error:
            (failures if self.system == "zabby" else notes).append(f"{watcher.name}: {watcher.error}")
        if self.system != "zabby":
            if not verdict.ok or not caught_up:
                notes.append(f"{watcher.name} (ZooKeeper's Java client, reported, not failed): {verdict.missed} missed, {verdict.duplicated} duplicated "
                             f"of {verdict.expected}; heard the end marker: {caught_up}")  # fmt: skip
            return
        if not caught_up:
            failures.append(f"{watcher.name} did not hear the end marker within {CATCH_UP_S:g}s")
        if not verdict.ok:
            failures.append(f"{watcher.name}: {figures} of {verdict.expected} events, e.g. {verdict.examples}")
        if verdict.history_lost:
            failures.append(f"{watcher.name} heard HISTORY_LOST {verdict.history_lost} times: {verdict.examples.get('history_lost')}")

    def _write_marker(self) -> int:
        """The end marker created through a serving server; its zxid."""
        hosts = ",".join(self.cluster.direct_hosts(sid) for sid in self.cluster.servers)
        client = clients.open_client(reader_kind(self.system), hosts, 30.0, MARKER_TIMEOUT_S)
        try:
            clients.call(client.create_async, END_MARKER, b"", timeout_s=MARKER_TIMEOUT_S)
            return int(clients.call(client.exists_async, END_MARKER, timeout_s=MARKER_TIMEOUT_S).czxid)
        finally:
            clients.close_quietly(client)

    def close(self) -> None:
        """Stop the watchers (the writer stops with the workers).  Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for watcher in self.watchers:
            watcher.stop()
        if self.keeper.is_alive():
            self.keeper.stop()
