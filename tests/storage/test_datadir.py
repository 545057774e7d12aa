from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.storage.helpers import TxnMaker, as_records, tree_of
from zabby.storage import DataDir, RecoveryError, list_snapshots
from zabby.storage.snapshot import write_snapshot
from zabby.tree.datatree import DataTree
from zabby.tree.txns import Txn


def commit(data_dir: DataDir, tree: DataTree, txns: list[Txn]) -> None:
    """What the server does: log, sync, then apply."""
    assert data_dir.log is not None
    data_dir.log.append(as_records(txns))
    data_dir.log.sync()
    for txn in txns:
        tree.apply(txn)


def build_history(tmp_path: Path, snapshot_rounds: int, **kwargs: object) -> tuple[list[Txn], list[Path]]:
    """``snapshot_rounds`` x (50 txns, snapshot), then 30 more txns; closed afterwards."""
    maker, txns, snapshots = TxnMaker(), [], []
    data_dir = DataDir(tmp_path / "data", **kwargs)  # type: ignore[arg-type]
    tree, _log = data_dir.recover()
    for _ in range(snapshot_rounds):
        batch = maker.some(50)
        commit(data_dir, tree, batch)
        txns += batch
        snapshots.append(data_dir.take_snapshot(tree.records(), tree.last_zxid))
    tail = maker.some(30)
    commit(data_dir, tree, tail)
    data_dir.close()
    return txns + tail, snapshots


def recover_digest(tmp_path: Path, **kwargs: object) -> str:
    data_dir = DataDir(tmp_path / "data", **kwargs)  # type: ignore[arg-type]
    tree, log = data_dir.recover()
    assert log.last_zxid == tree.last_zxid
    data_dir.close()
    return tree.content_hash()


def damage(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))


def test_a_fresh_directory_recovers_an_empty_tree(tmp_path: Path) -> None:
    data_dir = DataDir(tmp_path / "data")
    tree, log = data_dir.recover()
    assert tree.content_hash() == DataTree().content_hash() and log.last_zxid == 0
    assert (tmp_path / "data" / "version-2").is_dir()
    data_dir.close()


def test_recovery_from_the_log_alone(tmp_path: Path) -> None:
    txns, _ = build_history(tmp_path, snapshot_rounds=0)
    assert recover_digest(tmp_path) == tree_of(txns).content_hash()


