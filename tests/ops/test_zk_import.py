"""``zabby-admin zookeeper import``: ZooKeeper data directories made by ``zk_history`` (seeded
histories, fuzzy snapshots, logs with gaps, torn tails and damage) converted, and the result
checked node by node against the tree the history says is right."""

from __future__ import annotations

import gzip
import random
import struct
import zlib
from pathlib import Path

import pytest

from tests.ops.helpers import admin
from tests.ops.zk_history import History, expected_records, log_record, write_log, write_snapshot
from zabby.opcodes import OpCode
from zabby.ops.errors import DataError, UsageError
from zabby.ops.snapfile import load_tree
from zabby.ops.zk_import import import_zookeeper
from zabby.tree.zk_replay import ZkTree
from zabby.storage import zk_files
from zabby.storage.epochs import read_epoch
from zabby.storage.snapshot import list_snapshots, read_snapshot
from zabby.tree.datatree import ZOOKEEPER_CONFIG
from zabby.wire.zk_snapshot import session_password
from zabby.wire.zk_txn import ZkTxn

SYSTEM = (ZOOKEEPER_CONFIG,)


def zk_dir(tmp_path: Path) -> Path:
    return tmp_path / "zk" / "version-2"


def imported_records(data_dir: Path) -> tuple[int, dict[int, tuple[int, bytes]], dict[str, tuple[object, ...]]]:
    """(last zxid, sessions, nodes) of the zabby snapshot an import wrote."""
    (zxid, path), = list_snapshots(data_dir / "version-2")
    _, records = read_snapshot(path)
    header, *rest = list(records)
    sessions = {r[1]: (r[2], r[3]) for r in rest[: header[2]]}
    nodes = {r[0]: tuple(r) for r in rest[header[2] :]}
    assert header[1] == zxid and len(nodes) == header[3]
    return zxid, sessions, nodes


def assert_same_tree(data_dir: Path, history: History, index: int) -> None:
    zxid, sessions, nodes = imported_records(data_dir)
    state = history.states[index]
    assert zxid == history.zxid(index)
    want = {p: r for p, r in expected_records(state).items() if p not in SYSTEM}
    assert {p: r for p, r in nodes.items() if p not in SYSTEM} == want
    assert sessions == {sid: (timeout, session_password(sid)) for sid, timeout in state.sessions.items()}


def test_session_password_is_zookeepers() -> None:
    # a session Debian's ZooKeeper 3.8 created (its id and the password kazoo received)
    assert session_password(0x100001010080000).hex() == "8ac79c884f23d47178cee0c5b0017a36"


@pytest.mark.parametrize("seed", range(40))
def test_fuzzy_snapshot_and_logs_rebuild_the_exact_tree(tmp_path: Path, seed: int) -> None:
    history = History.make(seed, 200)
    rng = random.Random(seed)
    write_snapshot(zk_dir(tmp_path), history, 0)
    write_log(zk_dir(tmp_path), history.txns[:80])
    fuzzy_at = rng.randrange(80, 120)
    write_snapshot(zk_dir(tmp_path), history, fuzzy_at, rng)
    write_log(zk_dir(tmp_path), history.txns[80:])
    report = import_zookeeper(tmp_path / "zk", tmp_path / "zabby", 1)
    assert report.snapshot_zxid == history.zxid(fuzzy_at) and report.txns == 200 - fuzzy_at
    assert report.digests_matched > 0
    assert_same_tree(tmp_path / "zabby", history, 200)
    tree = load_tree(list_snapshots(tmp_path / "zabby" / "version-2")[0][1])  # zabby reads it as its own
    assert tree.last_zxid == history.zxid(200)


