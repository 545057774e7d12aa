"""Real 3-server ensembles under the faults that used to end server processes: every server
agrees on the tree digest, and a follower restarted far behind while writes go on syncs by
SNAP, again and again, without any server dying or logging a traceback."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from zabby import SyncClient
from zabby.errors import NodeExistsError
from zabby.testing import Ensemble, wait_until

TICK_MS = 200


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[Ensemble]:
    group = Ensemble(tmp_path, 3, tickTime=TICK_MS, commitLogCount=50, snapCount=2000)
    group.start()
    try:
        yield group
    finally:
        group.kill_all()


def digests(ensemble: Ensemble) -> dict[int, tuple[str, str]]:
    """Each serving server's (last zxid, digest), read together from one mntr."""
    out = {}
    for sid in ensemble.servers:
        try:
            stats = ensemble.servers[sid].mntr()
        except OSError:
            continue
        if "zk_digest" in stats:
            out[sid] = (stats["zk_last_zxid"], stats["zk_digest"])
    return out


def converged(ensemble: Ensemble) -> bool:
    seen = digests(ensemble)
    return len(seen) == len(ensemble.servers) and len(set(seen.values())) == 1


def test_every_server_reports_the_same_digest_at_the_same_zxid(ensemble: Ensemble) -> None:
    client = SyncClient(ensemble.hosts, timeout=6.0)
    client.start()
    client.ensure_path("/d")
    for index in range(100):
        client.create(f"/d/n{index}", str(index).encode(), ephemeral=index % 3 == 0)
        if index % 10 == 0:
            client.set("/d", str(index).encode())
    client.delete("/d/n1")
    wait_until(lambda: converged(ensemble), 20.0, "all servers at one (zxid, digest)")
    client.stop()  # closing the session deletes its ephemerals: the digests move together
    wait_until(lambda: converged(ensemble), 20.0, "all servers at one (zxid, digest) after the close")
    assert all(ensemble.servers[sid].mntr()["zk_digest_mismatches_count"] == "0" for sid in ensemble.servers)


def _write_load(hosts: str, acked: list[str], stop: threading.Event, worker: int) -> None:
    client = SyncClient(hosts, timeout=6.0)
    client.start(timeout=20)
    try:
        for index in range(100_000):
            if stop.is_set():
                return
            path = f"/load/w{worker}-{index}"
            try:
                client.retry(client.create, path, b"x" * 200, makepath=True)
            except NodeExistsError:  # a retried create that had landed
                pass
            acked.append(path)
    finally:
        client.stop()


def test_followers_restarted_far_behind_under_load_sync_by_snap_and_nobody_dies(ensemble: Ensemble) -> None:
    """The race of the fault harness's finding: a SNAP chosen while commits of the same batch
    move the leader's tree on.  Each round kills a follower, lets the others take more than
    the DIFF window, and restarts it while four writers keep going."""
    leader = ensemble.wait_leader()
    acked: list[str] = []
    stop = threading.Event()
    writers = [threading.Thread(target=_write_load, args=(ensemble.hosts, acked, stop, w), daemon=True) for w in range(4)]
    for writer in writers:
        writer.start()
    try:
        for round_ in range(6):
            follower = [sid for sid in ensemble.servers if sid != leader][round_ % 2]
            ensemble.servers[follower].kill()
            target = len(acked) + 300
            wait_until(lambda: len(acked) >= target, 60.0, "writes while the follower is down")
            ensemble.servers[follower].start(wait_s=60)
    finally:
        stop.set()
        for writer in writers:
            writer.join(60)
    for server in ensemble.servers.values():
        assert server.proc is not None and server.proc.poll() is None, server.log_tail()
    wait_until(lambda: converged(ensemble), 30.0, "all servers at one (zxid, digest)")
    client = SyncClient(ensemble.hosts, timeout=6.0)
    client.start()
    client.sync("/load")
    present = set(client.get_children("/load"))
    client.stop()
    missing = [path for path in acked if path.rsplit("/", 1)[1] not in present]
    assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:3]}"
    assert int(ensemble.servers[leader].mntr()["zk_snap_count"]) >= 6
    for sid, server in ensemble.servers.items():
        log = server.log_path.read_text()
        assert "Traceback" not in log and " CRITICAL " not in log, (sid, server.log_tail())


def test_a_snap_that_finds_no_disk_space_leaves_nothing_half_written_and_syncs_once_there_is(ensemble: Ensemble, tmp_path: Path) -> None:
    """A learner writes a SNAP stream to disk as it arrives and installs it at the end; a full
    disk at any point restarts its core (it lives on), removes what it wrote, and the next
    SNAP, once there is space, installs."""
    leader = ensemble.wait_leader()
    follower = next(sid for sid in ensemble.servers if sid != leader)
    server = ensemble.servers[follower]
    # On the leader: a client on the follower killed next may send its first create before it
    # has read the EOF, and that create rightly ends in ConnectionLoss (a clean-clone CI run).
    client = SyncClient(ensemble.servers[leader].hosts, timeout=6.0)
    client.start()
    client.ensure_path("/snap")
    server.kill()
    for index in range(200):  # past the commit log's 50: a SNAP
        client.create(f"/snap/n{index}", b"x" * 100)
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps({"write": "ENOSPC"}))
    server.environment = {"ZABBY_DISK_FAULTS": str(faults)}
    snaps_before = int(ensemble.servers[leader].mntr()["zk_snap_count"])
    server.launch()
    refused = re.compile(r"DiskFull.*(snapshot\.[0-9a-f]{16}\.from\d\.tmp)")  # a staged SNAP's file

    def refused_files() -> set[str]:
        return set(refused.findall(server.log_path.read_text()))

    wait_until(lambda: len(refused_files()) == 1, 30.0, "the SNAP to meet the full disk")
    client.create("/snap/moved", b"")  # the next SNAP is at another zxid: another file
    wait_until(lambda: len(refused_files()) == 2, 30.0, "a second SNAP to meet the full disk")
    snap_dir = server.data_dir / "version-2"
    faults.unlink()
    wait_until(lambda: server.mode() == "follower", 30.0, "the follower to sync once there is space")
    assert int(ensemble.servers[leader].mntr()["zk_snap_count"]) >= snaps_before + 2  # the refused SNAP, then the one installed
    assert server.proc is not None and server.proc.poll() is None, server.log_tail()
    log = server.log_path.read_text()
    assert "restarting the core from disk" in log and "installed a snapshot" in log
    assert "Traceback" not in log and " CRITICAL " not in log, server.log_tail()
    assert not [path.name for path in snap_dir.iterdir() if path.name.startswith("snapshot.") and path.name.endswith(".tmp")]
    follower_client = SyncClient(server.hosts, timeout=6.0)
    follower_client.start()
    assert len(follower_client.get_children("/snap")) == 201
    follower_client.stop()
    client.stop()