def test_recovery_from_snapshot_plus_log(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    txns, snapshots = build_history(tmp_path, snapshot_rounds=2)
    with caplog.at_level(logging.INFO, logger="zabby.storage"):
        assert recover_digest(tmp_path) == tree_of(txns).content_hash()
    assert f"snapshot at zxid 0x{txns[99].zxid:x}, 30 txns replayed" in caplog.text


def test_a_damaged_snapshot_falls_back_to_the_previous_one(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    txns, snapshots = build_history(tmp_path, snapshot_rounds=3)
    damage(snapshots[-1])
    snapshots[-2].write_bytes(snapshots[-2].read_bytes()[:-100])
    with caplog.at_level(logging.INFO, logger="zabby.storage"):
        assert recover_digest(tmp_path) == tree_of(txns).content_hash()
    assert f"skipping damaged snapshot {snapshots[-1]}: " in caplog.text and "CRC mismatch" in caplog.text
    assert f"skipping damaged snapshot {snapshots[-2]}: " in caplog.text
    assert f"snapshot at zxid 0x{txns[49].zxid:x}, 130 txns replayed" in caplog.text


def test_a_snapshot_holding_another_zxid_than_its_name_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """What a learner once installed from a SNAP whose tree was one txn ahead of what it
    declared: it is no base for the log, so recovery falls back as for a damaged one."""
    txns, snapshots = build_history(tmp_path, snapshot_rounds=2)
    newest = snapshots[-1]
    wrong = tree_of(txns[:101])  # one txn past the name
    newest.unlink()
    write_snapshot(newest.parent, txns[99].zxid, wrong.records())
    with caplog.at_level(logging.INFO, logger="zabby.storage"):
        assert recover_digest(tmp_path) == tree_of(txns).content_hash()
    assert f"skipping snapshot {newest}: its name, header and tree disagree" in caplog.text
    assert f"snapshot at zxid 0x{txns[49].zxid:x}, 80 txns replayed" in caplog.text


def test_all_snapshots_damaged_with_the_full_log_replays_everything(tmp_path: Path) -> None:
    txns, snapshots = build_history(tmp_path, snapshot_rounds=2)
    for path in snapshots:
        damage(path)
    assert recover_digest(tmp_path) == tree_of(txns).content_hash()


def test_all_snapshots_damaged_and_the_log_purged_refuses(tmp_path: Path) -> None:
    build_history(tmp_path, snapshot_rounds=4)
    data_dir = DataDir(tmp_path / "data")
    data_dir.purge()
    for _zxid, path in list_snapshots(data_dir.snap_dir):
        damage(path)
    with pytest.raises(RecoveryError, match="all 3 snapshots .* are damaged"):
        data_dir.recover()


def test_purge_keeps_three_snapshots_and_the_logs_they_need(tmp_path: Path) -> None:
    txns, snapshots = build_history(tmp_path, snapshot_rounds=5, snap_retain_count=1)
    data_dir = DataDir(tmp_path / "data", snap_retain_count=1)
    assert data_dir.snap_retain_count == 3
    log_bytes_before = data_dir.log_dir_bytes()
    removed = data_dir.purge()
    assert set(snapshots[:2]) <= set(removed)
    assert [path for _, path in list_snapshots(data_dir.snap_dir)] == snapshots[:1:-1]
    assert data_dir.log_dir_bytes() < log_bytes_before
    assert data_dir.purge() == []  # idempotent
    expected = tree_of(txns).content_hash()
    assert recover_digest(tmp_path) == expected
    damage(snapshots[-1])
    damage(snapshots[-2])
    assert recover_digest(tmp_path) == expected  # the oldest kept snapshot still has its log


def test_purge_with_the_log_open_and_appends_afterwards(tmp_path: Path) -> None:
    maker = TxnMaker()
    data_dir = DataDir(tmp_path / "data")
    tree, log = data_dir.recover()
    for _ in range(6):
        commit(data_dir, tree, maker.some(20))
        data_dir.take_snapshot(tree.records(), tree.last_zxid)
    data_dir.purge()
    commit(data_dir, tree, maker.some(20))
    data_dir.close()
    assert len(list_snapshots(data_dir.snap_dir)) == 3
    assert recover_digest(tmp_path) == tree.content_hash()


def test_a_snapshot_past_the_log_end_clears_the_log(tmp_path: Path) -> None:
    maker = TxnMaker()
    data_dir = DataDir(tmp_path / "data")
    tree, log = data_dir.recover()
    commit(data_dir, tree, maker.some(20))
    data_dir.take_snapshot(tree.records(), tree.last_zxid)
    leader_maker = TxnMaker()  # the leader's history: ours, and 40 txns we never saw
    leader_txns = leader_maker.some(60)
    leader_tree = tree_of(leader_txns)
    staged = data_dir.stage_snapshot(leader_tree.last_zxid, sid=2)  # Zab SNAP: written as it arrives
    records = list(leader_tree.records())
    for start in range(0, len(records), 7):
        staged.add(records[start : start + 7])
    assert staged.tmp.exists() and [zxid for zxid, _ in list_snapshots(data_dir.snap_dir)] == [tree.last_zxid]
    data_dir.install_snapshot(staged)
    assert log.segments() == [] and log.last_zxid == 0
    assert not [path for path in data_dir.snap_dir.iterdir() if path.name.endswith(".tmp")]
    follow_up = leader_maker.some(10)
    log.append(as_records(follow_up))
    data_dir.close()
    expected = tree_of(leader_txns + follow_up).content_hash()
    assert recover_digest(tmp_path) == expected
    damage(list_snapshots(data_dir.snap_dir)[0][1])
    with pytest.raises(RecoveryError, match="txns in between may be missing"):
        DataDir(tmp_path / "data").recover()


def test_a_log_of_a_later_epoch_continues_only_the_newest_snapshot(tmp_path: Path) -> None:
    """Simulator seed 5819: a SNAP replaced the log; the next epoch's txns were logged after
    it; then a bit flipped in the SNAP's snapshot.  The log, starting at counter 1 of a later
    epoch, continues that snapshot, not the older one recovery falls back to: replayed onto
    it, the server would have served (and led with) a history without the txns in between."""
    data_dir = DataDir(tmp_path / "data")
    tree, log = data_dir.recover()
    commit(data_dir, tree, TxnMaker().some(5))
    data_dir.take_snapshot(tree.records(), tree.last_zxid)  # older: epoch 1, counter 5
    leader_txns = TxnMaker().some(42)  # the leader's epoch 1 went on to counter 42
    leader_tree = tree_of(leader_txns)
    staged = data_dir.stage_snapshot(leader_tree.last_zxid, sid=2)
    staged.add(list(leader_tree.records()))
    data_dir.install_snapshot(staged)
    next_epoch = TxnMaker(epoch=2)
    next_epoch.serial = 42  # new nodes, beside the leader's
    later = next_epoch.some(10)
    log.append(as_records(later))
    log.sync()
    data_dir.close()
    assert recover_digest(tmp_path) == tree_of(leader_txns + later).content_hash()  # the newest: continued
    damage(list_snapshots(data_dir.snap_dir)[0][1])
    with pytest.raises(RecoveryError, match=r"starts at zxid 0x200000001.*1 newer snapshots unusable"):
        DataDir(tmp_path / "data").recover()


def test_a_separate_log_dir_myid_and_sizes(tmp_path: Path) -> None:
    data_dir = DataDir(tmp_path / "data", tmp_path / "logs")
    assert data_dir.read_myid() is None
    (tmp_path / "data" / "myid").write_text("3\n")
    assert data_dir.read_myid() == 3
    tree, log = data_dir.recover()
    commit(data_dir, tree, TxnMaker().some(10))
    data_dir.take_snapshot(tree.records(), tree.last_zxid)
    assert log.segments()[0].parent == tmp_path / "logs" / "version-2"
    assert data_dir.log_dir_bytes() == sum(path.stat().st_size for path in log.segments())
    assert data_dir.data_dir_bytes() == list_snapshots(data_dir.snap_dir)[0][1].stat().st_size
    data_dir.close()
    (tmp_path / "data" / "myid").write_text("three")
    with pytest.raises(ValueError, match="myid"):
        data_dir.read_myid()


def test_a_logged_record_that_is_not_a_txn_stops_recovery(tmp_path: Path) -> None:
    from zabby.storage import CorruptLogError

    data_dir = DataDir(tmp_path / "data")
    tree, log = data_dir.recover()
    commit(data_dir, tree, TxnMaker().some(3))
    log.append([(log.last_zxid + 1, b"\xc1 not msgpack")])
    data_dir.close()
    with pytest.raises(CorruptLogError, match="is not a txn"):
        DataDir(tmp_path / "data").recover()


def test_recovery_reads_no_log_segment_its_snapshot_holds(tmp_path: Path) -> None:
    build_history(tmp_path, snapshot_rounds=2)
    expected = recover_digest(tmp_path)
    segments = sorted((tmp_path / "data" / "version-2").glob("log.*"))
    assert len(segments) == 3  # a snapshot rolls the log: each segment after the first starts at one
    damage(segments[0])  # txns 1..50, under both snapshots
    assert recover_digest(tmp_path) == expected
    damage(segments[1])  # txns 51..100, under the newest snapshot only: still not read
    assert recover_digest(tmp_path) == expected


def test_start_up_removes_the_snapshot_files_a_crash_left_unfinished(tmp_path: Path) -> None:
    data_dir = DataDir(tmp_path / "data")
    tree, _ = data_dir.recover()
    commit(data_dir, tree, TxnMaker().some(10))
    kept = data_dir.take_snapshot(tree.records(), tree.last_zxid)
    half_received = data_dir.stage_snapshot(tree.last_zxid + 5, sid=3)
    half_received.add(list(tree.records())[:4])  # a crash now: the file stays, the writer is gone
    other = data_dir.snap_dir / "notes.tmp"
    other.write_text("not ours")
    data_dir.close()
    restarted = DataDir(tmp_path / "data")
    assert restarted.remove_unfinished_snapshots() == [half_received.tmp]
    assert sorted(path.name for path in restarted.snap_dir.iterdir() if "snapshot" in path.name) == [kept.name]
    assert other.exists()
    assert restarted.recover()[0].content_hash() == tree.content_hash()
    restarted.close()
    half_received.discard()  # its fd (the file is gone already)
