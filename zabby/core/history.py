"""The leader's in-memory window of recent txns, the source of DIFF syncs.

It holds the last ``count_max`` txns the server logged, committed or not, in zxid order
(ZooKeeper's committedLog plus the outstanding proposals).  ``min_zxid``/``max_zxid`` bound
what a DIFF can serve; a learner below the window gets a SNAP.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from zabby.errors import InvariantError
from zabby.tree.txns import Txn


class History:
    def __init__(self, count_max: int) -> None:
        self.count_max = count_max
        self.txns: deque[Txn] = deque(maxlen=count_max)  # the oldest go as the newest come, in C

    def extend(self, txns: Iterable[Txn]) -> None:
        """Every server calls this for every batch it logs: the check is one loop, the append one call."""
        txns = txns if isinstance(txns, (list, tuple)) else list(txns)
        kept = self.txns
        last = kept[-1].zxid if kept else -1
        for txn in txns:
            if txn.zxid <= last:
                raise InvariantError(f"history must grow: 0x{txn.zxid:x} after 0x{last:x}")
            last = txn.zxid
        kept.extend(txns)

    def truncate_after(self, zxid: int) -> None:
        while self.txns and self.txns[-1].zxid > zxid:
            self.txns.pop()

    def clear(self) -> None:
        self.txns.clear()

    @property
    def min_zxid(self) -> int:
        return self.txns[0].zxid if self.txns else 0

    @property
    def max_zxid(self) -> int:
        return self.txns[-1].zxid if self.txns else 0

    def after(self, zxid: int) -> list[Txn]:
        """Every txn with a zxid above ``zxid`` (the caller checked it is inside the window)."""
        out = []
        for txn in reversed(self.txns):
            if txn.zxid <= zxid:
                break
            out.append(txn)
        out.reverse()
        return out

    def contains(self, zxid: int) -> bool:
        return any(txn.zxid == zxid for txn in self.txns) if self.min_zxid <= zxid <= self.max_zxid else False

    def floor(self, zxid: int) -> int:
        """The largest zxid in the window at or below ``zxid`` (0 if none)."""
        for txn in reversed(self.txns):
            if txn.zxid <= zxid:
                return txn.zxid
        return 0
