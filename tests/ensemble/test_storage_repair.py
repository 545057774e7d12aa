"""A member of a real 3-server ensemble whose log has a flipped bit repairs it from the leader.

The server is killed, one bit of a record in the middle of its log is flipped (a record a
crash cannot have torn: records after it are intact), and it is started again.  It finds the
damage, moves its history to ``version-2/damaged/``, comes back empty, votes for nobody, and
the leader sends it everything; no acknowledged write is missing from it afterwards.
"""

from __future__ import annotations

from pathlib import Path

from zabby import SyncClient
from zabby.storage.datadir import QUARANTINE_DIR, REPAIR_MARKER, VERSION_DIR
from zabby.storage.txnlog import read_segment
from zabby.testing import Ensemble, wait_until

WRITES = 40


def flip_a_bit_in_a_middle_record(log_dir: Path) -> None:
    segment = sorted(log_dir.glob("log.*"))[0]
    ends = [end for _zxid, _payload, end in read_segment(segment)]
    assert len(ends) > 10, ends
    raw = bytearray(segment.read_bytes())
    raw[ends[len(ends) // 2] - 3] ^= 0x10  # inside a record's payload, records after it intact
    segment.write_bytes(bytes(raw))


def test_a_member_with_a_flipped_bit_in_its_log_is_repaired_by_the_leader(tmp_path: Path) -> None:
    ensemble = Ensemble(tmp_path, 3, tickTime=200)
    ensemble.start()
    try:
        client = SyncClient(ensemble.hosts, timeout=6.0)
        client.start(timeout=20)
        for index in range(WRITES):
            client.create(f"/r{index}", b"x" * 64)
        leader = ensemble.wait_leader()
        victim = next(sid for sid in sorted(ensemble.servers) if sid != leader)
        server = ensemble.servers[victim]
        server.kill()
        flip_a_bit_in_a_middle_record(server.data_dir / VERSION_DIR)
        for index in range(WRITES, WRITES + 10):  # the two others go on meanwhile
            client.retry(client.create, f"/r{index}", b"y")
        client.stop()
        server.restart()
        server.wait_serving(30.0)
        snap_dir = server.data_dir / VERSION_DIR
        assert (snap_dir / QUARANTINE_DIR).is_dir() and any((snap_dir / QUARANTINE_DIR).glob("log.*"))
        assert "starting over empty" in server.log_tail(400)
        reader = SyncClient(server.hosts, timeout=6.0)
        reader.start(timeout=20)
        try:
            reader.sync("/")
            missing = [f"/r{index}" for index in range(WRITES + 10) if reader.exists(f"/r{index}") is None]
            assert not missing, f"server {victim} lacks {missing}"
        finally:
            reader.stop()
        wait_until(lambda: not (snap_dir / REPAIR_MARKER).exists(), 10.0, "the repair marker removed")
    finally:
        ensemble.kill_all()
