"""Real 3-server ensembles on 127.0.0.1: election, replication through followers, leader
failover under load without losing acknowledged writes, lagging and stopped followers
catching up by DIFF and SNAP, and four-letter words while there is no quorum."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.local.proxied import ProxiedEnsemble
from tests.server.wire import OPEN_ACL, raw_session
from zabby import SyncClient
from zabby.storage.snapshot import list_snapshots, read_snapshot
from zabby.testing import Ensemble, wait_until
from zabby.tree.datatree import DataTree

TICK_MS = 200


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[Ensemble]:
    group = Ensemble(tmp_path, 3, tickTime=TICK_MS, commitLogCount=100)
    group.start()
    try:
        yield group
    finally:
        group.kill_all()


def test_leader_elected_quickly_and_writes_replicate(tmp_path: Path) -> None:
    group = Ensemble(tmp_path, 3, tickTime=TICK_MS)
    try:
        for server in group.servers.values():
            server.launch()
        # Timed from the moment every process answers on its port: an interpreter's start-up
        # takes seconds on a loaded machine (parallel test workers), the election must not.
        wait_until(lambda: all(server.mode() != "down" for server in group.servers.values()), 60, "every server up")
        up = time.monotonic()
        leader = group.wait_leader(everyone=True)
        assert time.monotonic() - up < 2 * TICK_MS * 10 / 1000 + 2  # 2 x tickTime x initLimit, and a loaded machine's stalls
        modes = group.modes()
        assert sorted(modes.values()) == ["follower", "follower", "leader"]
        leader_mntr = group.servers[leader].mntr()
        assert leader_mntr["zk_server_state"] == "leader"
        assert leader_mntr["zk_synced_followers"] == "2"
        assert leader_mntr["zk_quorum_size"] == "3"  # the voters, as ZooKeeper counts them (not the majority)
        # ZooKeeper 3.8's leader-only gauges (LeaderZooKeeperServer), with its meanings
        assert (leader_mntr["zk_learners"], leader_mntr["zk_synced_non_voting_followers"], leader_mntr["zk_pending_syncs"]) == ("2", "0", "0")
        assert int(leader_mntr["zk_leader_uptime"]) >= 0
        follower = next(sid for sid in group.servers if sid != leader)
        follower_mntr = group.servers[follower].mntr()
        assert follower_mntr["zk_quorum_size"] == "3" and "zk_learners" not in follower_mntr and "zk_pending_syncs" not in follower_mntr
        session = raw_session(group.servers[follower].port)
        for index in range(50):
            assert session.create(f"/via-follower-{index}", str(index).encode())[2] == 0
        for sid, server in group.servers.items():
            reader = raw_session(server.port)
            assert reader.call(9, "/")[2] == 0  # sync, then read
            names = reader.call(8, "/", False)[3]
            assert all(f"via-follower-{i}" in names for i in range(50)), sid
    finally:
        group.kill_all()


def _writer(hosts: str, acked: list[str], stop: threading.Event, errors: list[BaseException]) -> None:
    client = SyncClient(hosts, timeout=6.0)
    client.start(timeout=20)
    index = 0
    try:
        while not stop.is_set() and index < 20000:
            path = f"/load/n{index}"
            try:
                client.retry(client.create, path, b"x", makepath=True)
                acked.append(path)
            except Exception as exc:  # NodeExists after a retried create that had landed
                if type(exc).__name__ == "NodeExistsError":
                    acked.append(path)
                else:
                    errors.append(exc)
            index += 1
    finally:
        client.stop()


def test_leader_killed_under_load_loses_no_acknowledged_write(ensemble: Ensemble) -> None:
    leader = ensemble.wait_leader()
    acked: list[str] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    watcher = SyncClient(ensemble.hosts, timeout=6.0)
    watcher.start()
    session_before = watcher.client_id
    writer = threading.Thread(target=_writer, args=(ensemble.hosts, acked, stop, errors), daemon=True)
    writer.start()
    deadline = time.monotonic() + 20
    while len(acked) < 300 and time.monotonic() < deadline:
        time.sleep(0.02)
    ensemble.servers[leader].kill()
    new_leader = ensemble.wait_leader(excluding=leader)
    count_at_failover = len(acked)
    deadline = time.monotonic() + 20
    while len(acked) < count_at_failover + 300 and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    writer.join(30)
    assert not errors, errors[:3]
    assert len(acked) >= count_at_failover + 300, "writes resumed after the failover"
    watcher.sync("/")
    present = set(watcher.get_children("/load"))
    missing = [p for p in acked if p.rsplit("/", 1)[1] not in present]
    assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:5]}"
    assert watcher.client_id == session_before, "the client kept its session across the failover"
    assert new_leader != leader
    watcher.stop()


def test_lagging_follower_catches_up_by_diff_and_a_restarted_one_by_snap(ensemble: Ensemble) -> None:
    leader = ensemble.wait_leader()
    follower = next(sid for sid in ensemble.servers if sid != leader)
    proc = ensemble.servers[follower].proc
    assert proc is not None
    client = SyncClient(ensemble.servers[leader].hosts)
    client.start()
    client.ensure_path("/lag")
    proc.send_signal(signal.SIGSTOP)
    try:
        for index in range(30):  # within the leader's 100-txn window: DIFF
            client.create(f"/lag/a{index}", b"a")
        time.sleep(TICK_MS * 5 / 1000 + 0.5)  # past syncLimit: the leader drops it
    finally:
        proc.send_signal(signal.SIGCONT)
    ensemble.servers[follower].wait_serving(30)
    _wait_children(ensemble, follower, "/lag", 30)
    leader_stats = ensemble.servers[leader].mntr()
    assert int(leader_stats["zk_diff_count"]) >= 1 and leader_stats["zk_snap_count"] == "0"
    ensemble.servers[follower].kill()  # down while the others take more than the window
    for index in range(300):
        client.create(f"/lag/b{index}", b"b")
    ensemble.servers[follower].start()
    _wait_children(ensemble, follower, "/lag", 330)
    log = ensemble.servers[follower].log_path.read_text()
    assert "installed a snapshot" in log
    assert "not computed beside it" not in log  # its digest child gave the SNAP's digest
    leader_stats, follower_stats = ensemble.servers[leader].mntr(), ensemble.servers[follower].mntr()
    assert (follower_stats["zk_last_zxid"], follower_stats["zk_digest"]) == (leader_stats["zk_last_zxid"], leader_stats["zk_digest"])
    assert follower_stats["zk_digest_mismatches_count"] == "0"
    assert int(ensemble.servers[leader].mntr()["zk_snap_count"]) >= 1
    # the SNAP went to disk as it arrived: one finished snapshot file, nothing left half written
    snap_dir = ensemble.servers[follower].data_dir / "version-2"
    assert not [path.name for path in snap_dir.iterdir() if path.name.startswith("snapshot.") and path.name.endswith(".tmp")]
    installed_zxid, installed = list_snapshots(snap_dir)[0]
    _, records = read_snapshot(installed)
    assert DataTree.from_records(records).last_zxid == installed_zxid
    client.stop()


def _wait_children(ensemble: Ensemble, sid: int, path: str, count: int) -> None:
    """Until server ``sid`` serves ``count`` children of ``path`` (it may resync meanwhile)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            reply = raw_session(ensemble.servers[sid].port).call(8, path, False)
            if reply[2] == 0 and len(reply[3]) >= count:
                return
        except (ConnectionError, OSError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"server {sid} has not caught up on {path}")


