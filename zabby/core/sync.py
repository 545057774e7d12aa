"""Phase 2, the leader's choice of how to bring a learner up to date (LearnerHandler.syncFollower).

``choose_sync`` is a pure function of the learner's last logged zxid, the leader's last
logged zxid and its history window.  Cases, in ZooKeeper's order:

1. the learner is where the leader is                      → DIFF, nothing to send
2. the learner is past the window's end                    → TRUNC to the window's end
3. inside the window, and the leader holds that very zxid  → DIFF: the txns after it
4. inside the window, but the leader never had that zxid   → TRUNC to the txn before it, then DIFF
   (the learner logged a proposal of an epoch that died before committing it)
5. below the window, or no window at all                   → SNAP
0. before all of these: the learner asked for a SNAP (``force_snap``), because a TRUNC would
   go below its newest snapshot (see ``Peer``: the snapshot may hold the truncated txns)

The learner's history is a prefix of the leader's (Zab's invariant once the leader's epoch
is established), except for the uncommitted tail that TRUNC removes.
"""

from __future__ import annotations

from dataclasses import dataclass

from zabby.core.history import History
from zabby.core.types import SyncMode
from zabby.tree.txns import Txn


@dataclass(frozen=True, slots=True)
class SyncPlan:
    mode: SyncMode
    trunc_zxid: int = 0  # for TRUNC and TRUNC+DIFF
    txns: tuple[Txn, ...] = ()  # for DIFF and TRUNC+DIFF
    snap_zxid: int = 0  # for SNAP


def choose_sync(peer_last_zxid: int, leader_last_zxid: int, history: History, *, force_snap: bool = False) -> SyncPlan:
    if force_snap:
        return SyncPlan(SyncMode.SNAP, snap_zxid=leader_last_zxid)
    if peer_last_zxid == leader_last_zxid:
        return SyncPlan(SyncMode.DIFF)
    window = bool(history.txns)
    if window and peer_last_zxid > history.max_zxid:
        return SyncPlan(SyncMode.TRUNC, trunc_zxid=history.max_zxid)
    if not window and peer_last_zxid > leader_last_zxid:
        return SyncPlan(SyncMode.TRUNC, trunc_zxid=leader_last_zxid)
    if window and history.min_zxid <= peer_last_zxid:
        if history.contains(peer_last_zxid):
            return SyncPlan(SyncMode.DIFF, txns=tuple(history.after(peer_last_zxid)))
        floor = history.floor(peer_last_zxid)
        return SyncPlan(SyncMode.TRUNC_DIFF, trunc_zxid=floor, txns=tuple(history.after(floor)))
    return SyncPlan(SyncMode.SNAP, snap_zxid=leader_last_zxid)
