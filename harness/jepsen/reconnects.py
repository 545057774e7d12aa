"""The reconnect soak: one watching zabby client whose connection is cut again and again
while a writer keeps writing, its events then checked against the committed history.

A 3-server zabby ensemble (``Cluster``: every client connection through a proxy the soak
controls); the watch writer (``WatchWriter``) on the servers' own ports, so only the watcher
is cut; one ``ZabbyWatcher`` on the run's root through the proxies, hosts in a fixed order, so
each reconnect goes to the next server (a failover every time).  Each round waits until the
watcher is connected again (its listener heard CONNECTED), lets it run a random 0..``gap_ms``
(a cut may land in the middle of a resume's history, of a multi's events, or of nothing),
then resets every client proxy's connections (RST).  At the end: the end marker, the
watcher's catch-up, the servers' txn logs, and ``check_zxid_events``: zero missed,
duplicated, reordered or mismatched events, and no HISTORY_LOST, for the soak to pass.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.jepsen import clients
from harness.jepsen.cluster import Cluster, ClusterSpec
from harness.jepsen.txn_logs import LogKeeper
from harness.jepsen.watch_checker import CREATED, check_zxid_events
from harness.jepsen.watch_side import CATCH_UP_S, committed_history, setup_watch
from harness.jepsen.watchers import END_MARKER, WATCH_PATH, WatchWriter, ZabbyWatcher, wait_caught_up
from harness.jepsen.workloads import ROOT, WorkloadSpec

START_TIMEOUT_S = 60.0
RECONNECT_TIMEOUT_S = 30.0  # one reconnect (the ensemble is healthy: anything near this is a hang)
SETUP_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class SoakSpec:
    reconnects: int
    workdir: Path
    seed: int = 1
    servers: int = 3
    gap_ms: float = 20.0  # the longest wait between a reconnect and the next cut
    tick_ms: int = 500
    session_timeout_s: float = 10.0


def soak(spec: SoakSpec) -> dict[str, Any]:
    """Run the soak; its figures, ``ok`` and ``failures`` (empty when it passed)."""
    if spec.reconnects < 1:
        raise ValueError(f"reconnects must be 1 or more, not {spec.reconnects}")
    cluster = Cluster(ClusterSpec(system="zabby", servers=spec.servers, workdir=spec.workdir, tick_ms=spec.tick_ms))
    workload = WorkloadSpec(session_timeout_s=spec.session_timeout_s, op_timeout_s=5.0)
    result: dict[str, Any] = {"reconnects_asked": spec.reconnects, "servers": spec.servers, "seed": spec.seed, "failures": []}
    stop_writer = threading.Event()
    writer = watcher = None
    keeper = LogKeeper({sid: server.data_dir for sid, server in cluster.servers.items()}, spec.workdir / "kept-logs")
    started = time.monotonic()
    try:
        if not cluster.start(START_TIMEOUT_S):
            raise RuntimeError(f"the ensemble did not start: {cluster.modes()}")
        direct = ",".join(cluster.direct_hosts(sid) for sid in cluster.servers)
        start_zxid = _setup(direct)
        keeper.start()
        watcher = ZabbyWatcher("soak-watcher", cluster.hosts, WATCH_PATH, start_zxid, workload)
        watcher.start()
        if not watcher.ready.wait(START_TIMEOUT_S):
            raise RuntimeError(f"the watcher did not register: {watcher.error or 'no answer'}")
        writer = WatchWriter("zabby", direct, workload, spec.seed, stop_writer)
        writer.start()
        result["cuts"] = _cut_repeatedly(cluster, watcher, spec)
        stop_writer.set()
        writer.join(workload.op_timeout_s * 3)
        result["writer"] = dict(sorted(writer.outcomes.items()))
        end_zxid = _write_marker(direct)
        caught_up = wait_caught_up([watcher], CREATED, END_MARKER, CATCH_UP_S)[watcher.name]
        watcher.stop()
        keeper.stop()
        _check(keeper, watcher, start_zxid, end_zxid, caught_up, result)
    except Exception as exc:  # noqa: BLE001 - the soak fails with its reason
        result["failures"].append(f"{type(exc).__name__}: {exc}")
    finally:
        stop_writer.set()
        if watcher is not None:
            watcher.stop()
        if keeper.is_alive():
            keeper.stop()
        cluster.stop()
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["ok"] = not result["failures"]
    return result


def _setup(hosts: str) -> int:
    client = clients.open_client("zabby", hosts, 30.0, SETUP_TIMEOUT_S)
    try:
        client.ensure_path(ROOT)
        return setup_watch(client, SETUP_TIMEOUT_S)
    finally:
        clients.close_quietly(client)


def _cut_repeatedly(cluster: Cluster, watcher: ZabbyWatcher, spec: SoakSpec) -> int:
    """Cut the watcher's connection ``spec.reconnects`` times, each once it is back; how many
    cuts found a connection to cut.

    Raises:
        RuntimeError: the watcher did not reconnect within RECONNECT_TIMEOUT_S, or stopped.
    """
    rng = random.Random(spec.seed)
    proxies = list(cluster.client_proxies.values())
    cuts = 0
    for round_index in range(spec.reconnects):
        deadline = time.monotonic() + RECONNECT_TIMEOUT_S
        # A try may find no connection to cut: the client still says connected while its
        # link is already gone (it reconnects on its own).  It is tried again once the
        # watcher is back, until the round's deadline.
        while True:
            _wait_reconnected(watcher, round_index, deadline)
            time.sleep(rng.uniform(0.0, spec.gap_ms / 1000))
            if sum(proxy.reset_connections() for proxy in proxies) > 0:
                cuts += 1
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
    return cuts


def _wait_reconnected(watcher: ZabbyWatcher, round_index: int, deadline: float) -> None:
    """Until the watcher has connected more than ``round_index`` times and is connected.

    Raises:
        RuntimeError: not by ``deadline``, or the watcher stopped.
    """
    while watcher.connects <= round_index or not watcher.client.connected:
        if watcher.error or time.monotonic() > deadline:
            raise RuntimeError(f"round {round_index}: the watcher did not reconnect within {RECONNECT_TIMEOUT_S:g}s {watcher.error}")
        time.sleep(0.002)


def _write_marker(hosts: str) -> int:
    client = clients.open_client("zabby", hosts, 30.0, SETUP_TIMEOUT_S)
    try:
        client.create(END_MARKER, b"")
        return int(client.exists(END_MARKER).czxid)
    finally:
        clients.close_quietly(client)


def _check(keeper: LogKeeper, watcher: ZabbyWatcher, start_zxid: int, end_zxid: int, caught_up: bool, result: dict[str, Any]) -> None:
    history = committed_history(keeper, lambda sid: "zabby")
    holes = history.holes(start_zxid, end_zxid)
    verdict = check_zxid_events(watcher.events, history.expected(WATCH_PATH, start_zxid, end_zxid), start_zxid, end_zxid, history.covers)
    result.update({"watcher_reconnects": watcher.figures()["reconnects"], "caught_up": caught_up, "holes": len(holes),
                   "uncommitted": len(history.uncommitted), "conflicts": len(history.conflicts), **verdict.figures()})  # fmt: skip
    failures = result["failures"]
    if not caught_up:
        failures.append(f"the watcher did not hear the end marker within {CATCH_UP_S:g}s")
    if not verdict.ok or verdict.history_lost:
        failures.append(f"{verdict.missed} missed, {verdict.duplicated} duplicated, {verdict.reordered} reordered, {verdict.mismatched} mismatched, "
                        f"{verdict.history_lost} HISTORY_LOST of {verdict.expected} events, e.g. {verdict.examples}")  # fmt: skip
    if watcher.error:
        failures.append(f"watcher: {watcher.error}")
    if holes:
        failures.append(f"no txn log covers the zxids between {[f'0x{a:x}..0x{b:x}' for a, b in holes[:10]]}: the check is not whole")
