"""``Storage``: one server's durable state behind the few calls its shells make.

Both shells carry out the engine's disk effects through it: the trio server over the real
file system (in its disk thread), and the simulator over ``zabby.sim.fs.SimFS``, where a crash
loses, tears or reorders what was not synced.  So the log, the snapshots, the epoch files,
retention and recovery that the simulator's seeds exercise are the ones that ship, and a
restart is built one way: ``recover``.

The calls, in the order the engine's effects make them (``Persist``: accepted epoch,
truncation, append, sync, current epoch; see ``zabby.engine.effects``):

- ``recover``: the tree (newest valid snapshot plus the log after it) and the core's
  ``DurableState``; the log is (re)opened for appends.
- ``write_accepted_epoch`` / ``write_current_epoch``: atomic, durable at return.
- ``truncate_after`` (durable at return), ``append`` (not durable), ``sync``.
- ``stage_snapshot`` / ``install_snapshot``: a leader's SNAP, written as it arrives.
- ``snapshot_due`` then ``write_snapshot`` (or a forked child's ``write_snapshot`` on
  ``snap_dir``), ``purge``, ``retry_reserve``, ``close``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from zabby.config import ServerConfig
from zabby.core.peer import DurableState
from zabby.engine.effects import Recovered
from zabby.engine.reconfig import logged_membership
from zabby.errors import InvariantError
from zabby.membership import Membership
from zabby.storage.datadir import DataDir, DigestBeside, RecoveryError
from zabby.storage.epochs import read_epoch, write_epoch
from zabby.storage.fs import OS_FS, FileSystem
from zabby.storage.snapshot import SnapshotWriter, write_snapshot
from zabby.storage.txnlog import CorruptLogError, TxnLog
from zabby.tree.datatree import DataTree
from zabby.tree.txns import Txn, decode_txn, encode_txn, zxid_epoch
from zabby.tree.watches import WatchHistory

LOGGER = logging.getLogger("zabby.storage")


class Storage:
    """One server's data dirs (``config.data_dir``, ``config.data_log_dir``) on ``fs``."""

    def __init__(self, config: ServerConfig, *, fs: FileSystem = OS_FS, segment_bytes_max: int | None = None) -> None:
        self.config = config
        self.fs = fs
        self.datadir = DataDir(config.data_dir, config.data_log_dir, snap_retain_count=config.snap_retain_count,
                               log_reserve_bytes=config.log_reserve_bytes, fs=fs)  # fmt: skip
        self.segment_bytes_max = segment_bytes_max
        self.repairs = bool(config.peers)  # a member rebuilds damage from its leader; a standalone server cannot
        self._log: TxnLog | None = None

    @property
    def log(self) -> TxnLog:
        if self._log is None:
            raise InvariantError(f"the txn log of {self.datadir.data_dir} is used before recovery")
        return self._log

    @property
    def snap_dir(self) -> Path:
        return self.datadir.snap_dir

    # ----------------------------------------------------------------- recovery
    def recover(self, membership: Membership | None, *, snapshot_wanted: bool = False, at_start: bool = False,
                digest_beside: Callable[[Path], DigestBeside] | None = None) -> Recovered:  # fmt: skip
        """The tree and the core's durable state, as a restart finds them; ``membership`` is
        the one the configuration files record (the last committed reconfig).  ``at_start``:
        no snapshot writer can be running, so the ``.tmp`` files a crash left go first.

        A member of an ensemble whose history is damaged (a record or a snapshot that fails
        its checks where no crash can explain it) starts a repair (``DataDir.start_repair``)
        and recovers an empty tree; its ``DurableState`` says ``repairing`` until a leader
        has synced it (``write_current_epoch``).

        Raises:
            RecoveryError, CorruptLogError (a standalone server's damage), CorruptEpochError,
                DiskFailure, OSError: the data dir cannot be read back without losing txns.
        """
        self.close()
        if at_start:
            self.datadir.remove_unfinished_snapshots()
        try:
            recovered = self._recover(membership, snapshot_wanted, digest_beside)
        except (CorruptLogError, RecoveryError) as exc:
            if not self.repairs:
                raise
            LOGGER.error("the history in %s is damaged (%s): starting over empty, to be repaired by the leader; "
                         "this server votes for nobody until then", self.datadir.data_dir, exc)  # fmt: skip
            self.close()
            self.datadir.start_repair(str(exc))
            recovered = self._recover(membership, snapshot_wanted, digest_beside)
        return recovered

    def _recover(self, membership: Membership | None, snapshot_wanted: bool,
                 digest_beside: Callable[[Path], DigestBeside] | None) -> Recovered:  # fmt: skip
        # the txns replayed onto the snapshot make the watch history, so that a restarted
        # server serves watches resuming from as far back as its snapshot
        history = WatchHistory(self.config.watch_history_txns, 0, self.config.watch_history_bytes)
        tree, self._log = self.datadir.recover(segment_bytes_max=self.segment_bytes_max, digest_beside=digest_beside,
                                               on_replayed=history.record)  # fmt: skip
        history.since = max(history.since, self.datadir.recovered.snapshot_zxid)  # it starts after the snapshot
        return Recovered(tree, self.durable_state(tree, membership, snapshot_wanted=snapshot_wanted), history)

    def durable_state(self, tree: DataTree, committed: Membership | None, *, snapshot_wanted: bool = False) -> DurableState:
        """What the core recovers from disk: epochs missing from an older data dir default to
        the epoch of the last logged zxid, as ZooKeeper's do."""
        log = self.log
        last_logged = max(log.last_zxid, tree.last_zxid)
        history_count = self.config.commit_log_count  # only the window's txns are read and decoded
        tail = [payload for _, payload in log.tail(history_count)] if history_count else []
        default_epoch = zxid_epoch(last_logged)
        return DurableState(
            accepted_epoch=read_epoch(self.datadir.accepted_epoch_path, default_epoch, fs=self.fs),
            current_epoch=read_epoch(self.datadir.current_epoch_path, default_epoch, fs=self.fs),
            last_logged=last_logged,
            applied=tree.last_zxid,
            history=tuple(decode_txn(payload) for payload in tail),
            snapshot_zxid=self.datadir.newest_snapshot_zxid(),
            snapshot_wanted=snapshot_wanted,
            membership=committed,
            proposed=logged_membership(tree, committed),
            repairing=self.datadir.repairing,
        )

    # ----------------------------------------------------------------- the log and the epochs
    def write_accepted_epoch(self, epoch: int) -> None:
        write_epoch(self.datadir.accepted_epoch_path, epoch, fs=self.fs)

    def write_current_epoch(self, epoch: int) -> None:
        """A learner writes it once its leader's history is logged (NEWLEADER): a repair ends."""
        write_epoch(self.datadir.current_epoch_path, epoch, fs=self.fs)
        if self.datadir.repairing:  # the marker is the state: a crash mid-repair keeps it
            self.datadir.end_repair()
            LOGGER.info("the history in %s is repaired: synced with the leader of epoch %d", self.datadir.data_dir, epoch)

    def truncate_after(self, zxid: int) -> None:
        self.log.truncate_after(zxid)

    def append(self, txns: Sequence[Txn]) -> None:
        if txns:
            (self._log or self.log).append([(txn.zxid, encode_txn(txn)) for txn in txns])  # the property only to raise its error

    def sync(self) -> None:
        (self._log or self.log).sync()

    def logged_after(self, zxid: int) -> list[Txn]:
        """The txns the log holds above ``zxid`` (what a truncation to it would cut)."""
        return [decode_txn(payload) for _, payload in self.log.read_from(zxid)]

    # ----------------------------------------------------------------- snapshots and space
    def stage_snapshot(self, zxid: int, sid: int) -> SnapshotWriter:
        return self.datadir.stage_snapshot(zxid, sid)

    def install_snapshot(self, staged: SnapshotWriter) -> Path:
        return self.datadir.install_snapshot(staged)

    def snapshot_due(self) -> None:
        """A snapshot is being taken: the log starts a new segment (so purging can drop the old)."""
        self.log.roll()

    def write_snapshot(self, zxid: int, records: Iterable[tuple[Any, ...]]) -> Path:
        """In this process (the server's forked children call ``write_snapshot`` themselves)."""
        return write_snapshot(self.datadir.snap_dir, zxid, records, fs=self.fs)

    def purge(self) -> list[Path]:
        return self.datadir.purge()

    def retry_reserve(self) -> bool:
        return self.log.retry_reserve()

    @property
    def space_low(self) -> bool:
        return (self._log or self.log).space_low

    def close(self) -> None:
        self.datadir.close()  # the log it recovered: ``self._log``
        self._log = None
