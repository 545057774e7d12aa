"""Safety invariants, checked after every step of the simulation (Zab.tla's, in practice).

* one established leader per epoch, established by a quorum of the membership committed
  last before its epoch (across reconfigurations: no two leaders of disjoint quorums);
* every txn committed on any server is in the log of every later leader (checked when a
  leader becomes established: its tree — its whole log applied — passes through the
  highest zxid committed anywhere in an earlier epoch);
* no committed txn is ever truncated from a log;
* trees agree: every apply extends a per-server rolling hash of the applied sequence, and
  the first server to reach zxid Z fixes the hash at Z that every other must match
  (``chain``: zxid → (hash, previous zxid)); full ``DataTree.content_hash()`` at the end;
* no server applies out of order (zxids strictly grow on each tree);
* acknowledged writes are never lost: at the end, each one is on the final chain;
* a sync answered on a server finds every write acknowledged before the sync began.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from zabby.core.quorum import Majority
from zabby.membership import Membership
from zabby.opcodes import OpCode
from zabby.tree.txns import ZXID_COUNTER_LAST, Txn, encode_txn, make_zxid, zxid_counter


FORGED_CXID = 0x7F0F0F0F  # the cxid of the forging nemesis's writes (zabby.sim.forge): none may be applied


class Violation(AssertionError):
    """A safety invariant failed: a bug in the core (or the simulated shell)."""


@dataclass(slots=True)
class AckedWrite:
    zxid: int
    session_id: int
    cxid: int
    sid: int  # the server that answered
    tick: int


def chain_next(chain: int, txn: Txn) -> int:
    """The rolling hash of a txn sequence extended by ``txn`` (equality checks only)."""
    return hash((chain, txn_identity(txn)))


def txn_identity(txn: Txn) -> bytes:
    """The txn as the log stores it: the same for a txn and its copy decoded from a log."""
    return encode_txn(txn)


@dataclass(slots=True)
class Checker:
    chain: dict[int, tuple[int, int]] = field(default_factory=lambda: {0: (0, -1)})
    applied_txns: dict[int, bytes] = field(default_factory=dict)  # zxid -> the txn applied at it (one leader proposed it)
    committed: list[int] = field(default_factory=list)  # sorted zxids committed anywhere
    committed_set: set[int] = field(default_factory=set)
    epoch_leaders: dict[int, int] = field(default_factory=dict)
    acked: list[AckedWrite] = field(default_factory=list)
    acked_max: int = 0
    applies: int = 0
    memberships: list[tuple[int, frozenset[int]]] = field(default_factory=list)  # committed: (version, voters)
    logged_memberships: dict[int, frozenset[int]] = field(default_factory=dict)  # a RECONFIG some server logged: voters by zxid
    reconfigs: dict[int, frozenset[int]] = field(default_factory=dict)  # every RECONFIG applied: zxid -> voters
    zxid_counter_last: int = ZXID_COUNTER_LAST  # no server logs a txn of a higher counter (a new epoch comes first)

    # ----------------------------------------------------------------- applies
    def on_apply(self, sid: int, tree_zxid: int, tree_chain: int, txn: Txn, *, committed: bool) -> int:
        """Check and record one apply; returns the server's new rolling hash."""
        if txn.cxid == FORGED_CXID:
            raise Violation(f"server {sid} applied 0x{txn.zxid:x}, a txn of a write forged by a server that is no member")
        if txn.zxid <= tree_zxid:
            raise Violation(f"server {sid} applied 0x{txn.zxid:x} after 0x{tree_zxid:x} (out of order)")
        new = chain_next(tree_chain, txn)
        seen = self.chain.get(txn.zxid)
        if seen is None:
            self.chain[txn.zxid] = (new, tree_zxid)
            self.applied_txns[txn.zxid] = txn_identity(txn)
        elif seen != (new, tree_zxid):
            raise Violation(
                f"server {sid} applied 0x{txn.zxid:x} after 0x{tree_zxid:x} with a different history than "
                f"another server (which applied it after 0x{seen[1]:x})"
            )
        if txn.type == OpCode.RECONFIG:
            self.reconfigs[txn.zxid] = Membership.parse(txn.body[0]).voters
        if committed:
            self._commit_history(txn.zxid)
        self.applies += 1
        return new

    def on_logged(self, txns: list[Txn]) -> None:
        """Txns a server logged: the memberships their RECONFIGs propose may be recorded."""
        for txn in txns:
            if zxid_counter(txn.zxid) > self.zxid_counter_last:
                raise Violation(f"0x{txn.zxid:x} was logged: its counter is past 0x{self.zxid_counter_last:x}, the last of an epoch")
            if txn.type == OpCode.RECONFIG:
                self.logged_memberships[txn.zxid] = Membership.parse(txn.body[0]).voters

    def on_membership(self, sid: int, membership: Membership) -> None:
        """A server records a membership as committed: one a logged RECONFIG txn made (no
        forged vote's), with that txn's voters."""
        voters = self.logged_memberships.get(membership.version)
        if voters is None or voters != membership.voters:
            raise Violation(f"server {sid} records membership 0x{membership.version:x} (voters {sorted(membership.voters)}), "
                            "which no logged reconfig made")  # fmt: skip

    def _commit(self, zxid: int) -> None:
        if zxid in self.committed_set:
            return
        self.committed_set.add(zxid)
        bisect.insort(self.committed, zxid)
        if zxid in self.reconfigs:
            bisect.insort(self.memberships, (zxid, self.reconfigs[zxid]))

    def chain_hash(self, zxid: int) -> int:
        found = self.chain.get(zxid)
        if found is None:
            raise Violation(f"no server ever applied 0x{zxid:x}")
        return found[0]

    def on_truncate(self, sid: int, cut: list[Txn]) -> None:
        for txn in cut:
            if txn.zxid in self.committed_set and self.applied_txns.get(txn.zxid) == txn_identity(txn):
                raise Violation(f"server {sid} truncated committed txn 0x{txn.zxid:x} from its log")

    # ----------------------------------------------------------------- leaders
    def on_established(self, sid: int, epoch: int, tree_zxid: int, established_by: frozenset[int] | None = None) -> None:
        """``established_by``: None if the leader already stepped down in the same Ready."""
        other = self.epoch_leaders.setdefault(epoch, sid)
        if other != sid:
            raise Violation(f"two established leaders in epoch {epoch}: {other} and {sid}")
        index = bisect.bisect_left(self.committed, make_zxid(epoch, 0))
        needed = self.committed[index - 1] if index else 0
        if needed and not self.on_chain(tree_zxid, needed):
            raise Violation(f"leader {sid} of epoch {epoch} lacks committed txn 0x{needed:x} (its tree is at 0x{tree_zxid:x})")
        self._commit_history(tree_zxid)
        if established_by is not None:
            self._check_quorum(sid, epoch, established_by)

    def _commit_history(self, head: int) -> None:
        """A committed txn commits its whole history, some of which a server may only have
        applied at a restart's replay until now (so is an established leader's)."""
        while head > 0 and head not in self.committed_set:
            self._commit(head)
            head = self.chain[head][1]

    def _check_quorum(self, sid: int, epoch: int, established_by: frozenset[int]) -> None:
        """A leader is established by a quorum of the membership last committed before its
        epoch: two leaders of a reconfiguration's old and new memberships then share a voter."""
        index = bisect.bisect_left(self.memberships, (make_zxid(epoch, 0), frozenset()))
        if not index:
            return  # the first membership was never given (a test of one checker's part)
        version, voters = self.memberships[index - 1]
        if not Majority(voters).has_quorum(established_by):
            raise Violation(f"leader {sid} of epoch {epoch} established by {sorted(established_by)}, no quorum of the "
                            f"membership committed at 0x{version:x} (voters {sorted(voters)})")  # fmt: skip

    def on_chain(self, head: int, zxid: int) -> bool:
        """True if the applied history ending at ``head`` contains ``zxid``."""
        while head > zxid:
            head = self.chain[head][1]
        return head == zxid

    def history(self, head: int) -> set[int]:
        out = set()
        while head > 0:
            out.add(head)
            head = self.chain[head][1]
        return out

    # ----------------------------------------------------------------- clients
    def on_acked(self, write: AckedWrite) -> None:
        if write.zxid not in self.committed_set:
            raise Violation(f"server {write.sid} answered a write at 0x{write.zxid:x} that was never committed")
        self.acked.append(write)
        self.acked_max = max(self.acked_max, write.zxid)

    def on_sync_answered(self, sid: int, tree_zxid: int, needed: int) -> None:
        if tree_zxid < needed:
            raise Violation(f"server {sid} answered a sync at 0x{tree_zxid:x}, behind an acknowledged write 0x{needed:x}")

    def check_acked_present(self, head: int) -> None:
        history = self.history(head)
        for write in self.acked:
            if write.zxid not in history:
                raise Violation(f"acknowledged write 0x{write.zxid:x} (session {write.session_id}) is lost")
