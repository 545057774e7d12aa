"""The simulated file system under the storage's own code: what a crash may keep or lose."""

from __future__ import annotations

import errno
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zabby.sim.fs import SimFS
from zabby.storage.datadir import DataDir
from zabby.storage.epochs import read_epoch, write_epoch
from zabby.storage.files import DiskFailure, DiskFull
from zabby.storage.fs import CREATE_NEW
from zabby.storage.txnlog import TxnLog

LOG_DIR = Path("/sim/1/version-2")


def payload(zxid: int) -> bytes:
    """No byte of it is one bit away from zero (no space, no ``@``): a torn write that zeroed a
    record's last byte, with a later write reordered in after it, would otherwise look exactly
    like one flipped bit in a record that may have been acknowledged, which the log refuses to
    cut (``txnlog._flipped``: the safe side of the ambiguity; about 3 in 20,000 examples drew it
    with the space this payload had)."""
    return f"txn-{zxid};".encode() * (zxid % 7 + 1)


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(st.tuples(st.integers(1, 5), st.booleans()), min_size=1, max_size=12),
    seed=st.integers(0, 2**32),
    torn=st.booleans(),
    reorder=st.booleans(),
    reserve=st.sampled_from([0, 64, 4096]),
    segment_bytes_max=st.sampled_from([64, 400, 1 << 20]),
)
def test_a_crash_keeps_every_synced_record_and_a_clean_prefix_of_the_rest(
    batches: list[tuple[int, bool]], seed: int, torn: bool, reorder: bool, reserve: int, segment_bytes_max: int
) -> None:
    fs = SimFS()
    log = TxnLog(LOG_DIR, fs=fs, reserve_bytes=reserve, segment_bytes_max=segment_bytes_max)
    log.open()
    zxid, synced = 0, 0
    for count, sync in batches:
        log.append([(z, payload(z)) for z in range(zxid + 1, zxid + count + 1)])
        zxid += count
        if sync:
            log.sync()
            synced = zxid
    fs.crash(random.Random(seed), torn=torn, reorder=reorder)
    reopened = TxnLog(LOG_DIR, fs=fs, reserve_bytes=reserve, segment_bytes_max=segment_bytes_max)
    reopened.open()
    records = list(reopened.read_from(0))
    assert [z for z, _ in records] == list(range(1, len(records) + 1)), "a gap or a step back"
    assert all(data == payload(z) for z, data in records)
    assert len(records) >= synced, f"synced to {synced}, recovered {len(records)}"
    reopened.append([(len(records) + 1, b"after")])  # and it goes on from there
    reopened.sync()


def test_unsynced_names_may_vanish_and_synced_ones_stay() -> None:
    fs = SimFS()
    fs.makedirs(LOG_DIR)
    write_epoch(LOG_DIR / "currentEpoch", 4, fs=fs)  # atomic: tmp, fsync, rename, fsync dir
    fd = fs.open(LOG_DIR / "unsynced", CREATE_NEW)
    fs.write(fd, b"x")
    fs.fsync(fd)  # the file's bytes, not its name
    for seed in range(20):
        copy = SimFS()
        copy.makedirs(LOG_DIR)
        write_epoch(LOG_DIR / "currentEpoch", 4, fs=copy)
        write_epoch(LOG_DIR / "currentEpoch", 5, fs=copy)
        copy.crash(random.Random(seed), torn=True, reorder=True)
        assert read_epoch(LOG_DIR / "currentEpoch", fs=copy) == 5
    lost = 0
    for seed in range(40):
        again = SimFS()
        again.makedirs(LOG_DIR)
        fd = again.open(LOG_DIR / "unsynced", CREATE_NEW)
        again.write(fd, b"x")
        again.fsync(fd)
        again.crash(random.Random(seed), torn=False, reorder=False)
        lost += "unsynced" not in again.files(LOG_DIR)
    assert 0 < lost < 40


def test_injected_errors_reach_the_storage_as_its_failure_policy_says() -> None:
    fs = SimFS()
    log = TxnLog(LOG_DIR, fs=fs)
    log.open()
    log.append([(1, b"a")])
    fs.fail_next("fsync", errno.EIO)
    with pytest.raises(DiskFailure):
        log.sync()
    fs.full = True
    with pytest.raises(DiskFull):
        log.append([(2, b"b" * 100)])
    assert log.last_zxid == 1


def test_a_flipped_bit_in_a_synced_record_is_detected() -> None:
    fs = SimFS()
    datadir = DataDir(Path("/sim/1"), fs=fs)
    tree, log = datadir.recover(segment_bytes_max=64)
    for zxid in range(1, 6):
        log.append([(zxid, payload(zxid))])
    log.sync()
    datadir.close()
    segments = [path for path in fs.paths() if path.name.startswith("log.")]
    fs.flip_bit(random.Random(1), segments[0])
    with pytest.raises(Exception, match="damaged|CRC|not a zabby"):
        DataDir(Path("/sim/1"), fs=fs).recover(segment_bytes_max=64)


def test_a_member_starts_a_repair_of_a_damaged_history_and_a_standalone_server_refuses_to_start() -> None:
    from zabby.config import ServerConfig
    from zabby.engine.storage import Storage
    from zabby.sim.cluster import sim_member
    from zabby.storage.datadir import REPAIR_MARKER
    from zabby.tree.txns import Txn, make_zxid

    def damaged(peers: bool) -> tuple[SimFS, ServerConfig]:
        members = tuple(sim_member(sid) for sid in (1, 2, 3)) if peers else ()
        config = ServerConfig(data_dir=Path("/sim/1"), data_log_dir=Path("/sim/1"), peers=members, server_id=1,
                              log_reserve_bytes=0)  # fmt: skip
        fs = SimFS()
        storage = Storage(config, fs=fs, segment_bytes_max=64)
        storage.recover(None)
        txns = [Txn(make_zxid(1, n), 1, n, 0, 1, (f"/n{n}", b"", [], 0, n)) for n in range(1, 6)]
        for txn in txns:
            storage.append([txn])
        storage.sync()
        storage.write_current_epoch(1)
        storage.close()
        first = next(path for path in fs.paths() if path.name.startswith("log."))
        fs.flip_bit(random.Random(3), first)
        return fs, config

    fs, config = damaged(peers=True)
    storage = Storage(config, fs=fs)
    recovered = storage.recover(None)
    assert recovered.durable.repairing and recovered.tree.last_zxid == 0
    assert REPAIR_MARKER in fs.files(storage.snap_dir)
    assert read_epoch(storage.datadir.current_epoch_path, fs=fs) == 1  # the epochs stay
    storage.write_current_epoch(2)  # a leader synced it (NEWLEADER)
    assert not storage.datadir.repairing
    fs, config = damaged(peers=False)
    with pytest.raises(Exception, match="damaged"):
        Storage(config, fs=fs).recover(None)
