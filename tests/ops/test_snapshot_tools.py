"""zabby-admin snapshot status / compare / restore on snapshot files written by the storage
layer, and their errors on missing, corrupt or wrong input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ops.helpers import admin
from tests.storage.helpers import TxnMaker, tree_of
from zabby.opcodes import OpCode
from zabby.storage.datadir import DataDir
from zabby.storage.epochs import read_epoch
from zabby.storage.snapshot import write_snapshot
from zabby.tree.datatree import ZOOKEEPER_CONFIG, DataTree
from zabby.tree.txns import Txn, make_zxid


def snapshot_of(folder: Path, tree: DataTree) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return write_snapshot(folder, tree.last_zxid, tree.records())


@pytest.fixture
def tree() -> DataTree:
    maker = TxnMaker(epoch=3)
    return tree_of(maker.some(200))


def test_status_shows_zxid_count_size_and_digest(tmp_path: Path, tree: DataTree) -> None:
    path = snapshot_of(tmp_path, tree)
    code, out, _ = admin("snapshot", "status", str(path), "--json")
    assert code == 0
    info = json.loads(out)
    assert info["zxid"] == f"0x{tree.last_zxid:x}" and info["epoch"] == 3
    assert info["znodes"] == tree.node_count() and info["file_bytes"] == path.stat().st_size
    assert info["digest"] == f"0x{tree.compute_digest():016x}"


def test_status_of_a_corrupt_a_truncated_and_a_missing_file(tmp_path: Path, tree: DataTree) -> None:
    path = snapshot_of(tmp_path, tree)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    (tmp_path / "flipped").write_bytes(bytes(raw))
    (tmp_path / "short").write_bytes(path.read_bytes()[:-100])
    (tmp_path / "text").write_text("not a snapshot at all\n" * 3)
    for name, message in (("flipped", "CRC mismatch"), ("short", "no trailer"), ("text", "bad magic")):
        code, out, err = admin("snapshot", "status", str(tmp_path / name))
        assert (code, out) == (1, "") and message in err, (name, err)
    code, _, err = admin("snapshot", "status", str(tmp_path / "missing"))
    assert code == 2 and "no such file" in err


def test_compare_identical_snapshots(tmp_path: Path, tree: DataTree) -> None:
    left = snapshot_of(tmp_path / "a", tree)
    right = snapshot_of(tmp_path / "b", tree)
    code, out, _ = admin("snapshot", "compare", str(left), str(right))
    assert code == 0 and "The snapshots are identical." in out and "found only" not in out


def test_compare_shows_the_first_differences_layer_by_layer(tmp_path: Path) -> None:
    maker = TxnMaker()
    txns = maker.some(30)
    changed = sorted(maker.versions)[0]  # its data stays 100 bytes long: only the content differs
    created = maker.create(b"new!")
    later = txns + [created, maker.set_data(changed, b"same-size-data-" + b"x" * 85)]
    left = snapshot_of(tmp_path / "a", tree_of(txns))
    right = snapshot_of(tmp_path / "b", tree_of(later))
    code, out, _ = admin("snapshot", "compare", str(left), str(right))
    assert code == 1
    lines = out.splitlines()
    assert "Node / found in both trees. Delta: 4 bytes, 1 descendants. Differs in: pzxid, cversion" in lines
    assert f"Node {created.body[0]} found only in right tree. Descendant size: 4. Descendant count: 0" in lines
    assert f"Node {changed} found in both trees. Delta: 0 bytes, 0 descendants. Differs in: data, mzxid, mtime, version" in lines
    assert lines.index("Analysis for depth 0") < lines.index("Analysis for depth 1")
    code, out, _ = admin("snapshot", "compare", str(left), str(right), "--limit", "1")
    assert code == 1 and "Stopped after 1 differences" in out and created.body[0] not in out


def test_restore_seeds_an_empty_data_dir(tmp_path: Path, tree: DataTree) -> None:
    snapshot = snapshot_of(tmp_path / "backup", tree)
    data = tmp_path / "server1" / "data"
    code, out, err = admin("snapshot", "restore", str(snapshot), "--data-dir", str(data), "--myid", "1")
    assert code == 0, err
    assert "next leader starts epoch 4" in out
    assert (data / "myid").read_text() == "1\n"
    assert read_epoch(data / "version-2" / "acceptedEpoch") == read_epoch(data / "version-2" / "currentEpoch") == 3
    recovered, log = DataDir(data).recover()
    log.close()
    assert recovered.content_hash() == tree.content_hash() and recovered.digest == tree.digest


def test_restore_refuses_a_used_data_dir_unless_forced(tmp_path: Path, tree: DataTree) -> None:
    snapshot = snapshot_of(tmp_path / "backup", tree)
    data = tmp_path / "data"
    snapshot_of(data / "version-2", tree_of(TxnMaker().some(5)))
    code, _, err = admin("snapshot", "restore", str(snapshot), "--data-dir", str(data), "--myid", "2")
    assert code == 2 and "the data dir is not empty" in err and "--force" in err
    code, out, err = admin("snapshot", "restore", str(snapshot), "--data-dir", str(data), "--myid", "2", "--force")
    assert code == 0, err
    aside = [p for p in data.iterdir() if p.name.startswith("version-2.before-restore-")]
    assert len(aside) == 1 and list(aside[0].glob("snapshot.*"))


def test_restore_checks_its_input_before_writing(tmp_path: Path, tree: DataTree) -> None:
    snapshot = snapshot_of(tmp_path / "backup", tree)
    data = tmp_path / "data"
    code, _, err = admin("snapshot", "restore", str(snapshot), "--data-dir", str(data), "--myid", "0")
    assert code == 2 and "between 1 and 255" in err and not data.exists()
    broken = tmp_path / "broken"
    broken.write_bytes(snapshot.read_bytes()[:-1])
    code, _, err = admin("snapshot", "restore", str(broken), "--data-dir", str(data), "--myid", "1")
    assert code == 1 and "snapshot" in err and not data.exists()


def test_restore_leaves_out_the_old_ensembles_reconfigured_membership(tmp_path: Path) -> None:
    maker = TxnMaker(epoch=2)
    txns = maker.some(20)
    old_members = "server.1=10.0.0.1:2888:3888:participant;2181\nversion=200000015\n"
    reconfig = Txn(make_zxid(2, 21), 0x100, 99, 1_700_000_000_999, OpCode.RECONFIG, (old_members,))
    tree = tree_of([*txns, reconfig])
    assert tree.nodes[ZOOKEEPER_CONFIG].mzxid == make_zxid(2, 21)
    snapshot = snapshot_of(tmp_path / "backup", tree)
    data = tmp_path / "data"
    code, out, err = admin("snapshot", "restore", str(snapshot), "--data-dir", str(data), "--myid", "1")
    assert code == 0 and "left out the old ensemble's reconfigured membership" in out, err
    restored, log = DataDir(data).recover()
    log.close()
    node = restored.nodes[ZOOKEEPER_CONFIG]
    assert (node.data, node.version, node.mzxid) == (b"", 0, 0) and restored.digest == tree.digest
    assert restored.last_zxid == tree.last_zxid and restored.node_count() == tree.node_count()
