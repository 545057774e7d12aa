"""``zabby-admin zookeeper export``: a zabby tree (a data dir with its log, a snapshot file, a
live server) written as ZooKeeper's data dir, read back with ZooKeeper's format and imported
again unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.local.admin import LOCAL_ADMIN, admin_settings
from tests.ops.helpers import admin, write_log
from tests.ops.zk_history import History, zabby_body
from zabby import SyncClient
from zabby.ops.errors import DataError
from zabby.ops.zk_export import export_zookeeper
from zabby.ops.zk_import import import_zookeeper
from zabby.storage.epochs import write_epoch
from zabby.storage.snapshot import list_snapshots, read_snapshot, write_snapshot
from zabby.storage.zk_files import read_epochs
from zabby.storage.zk_files import read_snapshot as read_zk_snapshot
from zabby.testing import ServerProcess
from zabby.tree.datatree import DataTree
from zabby.tree.txns import Txn
from zabby.wire.zk_snapshot import tree_digest


def history_tree(seed: int, count: int) -> tuple[DataTree, list[Txn]]:
    """The zabby tree a ZooKeeper history builds, and the zabby txns that built it."""
    history, tree, txns = History.make(seed, count), DataTree(), []
    for zk_txn in history.txns:
        assert zk_txn.body is not None or zk_txn.type < 0
        body = zabby_body(zk_txn.session_id, zk_txn.type, zk_txn.body) if zk_txn.body is not None else (tuple(sorted(tree.ephemerals.get(zk_txn.session_id, ()))),)
        txn = Txn(zk_txn.zxid, zk_txn.session_id, zk_txn.cxid, zk_txn.time_ms, zk_txn.type, body)
        tree.apply(txn)
        txns.append(txn)
    return tree, txns


def zabby_records(data_dir: Path) -> list[tuple[object, ...]]:
    (_, path), = list_snapshots(data_dir / "version-2")
    return [tuple(record) for record in read_snapshot(path)[1]]


def test_an_exported_snapshot_reads_back_as_the_tree(tmp_path: Path) -> None:
    tree, _ = history_tree(1, 150)
    snapshot = write_snapshot(tmp_path, tree.last_zxid, tree.records())
    report = export_zookeeper(snapshot, tmp_path / "zk")
    (zk_path,) = (tmp_path / "zk" / "version-2").glob("snapshot.*")
    assert zk_path.name == f"snapshot.{tree.last_zxid:x}"
    loaded = read_zk_snapshot(zk_path)
    records = list(tree.records())[1 + len(tree.sessions) :]
    assert {path: tuple(node) for path, node in loaded.nodes.items()} == {record[0]: tuple(record) for record in records}
    assert loaded.sessions == {sid: timeout for sid, (timeout, _) in tree.sessions.items()}
    assert loaded.digest == (tree.last_zxid, 2, tree_digest(records)) == (tree.last_zxid, 2, report.digest) == (tree.last_zxid, 2, loaded.digest_sum)
    assert read_epochs(tmp_path / "zk" / "version-2") == (0, 0) and not (tmp_path / "zk" / "myid").exists()


def test_export_then_import_is_the_identity(tmp_path: Path) -> None:
    tree, txns = history_tree(2, 200)
    source = tmp_path / "source"
    (source / "version-2").mkdir(parents=True)
    write_snapshot(source / "version-2", txns[99].zxid, _tree_at(txns[:100]).records())
    write_log(source, txns[100:])
    write_epoch(source / "version-2" / "acceptedEpoch", 3)
    write_epoch(source / "version-2" / "currentEpoch", 2)
    export_zookeeper(source, tmp_path / "zk", myid=4)
    assert (tmp_path / "zk" / "myid").read_text().strip() == "4"
    assert read_epochs(tmp_path / "zk" / "version-2") == (3, 2)
    report = import_zookeeper(tmp_path / "zk", tmp_path / "again", 4)
    assert report.digests_matched == 1 and (report.accepted_epoch, report.current_epoch) == (3, 2)
    assert zabby_records(tmp_path / "again") == [tuple(record) for record in tree.records()]


def _tree_at(txns: list[Txn]) -> DataTree:
    tree = DataTree()
    for txn in txns:
        tree.apply(txn)
    return tree


def test_a_torn_tail_of_the_log_is_left_out_and_the_files_are_untouched(tmp_path: Path) -> None:
    tree, txns = history_tree(3, 40)
    source = tmp_path / "source"
    write_log(source, txns)
    (segment,) = (source / "version-2").glob("log.*")
    raw = segment.read_bytes()
    segment.write_bytes(raw[:-5])  # the last record cut short
    report = export_zookeeper(source, tmp_path / "zk")
    assert segment.read_bytes() == raw[:-5]
    assert report.zxid == txns[-2].zxid and any("torn tail" in note for note in report.notes)


def test_a_damaged_log_is_refused(tmp_path: Path) -> None:
    _, txns = history_tree(4, 40)
    source = tmp_path / "source"
    write_log(source, txns[:20])
    write_log(source, txns[25:])  # a hole
    with pytest.raises(DataError, match="damaged"):
        export_zookeeper(source, tmp_path / "zk")
    assert not (tmp_path / "zk").exists()


def test_export_needs_one_source(tmp_path: Path) -> None:
    code, _, err = admin("zookeeper", "export", "--out", str(tmp_path / "zk"))
    assert code == 2 and "either DATA_DIR" in err
    code, _, err = admin("zookeeper", "export", str(tmp_path / "nothing"), "--out", str(tmp_path / "zk"))
    assert code == 2 and "not a zabby data dir" in err


def test_export_from_a_live_server(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "server", **admin_settings())
    server.start()
    try:
        with SyncClient(server.hosts) as client:
            for index in range(50):
                client.create(f"/n{index}", b"v" * index)
        code, out, err = admin("zookeeper", "export", "--server", f"127.0.0.1:{server.admin_port}", "--auth", ":".join(LOCAL_ADMIN),
                               "--out", str(tmp_path / "zk"))  # fmt: skip
    finally:
        server.kill()
    assert code == 0, err
    assert "a snapshot streamed from" in out and "54 znodes" in out  # 50, the root and /zookeeper's three
    (zk_path,) = (tmp_path / "zk" / "version-2").glob("snapshot.*")
    nodes = read_zk_snapshot(zk_path).nodes
    assert nodes["/n0"][1] == b"" and nodes["/n8"][1] == b"v" * 8