def test_no_quorum_means_not_serving(ensemble: Ensemble) -> None:
    leader = ensemble.wait_leader()
    followers = [sid for sid in ensemble.servers if sid != leader]
    for sid in followers:
        ensemble.servers[sid].kill()
    deadline = time.monotonic() + 10
    answer = ""
    while time.monotonic() < deadline:
        answer = ensemble.servers[leader].four_letter("srvr")
        if "not currently serving" in answer:
            break
        time.sleep(0.05)
    assert answer == "This ZooKeeper instance is not currently serving requests\n"
    assert ensemble.servers[leader].four_letter("ruok") == "imok"
    refused = raw_session(ensemble.servers[leader].port)
    assert refused.err != 0
    for sid in followers:
        ensemble.servers[sid].start()
    ensemble.wait_leader()
    assert raw_session(ensemble.servers[leader].port).call(1, "/after", b"", OPEN_ACL, 0, 0)[2] == 0


def test_partitioned_leader_stops_serving_and_rejoins(tmp_path: Path) -> None:
    group = ProxiedEnsemble(tmp_path, 3, tickTime=TICK_MS)
    group.start()
    try:
        old = group.wait_leader()
        session = raw_session(group.servers[old].port)
        assert session.create("/before", b"1")[2] == 0
        group.partition({old})
        group.servers[old].wait_mode({"not serving"})  # a leader without quorum steps down
        new = group.wait_leader(excluding=old)
        writer = raw_session(group.servers[new].port)
        assert writer.create("/during", b"2")[2] == 0
        assert group.servers[old].mode() == "not serving"
        group.partition({old}, cut=False)
        group.servers[old].wait_mode({"follower"})
        _wait_children(group, old, "/", 3)  # zookeeper, before, during
        names = raw_session(group.servers[old].port).call(8, "/", False)[3]
        assert {"before", "during"} <= set(names)
    finally:
        group.kill_all()


def test_five_servers_survive_two_failures(tmp_path: Path) -> None:
    group = Ensemble(tmp_path, 5, tickTime=TICK_MS)
    group.start()
    try:
        leader = group.wait_leader()
        session = SyncClient(group.hosts, timeout=6.0)
        session.start()
        session.create("/five", b"x")
        follower = next(sid for sid in group.servers if sid != leader)
        group.servers[leader].kill()
        group.servers[follower].kill()
        group.wait_leader(excluding=leader)
        session.retry(session.set, "/five", b"y")
        assert session.get("/five")[0] == b"y"
        session.stop()
    finally:
        group.kill_all()