def test_the_replay_follows_zookeeper_quirks_on_a_fuzzy_snapshot() -> None:
    """The snapshot already holds /a/b created by txn 3 and /a's cversion from it; the
    replay of txns 2..3 meets /a/b existing: a plain create raises the parent's cversion and
    pzxid anyway (setCversionPzxid); a delete of a missing node still moves its parent's pzxid."""
    history = History.make(0, 0)
    nodes = history.states[0].nodes
    nodes["/a"] = ["/a", b"", ((31, "world", "anyone"),), 1, 1, 3, 5, 5, 0, 1, 0, 0]
    nodes["/a/b"] = ["/a/b", b"", ((31, "world", "anyone"),), 3, 3, 3, 7, 7, 0, 0, 0, 0]
    tree = ZkTree(nodes, {}, 1, None)
    acl = ((31, "world", "anyone"),)
    tree.apply(ZkTxn(5, 1, 2, 6, OpCode.CREATE, ("/a/x", b"", acl, False, 1)))  # its cversion 1 is not above /a's 1
    assert "/a/x" in tree.nodes and nodes["/a"][5] == 3  # pzxid kept
    tree.apply(ZkTxn(5, 2, 3, 7, OpCode.CREATE, ("/a/b", b"", acl, False, 2)))  # exists: /a's cversion and pzxid raised
    assert nodes["/a"][9] == 2 and nodes["/a"][5] == 3
    tree.apply(ZkTxn(5, 3, 9, 8, OpCode.DELETE, ("/a/gone",)))
    assert nodes["/a"][5] == 9  # moved before the node was found missing


def test_a_delete_of_a_parent_detaches_its_children_until_a_create_replaces_them() -> None:
    history = History.make(0, 0)
    nodes = history.states[0].nodes
    acl = ((31, "world", "anyone"),)
    nodes["/a"] = ["/a", b"", acl, 11, 11, 12, 5, 5, 0, 1, 0, 0]  # re-created at 11 and given a child at 12
    nodes["/a/c"] = ["/a/c", b"new", acl, 12, 12, 12, 6, 6, 0, 0, 0, 0]
    tree = ZkTree(nodes, {}, 9, None)
    tree.apply(ZkTxn(5, 1, 10, 1, OpCode.DELETE, ("/a",)))  # the old /a (the snapshot has the new one)
    assert tree.detached == {"/a/c"}
    assert {n[0] for n in tree.reachable()} == set(nodes) - {"/a/c"}  # written to no snapshot, still in the digest
    tree.apply(ZkTxn(5, 2, 11, 2, OpCode.CREATE2, ("/a", b"", acl, False, 2)))
    tree.apply(ZkTxn(5, 3, 12, 3, OpCode.CREATE2, ("/a/c", b"new", acl, False, 1)))  # replaces the detached one
    assert not tree.detached and nodes["/a"][9] == 1 and nodes["/a"][5] == 12


def test_a_damaged_newest_snapshot_falls_back_to_an_older_one(tmp_path: Path) -> None:
    history = History.make(3, 60)
    write_snapshot(zk_dir(tmp_path), history, 10)
    write_log(zk_dir(tmp_path), history.txns[10:])
    newest = write_snapshot(zk_dir(tmp_path), history, 40)
    raw = bytearray(newest.read_bytes())
    raw[200] ^= 0x01  # inside a node: the checksum no longer matches
    newest.write_bytes(raw)
    report = import_zookeeper(tmp_path / "zk", tmp_path / "zabby", 2)
    assert report.snapshot_zxid == history.zxid(10) and report.txns == 50
    assert len(report.skipped) == 1 and str(newest) in report.skipped[0] and "offset" in report.skipped[0]
    assert_same_tree(tmp_path / "zabby", history, 60)


def test_an_unfinished_newest_snapshot_is_passed_over(tmp_path: Path) -> None:
    history = History.make(4, 30)
    write_snapshot(zk_dir(tmp_path), history, 5)
    write_log(zk_dir(tmp_path), history.txns[5:])
    newest = write_snapshot(zk_dir(tmp_path), history, 20)
    newest.write_bytes(newest.read_bytes()[:-40])
    report = import_zookeeper(tmp_path / "zk", tmp_path / "zabby", 1)
    assert report.snapshot_zxid == history.zxid(5) and "no seal" in report.skipped[0]
    assert_same_tree(tmp_path / "zabby", history, 30)


