from __future__ import annotations

import zlib
from pathlib import Path

import msgpack
import pytest

from tests.storage.helpers import OPEN_ACL, TxnMaker, tree_of
from zabby.tree import acl as acls
from zabby.opcodes import OpCode
from zabby.storage.epochs import CorruptEpochError, read_epoch, write_epoch
from zabby.storage.snapshot import (
    CorruptSnapshotError, SnapshotWriter, list_snapshots, looks_complete, read_snapshot, write_snapshot,
)  # fmt: skip
from zabby.tree.datatree import DataTree, TreeBuilder
from zabby.tree.txns import Txn, make_zxid


def sample_tree(count: int = 300) -> DataTree:
    return tree_of(TxnMaker().some(count))


def load(path: Path) -> DataTree:
    _zxid, records = read_snapshot(path)
    return DataTree.from_records(records)


def test_round_trip_keeps_the_digest(tmp_path: Path) -> None:
    tree = sample_tree()
    tree.sessions[0x100] = (30_000, b"secret")
    path = write_snapshot(tmp_path, tree.last_zxid, tree.records())
    assert path.name == f"snapshot.{tree.last_zxid:016x}"
    zxid, records = read_snapshot(path)
    loaded = DataTree.from_records(records)
    assert zxid == tree.last_zxid == loaded.last_zxid
    assert loaded.content_hash() == tree.content_hash()
    assert loaded.data_size == tree.data_size and loaded.node_count() == tree.node_count()
    assert list(tmp_path.iterdir()) == [path]  # no .tmp left behind


def test_large_snapshot_streams_in_chunks(tmp_path: Path) -> None:
    tree = tree_of(TxnMaker().some(600, data_bytes=4000))  # ~2 MiB: more than one chunk
    path = write_snapshot(tmp_path, tree.last_zxid, tree.records())
    assert path.stat().st_size > 2**20
    assert load(path).content_hash() == tree.content_hash()


