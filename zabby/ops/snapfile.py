"""Snapshot files for operators: load one whole and checked, and summarise it.

A snapshot is trusted only once its trailer CRC matched, its record count matched, and the
tree it builds is at the zxid its header names (``zabby.storage.snapshot`` has the format).
Its *digest* is the tree digest of ZooKeeper 3.6+ (``DataTree.digest``): the figure ``mntr``
shows as ``zk_digest`` at ``zk_last_zxid`` and ``/commands/hash`` lists, so a snapshot can be
matched with what a live server reported at that zxid.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zabby.errors import InvariantError
from zabby.ops.errors import DataError, UsageError
from zabby.storage.snapshot import CorruptSnapshotError, read_snapshot
from zabby.tree.datatree import DataTree


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    path: Path
    zxid: int
    file_bytes: int
    znodes: int
    sessions: int
    data_bytes: int  # mntr's approximate_data_size: paths plus data
    digest: int

    def as_dict(self) -> dict[str, object]:
        return {
            "file": str(self.path), "zxid": f"0x{self.zxid:x}", "epoch": self.zxid >> 32,
            "counter": self.zxid & 0xFFFFFFFF, "znodes": self.znodes, "sessions": self.sessions,
            "file_bytes": self.file_bytes, "data_bytes": self.data_bytes, "digest": f"0x{self.digest:016x}",
        }  # fmt: skip


def load_tree(path: Path) -> DataTree:
    """The tree a snapshot file holds, checked whole (see the module doc).

    Raises:
        UsageError: no such file, or a folder.
        DataError: the file is damaged, not a snapshot, or not at the zxid it names.
    """
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    if not path.is_file():
        raise UsageError(f"{path}: not a file")
    try:
        zxid, records = read_snapshot(path)
        tree = DataTree.from_records(records)
    except CorruptSnapshotError as exc:
        raise DataError(str(exc)) from None
    except (InvariantError, ValueError, TypeError, KeyError) as exc:  # records of the wrong shape
        raise DataError(f"snapshot {path}: records do not make a tree: {exc}") from None
    if tree.last_zxid != zxid:
        raise DataError(f"snapshot {path}: header says zxid 0x{zxid:x}, its tree is at 0x{tree.last_zxid:x}")
    return tree


def summarize(path: Path, tree: DataTree) -> SnapshotInfo:
    return SnapshotInfo(path, tree.last_zxid, path.stat().st_size, tree.node_count(), len(tree.sessions),
                        tree.data_size, tree.digest)  # fmt: skip


def status(path: Path) -> SnapshotInfo:
    """zxid, znode count, sizes and digest of a snapshot file, once it is checked whole."""
    return summarize(path, load_tree(path))
