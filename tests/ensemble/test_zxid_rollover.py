"""A 3-server ensemble of real processes whose epochs run out of zxid counters: each leader
steps down after the last counter of its epoch (``zxidCounterLast``, lowered here from
ZooKeeper's 0xfffffffe), an election starts the next epoch, and no acknowledged write is lost.

The limit is lowered rather than a log started near 0xfffffffe: every election starts a new
epoch at counter 0, so a running epoch reaches the real limit only after 4 billion writes."""

from __future__ import annotations

from pathlib import Path

from zabby import SyncClient
from zabby.errors import NodeExistsError
from zabby.local import srvr_zxid
from zabby.local.processes import Ensemble, wait_until
from zabby.tree.txns import zxid_counter, zxid_epoch

COUNTER_LAST = 40
WRITES = 200


def last_zxid(ensemble: Ensemble, sid: int) -> int | None:
    """The server's last zxid, None while it does not serve (an election after a step-down)."""
    return srvr_zxid(ensemble.servers[sid].port)


def serving_zxids(ensemble: Ensemble) -> dict[int, int]:
    """Every server's last zxid, once all of them serve."""
    zxids: dict[int, int | None] = {}

    def all_serving() -> bool:
        zxids.update({sid: last_zxid(ensemble, sid) for sid in ensemble.servers})
        return all(zxid is not None for zxid in zxids.values())

    wait_until(all_serving, 30.0, "every server serving")
    return {sid: zxid for sid, zxid in zxids.items() if zxid is not None}


def test_epochs_roll_over_without_losing_an_acknowledged_write(tmp_path: Path) -> None:
    ensemble = Ensemble(tmp_path, 3, tickTime=200, zxidCounterLast=COUNTER_LAST)
    ensemble.start()
    try:
        first_epoch = zxid_epoch(serving_zxids(ensemble)[1])
        client = SyncClient(ensemble.hosts, timeout=6.0)
        client.start(timeout=20)
        acknowledged = []
        for index in range(WRITES):
            path = f"/w{index}"
            try:
                client.retry(client.create, path, b"x")
            except NodeExistsError:  # a retried create that had landed before the step-down
                pass
            acknowledged.append(path)
        client.stop()
        zxids = serving_zxids(ensemble)
        assert all(zxid_counter(zxid) <= COUNTER_LAST for zxid in zxids.values()), zxids
        assert min(zxid_epoch(zxid) for zxid in zxids.values()) >= first_epoch + WRITES // COUNTER_LAST, zxids
        for sid, server in ensemble.servers.items():
            reader = SyncClient(server.hosts, timeout=6.0)
            reader.start(timeout=20)
            try:
                reader.sync("/")
                wait_until(lambda: len(reader.get_children("/")) >= WRITES + 1, 20.0, f"server {sid} has every write")  # noqa: B023
                missing = [path for path in acknowledged if reader.exists(path) is None]
                assert not missing, f"server {sid} lost {missing}"
            finally:
                reader.stop()
        assert all(server.running() for server in ensemble.servers.values())
    finally:
        ensemble.kill_all()