def test_no_readable_snapshot_with_logs_is_refused(tmp_path: Path) -> None:
    history = History.make(5, 20)
    only = write_snapshot(zk_dir(tmp_path), history, 5)
    write_log(zk_dir(tmp_path), history.txns[5:])
    raw = bytearray(only.read_bytes())
    raw[60] ^= 0xFF
    only.write_bytes(raw)
    with pytest.raises(DataError, match="no snapshot .* reads whole") as caught:
        import_zookeeper(tmp_path / "zk", tmp_path / "zabby", 1)
    assert str(only) in str(caught.value) and "offset" in str(caught.value)
    assert not (tmp_path / "zabby").exists()


def test_a_gap_in_the_logs_is_refused_naming_both_files(tmp_path: Path) -> None:
    history = History.make(6, 60)
    write_snapshot(zk_dir(tmp_path), history, 10)
    first = write_log(zk_dir(tmp_path), history.txns[10:25])
    write_log(zk_dir(tmp_path), history.txns[25:40]).unlink()  # a log file lost
    last = write_log(zk_dir(tmp_path), history.txns[40:])
    code, out, err = admin("zookeeper", "import", str(tmp_path / "zk"), "--data-dir", str(tmp_path / "zabby"), "--myid", "1")
    assert code == 1 and not out
    assert "a gap in the txn logs" in err and str(first) in err and f"{last} at offset 16" in err
    assert f"after txn 0x{history.zxid(25):x}" in err and f"comes 0x{history.zxid(41):x}" in err
    assert not (tmp_path / "zabby").exists() and not list(tmp_path.glob(".zabby*"))


def test_a_log_that_starts_after_the_snapshot_is_a_gap(tmp_path: Path) -> None:
    history = History.make(7, 30)
    write_snapshot(zk_dir(tmp_path), history, 10)
    write_log(zk_dir(tmp_path), history.txns[12:])
    with pytest.raises(DataError, match=f"after txn 0x{history.zxid(10):x} .*snapshot.* comes 0x{history.zxid(13):x}"):
        import_zookeeper(tmp_path / "zk", tmp_path / "zabby", 1)


def test_a_torn_tail_is_dropped_as_zookeeper_drops_it(tmp_path: Path) -> None:
    history = History.make(8, 30)
    write_snapshot(zk_dir(tmp_path), history, 0)
    torn = log_record(history.txns[29])[:-9]  # the last txn's record, cut short
    log = write_log(zk_dir(tmp_path), history.txns[:29], tail=torn, padding=0)
    report = import_zookeeper(tmp_path / "zk", tmp_path / "zabby", 1)
    assert report.torn is not None and str(log) in report.torn and "cut short" in report.torn
    assert_same_tree(tmp_path / "zabby", history, 29)


def test_a_torn_record_then_a_log_that_goes_on_is_no_gap(tmp_path: Path) -> None:
    """ZooKeeper restarted after a crash that tore its last record: the old file keeps the
    torn bytes, the next file starts at the txn after the last whole one."""
    history = History.make(9, 40)
    write_snapshot(zk_dir(tmp_path), history, 0)
    record = bytearray(log_record(history.txns[20]))
    record[-1] = 0  # no end-of-record marker
    write_log(zk_dir(tmp_path), history.txns[:20], tail=bytes(record))
    write_log(zk_dir(tmp_path), history.txns[20:])
    report = import_zookeeper(tmp_path / "zk", tmp_path / "zabby", 1)
    assert report.txns == 40 and "end marker" in (report.torn or "")
    assert_same_tree(tmp_path / "zabby", history, 40)


