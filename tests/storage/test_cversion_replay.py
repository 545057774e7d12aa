"""A log written before the cversion fix replays to the Stat ZooKeeper shows.

ZooKeeper keeps a parent's cversion as a count of child creates (the sequential suffix comes
from it) and shows 2 × creates − children in a Stat, so a delete counts in the Stat without
changing what a delete txn carries.  The txn shapes did not change: the records below are,
byte for byte, what the earlier code logged for create /c, /c/a, /c/b, /c/d, delete /c/d.
"""

from __future__ import annotations

from pathlib import Path

from zabby.opcodes import CreateMode, OpCode
from zabby.storage import DataDir
from zabby.tree.datatree import DataTree
from zabby.tree.prep import Caller, Preparer
from zabby.tree.txns import decode_txn

EARLIER_LOG = [
    "96cf0000000100000001cd010001cf0000018bcfe568010195a22f63c40091931fa5776f726c64a6616e796f6e650001",
    "96cf0000000100000002cd010002cf0000018bcfe568020195a42f632f61c40091931fa5776f726c64a6616e796f6e650001",
    "96cf0000000100000003cd010003cf0000018bcfe568030195a42f632f62c40091931fa5776f726c64a6616e796f6e650002",
    "96cf0000000100000004cd010004cf0000018bcfe568040195a42f632f64c40091931fa5776f726c64a6616e796f6e650003",
    "96cf0000000100000005cd010005cf0000018bcfe568050291a42f632f64",  # delete /c/d: [path], nothing more
]
CVERSION, NUM_CHILDREN = 5, 9


def write_earlier_log(data_dir: DataDir) -> None:
    raw = [bytes.fromhex(text) for text in EARLIER_LOG]
    assert data_dir.log is not None
    data_dir.log.append([(decode_txn(record).zxid, record) for record in raw])
    data_dir.log.sync()


def next_sequential_name(tree: DataTree) -> str:
    preparer = Preparer(tree)
    args = ("/c/s-", b"", ((31, "world", "anyone"),), int(CreateMode.PERSISTENT_SEQUENTIAL), None)
    _, body = preparer.prepare(OpCode.CREATE, args, Caller(0x100, []), tree.last_zxid + 1, 0)
    return str(body[0])


def test_earlier_log_replays_to_zookeepers_cversion_and_suffix(tmp_path: Path) -> None:
    data_dir = DataDir(tmp_path / "data")
    data_dir.recover()
    write_earlier_log(data_dir)
    data_dir.close()

    tree, _log = DataDir(tmp_path / "data").recover()
    stat = tree.nodes["/c"].stat()
    assert (stat[CVERSION], stat[NUM_CHILDREN]) == (4, 2)  # ZooKeeper 3.8: 3 creates + 1 delete
    assert tree.nodes["/c"].cversion == 3
    assert next_sequential_name(tree) == "/c/s-0000000003"  # ZooKeeper: the count of creates


def test_snapshot_keeps_the_count_of_creates(tmp_path: Path) -> None:
    data_dir = DataDir(tmp_path / "data")
    tree, _log = data_dir.recover()
    write_earlier_log(data_dir)
    tree, _log = data_dir.recover()
    data_dir.take_snapshot(tree.records(), tree.last_zxid)
    data_dir.close()

    again, _log = DataDir(tmp_path / "data").recover()
    assert again.nodes["/c"].stat() == tree.nodes["/c"].stat()
    assert again.nodes["/c"].stat()[CVERSION] == 4
    assert next_sequential_name(again) == "/c/s-0000000003"
