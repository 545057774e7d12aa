"""``snapshot restore FILE --data-dir DIR --myid N``: seed a server's data dir from a snapshot.

Theory of operation: a restored data dir holds the snapshot under its zxid's name, no txn
log, ``myid``, and both epoch files set to the snapshot's epoch ``e``.  Recovery loads the
snapshot (an empty log covers any snapshot), and election then runs among servers that all
sit at the same zxid with ``acceptedEpoch = e``: the leader proposes epoch ``e + 1``, every
follower is in sync with an empty DIFF, and the ensemble serves exactly the snapshot's tree
in a new epoch.  Seed every server of a new ensemble from the *same* file; a single server
seeded this way and started inside a running ensemble is brought to the ensemble's state by
the usual sync (SNAP or TRUNC+DIFF), like any server that was away.

A snapshot whose ``/zookeeper/config`` holds the membership a reconfig committed in the old
ensemble is written without it (``DataTree.forget_reconfig``): a server takes a logged
membership newer than its configuration's, and the old ensemble's hosts and ports are not
the new one's.  The digest leaves ``/zookeeper`` out, so it does not change.

A data dir that already holds snapshots, logs or epochs is refused, unless ``force``: then
its ``version-2`` folders are moved aside (``version-2.before-restore-<time>``), never
deleted.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from zabby.ops.errors import UsageError
from zabby.ops.snapfile import SnapshotInfo, load_tree, summarize
from zabby.storage.datadir import MYID, VERSION_DIR
from zabby.storage.epochs import ACCEPTED_EPOCH, CURRENT_EPOCH, write_epoch
from zabby.storage.files import fsync_dir, write_atomically, write_chunks_atomically
from zabby.storage.snapshot import CHUNK_BYTES, snapshot_name, write_snapshot
from zabby.tree.txns import zxid_epoch

SERVER_ID_MAX = 255  # ZooKeeper's limit: the id is the top byte of session ids


@dataclass(frozen=True, slots=True)
class RestoreResult:
    snapshot: SnapshotInfo
    data_dir: Path
    written: Path
    epoch: int
    moved_aside: tuple[Path, ...]
    membership_dropped: bool  # the snapshot's reconfig membership was left out


def _in_use(version_dir: Path) -> list[str]:
    """The files of a server's history found in ``version_dir``."""
    if not version_dir.is_dir():
        return []
    prefixes = ("snapshot.", "log.", ACCEPTED_EPOCH, CURRENT_EPOCH)
    return sorted(name for name in os.listdir(version_dir) if name.startswith(prefixes))


def _check_myid(data_dir: Path, myid: int, force: bool) -> None:
    if not 1 <= myid <= SERVER_ID_MAX:
        raise UsageError(f"--myid {myid}: a server id is between 1 and {SERVER_ID_MAX}")
    path = data_dir / MYID
    if path.exists() and not force and path.read_text().strip() != str(myid):
        raise UsageError(f"{path} holds {path.read_text().strip()!r}, not {myid}: wrong data dir? (--force replaces it)")


def _clear(version_dirs: list[Path], force: bool) -> tuple[Path, ...]:
    found = {folder: _in_use(folder) for folder in version_dirs}
    busy = {folder: names for folder, names in found.items() if names}
    if busy and not force:
        what = "; ".join(f"{folder}: {', '.join(names[:4])}{'…' if len(names) > 4 else ''}" for folder, names in busy.items())
        raise UsageError(f"the data dir is not empty ({what}); restore needs an empty one (--force moves these aside)")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    moved = []
    for folder in busy:
        aside = folder.with_name(f"{VERSION_DIR}.before-restore-{stamp}")
        folder.rename(aside)
        fsync_dir(folder.parent)
        moved.append(aside)
    return tuple(moved)


def _copy(source: Path, target: Path) -> None:
    with source.open("rb") as f:
        write_chunks_atomically(target, iter(lambda: f.read(CHUNK_BYTES), b""))


def restore(snapshot: Path, data_dir: Path, myid: int, *, data_log_dir: Path | None = None, force: bool = False) -> RestoreResult:
    """Seed ``data_dir`` (and ``data_log_dir``) from ``snapshot`` for server ``myid``.

    Raises:
        UsageError: a missing snapshot, a bad id, or a data dir in use (without ``force``).
        DataError: the snapshot is damaged (it is checked whole before anything is written).
    """
    tree = load_tree(snapshot)
    info = summarize(snapshot, tree)
    _check_myid(data_dir, myid, force)
    snap_dir, log_dir = data_dir / VERSION_DIR, (data_log_dir or data_dir) / VERSION_DIR
    moved = _clear(sorted({snap_dir, log_dir}), force)
    for folder in (snap_dir, log_dir):
        folder.mkdir(parents=True, exist_ok=True)
    dropped = tree.forget_reconfig()
    if dropped:
        target = write_snapshot(snap_dir, info.zxid, tree.records())
    else:
        target = snap_dir / snapshot_name(info.zxid)
        _copy(snapshot, target)
    epoch = zxid_epoch(info.zxid)
    write_epoch(snap_dir / ACCEPTED_EPOCH, epoch)
    write_epoch(snap_dir / CURRENT_EPOCH, epoch)
    write_atomically(data_dir / MYID, f"{myid}\n".encode())
    return RestoreResult(info, data_dir, target, epoch, moved, dropped)