def test_the_file_is_its_records_packed_one_after_another_whatever_their_sizes(tmp_path: Path) -> None:
    """Records are packed in groups sized by what the last group took (a 1 MiB znode makes
    groups of one): the bytes are the format's all the same, header, records, trailer, CRC."""
    sizes = [10] * 40 + [3 * 2**20 // 2] + [100] * 700 + [2**20, 2**20] + [0] * 5000 + [300_000] * 9
    records = [("tree", 0x105, 0, len(sizes)), *((f"/n{i}", b"d" * size) for i, size in enumerate(sizes))]
    calls: list[int] = []
    path = write_snapshot(tmp_path, 0x105, iter(records), between=lambda: calls.append(1))
    body = b"ZBSN" + (1).to_bytes(4, "big") + (0x105).to_bytes(8, "big") + b"".join(msgpack.packb(r, use_bin_type=True) for r in records)
    body += b"ZBSE" + len(records).to_bytes(8, "big")
    assert path.read_bytes() == body + zlib.crc32(body).to_bytes(4, "big")
    assert len(calls) > len(records) // 512  # once before each group, the groups at most 512 records


def damaged_copies(intact: bytes) -> dict[str, bytes]:
    offsets = (0, 9, 20, len(intact) // 2, len(intact) - 13, len(intact) - 5)
    flipped = {f"flip@{at}": intact[:at] + bytes([intact[at] ^ 0x10]) + intact[at + 1 :] for at in offsets}
    cut = {f"cut@{size}": intact[:size] for size in (0, 10, 27, len(intact) // 2, len(intact) - 1)}
    return {**flipped, **cut, "appended": intact + b"\0"}


def test_any_damage_is_detected_before_records_are_returned(tmp_path: Path) -> None:
    tree = sample_tree(50)
    path = write_snapshot(tmp_path, tree.last_zxid, tree.records())
    intact = path.read_bytes()
    for name, content in damaged_copies(intact).items():
        path.write_bytes(content)
        with pytest.raises(CorruptSnapshotError, match=str(path)):
            read_snapshot(path)
        print(name, "detected")


def test_a_record_count_mismatch_is_detected(tmp_path: Path) -> None:
    import struct
    import zlib

    tree = sample_tree(5)
    path = write_snapshot(tmp_path, tree.last_zxid, tree.records())
    body = path.read_bytes()[:-16] + struct.pack(">4sQ", b"ZBSE", 3)
    path.write_bytes(body + struct.pack(">I", zlib.crc32(body)))  # a consistent, lying trailer
    _zxid, records = read_snapshot(path)
    with pytest.raises(CorruptSnapshotError, match="records decoded, trailer says 3"):
        list(records)


def test_failed_write_leaves_nothing(tmp_path: Path) -> None:
    def records() -> object:
        yield ("tree", 1, 0, 1)
        raise RuntimeError("tree changed")

    with pytest.raises(RuntimeError):
        write_snapshot(tmp_path, 1, records())  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_list_snapshots_newest_first_ignoring_tmp(tmp_path: Path) -> None:
    for zxid in (5, 0x100000003, 17):
        write_snapshot(tmp_path, zxid, [("tree", zxid, 0, 0)])
    (tmp_path / "snapshot.00000000000000ff.tmp").write_bytes(b"partial")
    (tmp_path / "notes.txt").write_text("hi")
    assert [zxid for zxid, _ in list_snapshots(tmp_path)] == [0x100000003, 17, 5]
    assert all(looks_complete(path) for _, path in list_snapshots(tmp_path))
    assert not looks_complete(tmp_path / "snapshot.00000000000000ff.tmp")


def test_epochs_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "acceptedEpoch"
    assert read_epoch(path) == 0 and read_epoch(path, default=7) == 7
    write_epoch(path, 3)
    assert read_epoch(path) == 3 and path.read_text() == "3\n"
    write_epoch(path, 12)
    assert read_epoch(path) == 12
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acceptedEpoch"]


@pytest.mark.parametrize("content", [b"", b"abc", b"-1", b"\xff\xfe", b"1 2"])
def test_a_bad_epoch_file_is_a_clear_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "currentEpoch"
    path.write_bytes(content)
    with pytest.raises(CorruptEpochError, match="currentEpoch"):
        read_epoch(path)
    with pytest.raises(ValueError):
        write_epoch(path, -1)


def test_loading_sorts_children_whatever_order_they_were_created_in_and_needs_parents_first() -> None:
    creates = [Txn(make_zxid(1, serial), 0, serial, 1000, OpCode.CREATE, (f"/n{200 - serial:03d}", b"x", OPEN_ACL, 0, serial))
               for serial in range(1, 201)]  # fmt: skip  # names in descending order
    tree = tree_of(creates)
    loaded = DataTree.from_records(tree.records())
    assert loaded.nodes["/"].listing() == sorted(loaded.nodes["/"].listing()) == tree.nodes["/"].listing()
    assert loaded.digest == tree.digest == loaded.compute_digest()
    header, *nodes = tree.records()
    orphan = ("/missing/child", *nodes[-1][1:])
    builder = TreeBuilder()
    with pytest.raises(KeyError, match="/missing"):
        builder.add([header, *nodes[:-1], orphan])


def test_a_loaded_tree_keeps_one_int_object_where_fields_are_equal_as_a_live_tree_does() -> None:
    """Memory: msgpack gives every field a fresh int; a znode keeps 5 (czxid, mzxid, pzxid,
    ctime, mtime), 32 B each, where a live tree shares them."""
    same_ms = [Txn(make_zxid(1, serial), 0, serial, int("5000"), OpCode.CREATE, (f"/n{serial}", b"x", OPEN_ACL, 0, serial))
               for serial in range(1, 4)]  # fmt: skip  # three creates stamped in one millisecond (3 int objects)
    tree = tree_of(same_ms)
    assert tree.nodes["/n1"].ctime is tree.nodes["/n3"].mtime
    loaded = DataTree.from_records(msgpack.unpackb(msgpack.packb(list(tree.records())), use_list=False))
    leaves = [loaded.nodes[f"/n{serial}"] for serial in range(1, 4)]
    for node in leaves:
        assert node.mzxid is node.czxid and node.pzxid is node.czxid and node.mtime is node.ctime
    assert leaves[0].ctime is leaves[1].ctime is leaves[2].ctime


def test_only_a_znode_that_had_children_carries_their_stat_fields_live_and_loaded() -> None:
    """Memory: pzxid and cversion live with the children, so a leaf has two slots fewer; a
    parent whose children are all deleted keeps them (its Stat and a sequential suffix)."""
    creates = [Txn(make_zxid(1, serial), 0, serial, 1000, OpCode.CREATE, (path, b"x", OPEN_ACL, 0, cversion))
               for serial, (path, cversion) in enumerate((("/p", 1), ("/p/a", 1), ("/p/b", 2), ("/leaf", 2)), 1)]  # fmt: skip
    deletes = [Txn(make_zxid(1, serial), 0, serial, 1000, OpCode.DELETE, (path,)) for serial, path in ((5, "/p/a"), (6, "/p/b"))]
    tree = tree_of(creates + deletes)
    parent, leaf = tree.nodes["/p"], tree.nodes["/leaf"]
    assert not hasattr(leaf, "__dict__") and len(type(leaf).__slots__) == 8
    assert (leaf.pzxid, leaf.cversion, leaf.children) == (leaf.czxid, 0, ())
    assert (parent.pzxid, parent.cversion, len(parent.children)) == (make_zxid(1, 6), 2, 0)
    assert parent.stat()[5] == 4 and parent.stat()[-1] == make_zxid(1, 6)  # 2 creates + 2 deletes
    loaded = DataTree.from_records(msgpack.unpackb(msgpack.packb(list(tree.records())), use_list=False))
    assert [loaded.nodes[p].stat() for p in ("/p", "/leaf")] == [parent.stat(), leaf.stat()]
    assert loaded.nodes["/leaf"].children == () and loaded.digest == tree.digest == loaded.compute_digest()


def test_znodes_share_their_acl_aversion_and_owner_unless_a_session_owns_them() -> None:
    """Memory: the rarely moved fields are one shared tuple per distinct value (8 slots, 96 B
    per znode object); setACL and an ephemeral's owner give a znode its own, live and loaded."""
    owners = {"/a": 0, "/b": 0, "/e1": 0x77, "/e2": 0x77}
    creates = [Txn(make_zxid(1, serial), 0x77, serial, 1000, OpCode.CREATE, (path, b"x", OPEN_ACL, owner, serial))
               for serial, (path, owner) in enumerate(owners.items(), 1)]  # fmt: skip
    set_acl = Txn(make_zxid(1, 5), 0, 5, 1000, OpCode.SET_ACL, ("/b", acls.READ_ACL_UNSAFE, 1))
    tree = tree_of([*creates, set_acl])
    for source in (tree, DataTree.from_records(msgpack.unpackb(msgpack.packb(list(tree.records())), use_list=False))):
        a, b, e1, e2 = (source.nodes[path] for path in owners)
        assert a.meta is source.nodes["/"].meta and b.meta is not a.meta and e1.meta is not e2.meta
        assert (b.acl, b.aversion, b.ephemeral_owner) == (acls.READ_ACL_UNSAFE, 1, 0)
        assert (e1.acl, e1.aversion, e1.ephemeral_owner) == (a.acl, 0, 0x77) and e1.stat()[7] == 0x77
        assert source.digest == source.compute_digest() == tree.digest


def test_a_snapshot_written_as_its_records_arrive_is_the_one_written_at_once(tmp_path: Path) -> None:
    """A learner writes a SNAP stream chunk by chunk (SnapshotWriter); the file must be the
    one write_snapshot makes of the same records, and invisible until finished."""
    tree = sample_tree(120)
    records = list(tree.records())
    (tmp_path / "whole").mkdir()
    whole = write_snapshot(tmp_path / "whole", tree.last_zxid, records)
    staged = SnapshotWriter(tmp_path, tree.last_zxid, tmp_tag=".from2")
    own = SnapshotWriter(tmp_path, tree.last_zxid)  # this server's own snapshot at the same zxid
    for start in range(0, len(records), 50):
        staged.add(records[start : start + 50])
        assert list_snapshots(tmp_path) == []  # nothing under a snapshot's name before finish
    assert staged.count == len(records)
    own.discard()
    path = staged.finish()
    assert path.read_bytes() == whole.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, "whole"])
    staged.discard()  # after finish: nothing to do
    assert load(path).content_hash() == tree.content_hash()


def test_a_discarded_snapshot_writer_leaves_nothing(tmp_path: Path) -> None:
    writer = SnapshotWriter(tmp_path, 0x100000005, tmp_tag=".from3")
    writer.add(sample_tree(10).records())
    assert writer.tmp.exists()
    writer.discard()
    writer.discard()
    assert list(tmp_path.iterdir()) == []