def test_a_damaged_record_is_refused_naming_file_and_offset(tmp_path: Path) -> None:
    history = History.make(10, 30)
    write_snapshot(zk_dir(tmp_path), history, 0)
    log = write_log(zk_dir(tmp_path), history.txns)
    raw = bytearray(log.read_bytes())
    raw[16 + 8 + 4 + 3] ^= 0x20  # a bit of the first record's entry
    log.write_bytes(raw)
    with pytest.raises(DataError, match=f"{log}: checksum mismatch .* at offset 16"):
        import_zookeeper(tmp_path / "zk", tmp_path / "zabby", 1)


def test_a_digest_that_differs_at_the_end_is_refused(tmp_path: Path) -> None:
    history = History.make(11, 20)
    write_snapshot(zk_dir(tmp_path), history, 0)
    txns = list(history.txns)
    version, digest = txns[-1].digest or (0, 0)
    txns[-1] = txns[-1]._replace(digest=(version, digest + 1))
    write_log(zk_dir(tmp_path), txns)
    with pytest.raises(DataError, match=f"digest mismatch after txn 0x{history.zxid(20):x} .* would not be exact"):
        import_zookeeper(tmp_path / "zk", tmp_path / "zabby", 1)


def test_a_digest_that_differs_then_matches_is_a_fuzzy_window(tmp_path: Path) -> None:
    """ZooKeeper records a txn's digest after it applied the txn: a snapshot written meanwhile
    holds the txn but not its digest, and the digests up to it differ on replay."""
    history = History.make(11, 20)
    write_snapshot(zk_dir(tmp_path), history, 0)
    txns = list(history.txns)
    for index in (3, 4):
        version, digest = txns[index].digest or (0, 0)
        txns[index] = txns[index]._replace(digest=(version, digest + 1))
    write_log(zk_dir(tmp_path), txns)
    report = import_zookeeper(tmp_path / "zk", tmp_path / "zabby", 1)
    assert report.digests_differed == 2 and report.digests_matched >= 10
    assert_same_tree(tmp_path / "zabby", history, 20)


def test_the_written_dir_has_epochs_myid_and_no_foreign_membership(tmp_path: Path) -> None:
    history = History.make(12, 20, epoch=3)
    snap_dir = zk_dir(tmp_path)
    write_snapshot(snap_dir, history, 20)
    (snap_dir / "acceptedEpoch").write_text("4")
    (snap_dir / "currentEpoch").write_text("3")
    report = import_zookeeper(tmp_path / "zk", tmp_path / "zabby", 7)
    out = tmp_path / "zabby"
    assert (out / "myid").read_text().strip() == "7"
    assert read_epoch(out / "version-2" / "acceptedEpoch") == 4 == report.accepted_epoch
    assert read_epoch(out / "version-2" / "currentEpoch") == 3
    config = imported_records(out)[2][ZOOKEEPER_CONFIG]
    assert config[1] == b"" and config[4] == 0  # data, mzxid: a fresh tree's


def test_a_standalone_zookeepers_epoch_is_its_zxids(tmp_path: Path) -> None:
    history = History.make(13, 10, epoch=2)
    write_snapshot(zk_dir(tmp_path), history, 10)
    report = import_zookeeper(tmp_path / "zk", tmp_path / "zabby", 1)
    assert (report.accepted_epoch, report.current_epoch) == (2, 2)


def test_a_data_dir_in_use_is_refused_and_force_moves_it_aside(tmp_path: Path) -> None:
    history = History.make(14, 10)
    write_snapshot(zk_dir(tmp_path), history, 10)
    out = tmp_path / "zabby"
    (out / "version-2").mkdir(parents=True)
    (out / "version-2" / "snapshot.0000000000000001").write_bytes(b"old")
    with pytest.raises(UsageError, match="not empty"):
        import_zookeeper(tmp_path / "zk", out, 1)
    import_zookeeper(tmp_path / "zk", out, 1, force=True)
    aside = list(tmp_path.glob("zabby.before-import-*"))
    assert len(aside) == 1 and (aside[0] / "version-2" / "snapshot.0000000000000001").read_bytes() == b"old"
    assert_same_tree(out, history, 10)


