"""Null data (a buffer of length -1: what ZooKeeper's Java and C clients send for a null value,
and kazoo and aiozk for None) through every path of a 3-server ensemble: proposals queued as
regular messages, DIFF, SNAP, the log replayed at a restart, the digest, watches and multi.

Issue 55: a burst of null-data creates reached the leader's proposal-size count, which took
``len(None)``: the leader's core restarted from disk, resynced and crashed again, and no server
served.  A single create did not trigger it, nor a standalone server.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from harness.differential.kazoo_ops import kazoo_call
from tests.jute.conftest import start_kazoo, stop_kazoo
from tests.jute.helpers import OPEN_ACL
from zabby import SyncClient
from zabby.client.states import WatchedEvent
from zabby.opcodes import AddWatchMode, OpCode
from zabby.testing import Ensemble, wait_until
from zabby.wire import jute

TICK_MS = 200
SYNC_LIMIT = 10  # 2 s: a loaded machine's stalls do not drop a follower, a SIGSTOP past it does
BURSTS, BURST = 3, 100


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[Ensemble]:
    group = Ensemble(tmp_path, 3, tickTime=TICK_MS, syncLimit=SYNC_LIMIT, commitLogCount=100)
    try:
        group.start()
        group.wait_leader(everyone=True)
        yield group
    finally:
        group.kill_all()


def _bursts(clients: list[KazooClient], tag: str) -> int:
    """Each client pipelines BURSTS bursts of BURST null-data creates, then as many null
    setData on what it created; the count answered."""
    answered = 0
    for index, kz in enumerate(clients):
        for burst in range(BURSTS):
            paths = [f"/null/{tag}-{index}-{burst}-{n}" for n in range(BURST)]
            for future in [kz.create_async(path, None) for path in paths]:
                future.get(timeout=30)
                answered += 1
            for future in [kz.set_async(path, None) for path in paths]:
                future.get(timeout=30)
                answered += 1
    return answered


def _null_everywhere(ensemble: Ensemble, count: int) -> None:
    """Every server serves ``count`` children of /null, each with null data and version 1 (or
    the multi's), and the same last zxid and digest."""
    readers = [start_kazoo(server.hosts) for server in ensemble.servers.values()]
    try:
        for kz in readers:
            kz.sync("/null")
            children = kz.get_children("/null")
            assert len(children) == count
            for child in children:
                data, stat = kz.get(f"/null/{child}")
                assert data is None and stat.data_length == 0, child
        wait_until(lambda: len({(s.mntr()["zk_last_zxid"], s.mntr()["zk_digest"]) for s in ensemble.servers.values()}) == 1, 20, "equal digests")
    finally:
        for kz in readers:
            stop_kazoo(kz)


def test_null_data_through_every_path_of_a_three_server_ensemble(ensemble: Ensemble) -> None:
    leader = ensemble.wait_leader()
    followers = [sid for sid in ensemble.servers if sid != leader]
    writers = [start_kazoo(server.hosts) for server in ensemble.servers.values()]
    events: list[WatchedEvent] = []
    heard = threading.Lock()

    def record(event: WatchedEvent) -> None:
        with heard:
            events.append(event)

    watcher = SyncClient(ensemble.servers[followers[0]].hosts)  # kazoo 2.11 has no addWatch
    watcher.start()
    try:
        writers[0].create("/null", None)
        watcher.add_watch("/null", record, AddWatchMode.PERSISTENT_RECURSIVE)
        # proposals queued as regular messages: pipelined bursts from a client on every server
        assert _bursts(writers, "burst") == 2 * 3 * BURSTS * BURST
        multi = jute.MultiRequest([  # kazoo's transaction() takes no None: the record as ZooKeeper's clients send it
            (OpCode.CREATE, jute.CreateRequest("/null/multi-a", None, OPEN_ACL, 0)),
            (OpCode.CREATE, jute.CreateRequest("/null/multi-b", None, OPEN_ACL, 0)),
            (OpCode.SET_DATA, jute.SetDataRequest("/null/multi-a", None, -1)),
        ])  # fmt: skip
        results = kazoo_call(writers[1], OpCode.MULTI, multi)
        assert [(kind, err) for kind, err, _ in results] == [(OpCode.CREATE, 0), (OpCode.CREATE, 0), (OpCode.SET_DATA, 0)]
        created = 3 * BURSTS * BURST + 2
        wait_until(lambda: sum(e.type == "CREATED" for e in events) == created, 30, "a created event per node")
        assert sum(e.type == "CHANGED" for e in events) == 3 * BURSTS * BURST + 1
        # DIFF: a follower stopped past syncLimit catches up from the leader's window
        lagging = ensemble.servers[followers[1]]
        assert lagging.proc is not None
        lagging.proc.send_signal(signal.SIGSTOP)
        try:
            for n in range(30):
                writers[0].create(f"/null/diff-{n}", None)
            time.sleep(TICK_MS * SYNC_LIMIT / 1000 + 0.5)
        finally:
            lagging.proc.send_signal(signal.SIGCONT)
        lagging.wait_serving(30)
        created += 30
        _null_everywhere(ensemble, created)
        # SNAP: a follower down while the others take more than the window
        lagging.kill()
        for future in [writers[0].create_async(f"/null/snap-{n}", None) for n in range(300)]:
            future.get(timeout=30)
        lagging.start()
        created += 300
        _null_everywhere(ensemble, created)
        assert "installed a snapshot" in lagging.log_path.read_text()
        assert int(ensemble.servers[leader].mntr()["zk_diff_count"]) >= 1
        # the log and the snapshots, replayed by every server at a restart
        for server in ensemble.servers.values():
            server.kill()
        for server in ensemble.servers.values():
            server.launch()
        ensemble.wait_leader(everyone=True)
        _null_everywhere(ensemble, created)
    finally:
        for kz in writers:
            stop_kazoo(kz)
        watcher.stop()
    for server in ensemble.servers.values():
        log = server.log_path.read_text()
        assert "restarting the core" not in log and "Traceback" not in log
        assert server.mntr()["zk_digest_mismatches_count"] == "0"
