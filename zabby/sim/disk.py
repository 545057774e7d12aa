"""One server's simulated disk: epochs, a txn log with an unsynced tail, and a snapshot.

Faults are the ones a real disk gives and Zab must survive: a crash loses txns that were
appended but not yet fsynced (all of them, or a tail of them).  It never loses what was
synced, and an ACK only leaves after the sync (the Ready order), so nothing acknowledged is
ever lost.  Epoch files and truncation are written atomically and synced at once, like
``zabby.storage``.

Each log entry carries the rolling hash of the log up to it (``chain``), so the checkers
can compare logs and trees across servers in O(1).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from zabby.membership import Membership
from zabby.tree.txns import Txn


def chain_next(chain: int, txn: Txn) -> int:
    """The rolling hash of a txn sequence extended by ``txn`` (equality checks only)."""
    return hash((chain, txn.zxid, txn.session_id, txn.cxid, txn.type, repr(txn.body)))


class DiskFault(AssertionError):
    """The shell asked the disk for something it cannot do (a simulator finding)."""


@dataclass(slots=True)
class Snapshot:
    zxid: int = 0
    records: tuple[Any, ...] | None = None  # None: the empty tree
    chain: int = 0
    confirmed: bool = True  # False: installed from a leader's SNAP, maybe not committed yet


@dataclass(slots=True)
class Disk:
    accepted_epoch: int = 0
    current_epoch: int = 0
    snapshot: Snapshot = field(default_factory=Snapshot)
    log: list[tuple[Txn, int]] = field(default_factory=list)  # (txn, chain after it)
    synced: int = 0  # log entries that survive a crash
    membership: Membership | None = None  # the dynamic configuration file: the last committed reconfig

    @property
    def last_zxid(self) -> int:
        return self.log[-1][0].zxid if self.log else self.snapshot.zxid

    def chain_at_end(self) -> int:
        return self.log[-1][1] if self.log else self.snapshot.chain

    def save_epochs(self, accepted: int | None, current: int | None) -> None:
        if accepted is not None:
            self.accepted_epoch = accepted
        if current is not None:
            self.current_epoch = current

    def truncate(self, zxid: int) -> list[tuple[Txn, int]]:
        """Cut the log after ``zxid``; returns what was cut."""
        if zxid < self.snapshot.zxid:
            raise DiskFault(f"TRUNC to 0x{zxid:x} is below the snapshot at 0x{self.snapshot.zxid:x}")
        keep = len(self.log)
        while keep and self.log[keep - 1][0].zxid > zxid:
            keep -= 1
        cut = self.log[keep:]
        del self.log[keep:]
        self.synced = min(self.synced, keep)
        return cut

    def append(self, txns: list[Txn]) -> None:
        chain = self.chain_at_end()
        last = self.last_zxid
        for txn in txns:
            if txn.zxid <= last:
                raise DiskFault(f"log append 0x{txn.zxid:x} after 0x{last:x}")
            chain = chain_next(chain, txn)
            self.log.append((txn, chain))
            last = txn.zxid

    def sync(self) -> None:
        self.synced = len(self.log)

    def crash(self, rng: random.Random) -> int:
        """Lose some (maybe all) of the unsynced tail; returns how many entries were lost."""
        unsynced = len(self.log) - self.synced
        if unsynced <= 0:
            return 0
        kept = rng.randint(0, unsynced - 1) if rng.random() < 0.5 else 0
        lost = unsynced - kept
        del self.log[self.synced + kept:]
        self.synced = len(self.log)
        return lost

    def save_snapshot(self, snapshot: Snapshot, keep_count: int, *, clear_log: bool) -> None:
        """Durably replace the snapshot; keep at most ``keep_count`` log entries at or below it."""
        self.snapshot = snapshot
        if clear_log:
            self.log = []
        else:
            below = 0
            while below < len(self.log) and self.log[below][0].zxid <= snapshot.zxid:
                below += 1
            drop = max(0, below - keep_count)
            del self.log[:drop]
        self.synced = len(self.log)

    def entries_after(self, zxid: int, upto: int | None = None) -> list[tuple[Txn, int]]:
        return [(t, c) for t, c in self.log if t.zxid > zxid and (upto is None or t.zxid <= upto)]

    def chain_of(self, zxid: int) -> int | None:
        """The log's rolling hash at ``zxid`` if the log holds that zxid (or the snapshot is at it)."""
        if zxid == self.snapshot.zxid:
            return self.snapshot.chain
        for txn, chain in reversed(self.log):
            if txn.zxid == zxid:
                return chain
            if txn.zxid < zxid:
                break
        return None