def test_a_data_dir_with_the_servers_own_myid_only_is_empty(tmp_path: Path) -> None:
    history = History.make(15, 10)
    write_snapshot(zk_dir(tmp_path), history, 10)
    out = tmp_path / "zabby"
    out.mkdir()
    (out / "myid").write_text("2\n")
    with pytest.raises(UsageError, match="not empty"):
        import_zookeeper(tmp_path / "zk", out, 3)
    import_zookeeper(tmp_path / "zk", out, 2)
    assert (out / "myid").read_text().strip() == "2" and not list(tmp_path.glob("zabby.before-import-*"))


def test_an_empty_folder_is_not_zookeepers(tmp_path: Path) -> None:
    (tmp_path / "zk").mkdir()
    code, _, err = admin("zookeeper", "import", str(tmp_path / "zk"), "--data-dir", str(tmp_path / "zabby"), "--myid", "1")
    assert code == 1 and "no ZooKeeper snapshot or txn log" in err


def test_snapshots_of_zookeeper_3_5_and_3_9_and_gzip_ones_read_alike(tmp_path: Path) -> None:
    """3.5 wrote no digest trailer (and its logs no digests); 3.9 adds lastProcessedZxid,
    sealed; snapshot.compression.method=gz writes the same bytes gzipped."""
    history = History.make(16, 40)
    plain = write_snapshot(tmp_path / "plain" / "version-2", history, 25)
    raw = plain.read_bytes()
    older = tmp_path / "3.5" / "version-2"
    older.mkdir(parents=True)
    records = [tuple(node) for node in history.states[25].nodes.values()]
    zk_files.write_snapshot(older, history.zxid(25), history.states[25].sessions, records, None)
    newer = tmp_path / "3.9" / "version-2"
    newer.mkdir(parents=True)
    with_zxid = raw + struct.pack(">q", history.zxid(25))
    (newer / plain.name).write_bytes(with_zxid + struct.pack(">qi1s", zlib.adler32(with_zxid), 1, b"/"))
    packed = tmp_path / "gz" / "version-2"
    packed.mkdir(parents=True)
    (packed / f"{plain.name}.gz").write_bytes(gzip.compress(raw))
    for folder, digest in ((older, False), (newer, True), (packed, True)):
        write_log(folder, [txn._replace(digest=None) for txn in history.txns[25:]] if not digest else history.txns[25:])
        report = import_zookeeper(folder.parent, folder.parent.with_name(folder.parent.name + "-zabby"), 1)
        assert report.snapshot_zxid == history.zxid(25) and (report.digest is not None) == digest
        assert_same_tree(folder.parent.with_name(folder.parent.name + "-zabby"), history, 40)
    assert zk_files.read_snapshot(newer / plain.name).last_processed_zxid == history.zxid(25)


def test_a_snappy_snapshot_is_named_not_read(tmp_path: Path) -> None:
    history = History.make(17, 10)
    plain = write_snapshot(zk_dir(tmp_path), history, 10)
    (plain.parent / f"{plain.name}.snappy").write_bytes(b"\x82SNAPPY\x00" + bytes(20))
    plain.unlink()
    with pytest.raises(DataError, match="snappy-compressed snapshot"):
        import_zookeeper(tmp_path / "zk", tmp_path / "zabby", 1)


def test_logs_in_a_separate_data_log_dir(tmp_path: Path) -> None:
    history = History.make(18, 30)
    write_snapshot(zk_dir(tmp_path), history, 10)
    write_log(tmp_path / "zklog" / "version-2", history.txns[10:])
    code, out, err = admin("zookeeper", "import", str(tmp_path / "zk"), "--zk-data-log-dir", str(tmp_path / "zklog"),
                           "--data-dir", str(tmp_path / "zabby"), "--myid", "1")  # fmt: skip
    assert code == 0, err
    assert "replayed 20 txns" in out
    assert_same_tree(tmp_path / "zabby", history, 30)
