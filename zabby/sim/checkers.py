"""Safety invariants, checked after every step of the simulation (Zab.tla's, in practice).

* one established leader per epoch;
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

from zabby.sim.disk import chain_next
from zabby.tree.txns import Txn, make_zxid


class Violation(AssertionError):
    """A safety invariant failed: a bug in the core (or the simulated shell)."""


@dataclass(slots=True)
class AckedWrite:
    zxid: int
    session_id: int
    cxid: int
    sid: int  # the server that answered
    tick: int


@dataclass(slots=True)
class Checker:
    chain: dict[int, tuple[int, int]] = field(default_factory=lambda: {0: (0, -1)})
    committed: list[int] = field(default_factory=list)  # sorted zxids committed anywhere
    committed_set: set[int] = field(default_factory=set)
    epoch_leaders: dict[int, int] = field(default_factory=dict)
    acked: list[AckedWrite] = field(default_factory=list)
    acked_max: int = 0
    applies: int = 0

    # ----------------------------------------------------------------- applies
    def on_apply(self, sid: int, tree_zxid: int, tree_chain: int, txn: Txn, *, committed: bool) -> int:
        """Check and record one apply; returns the server's new rolling hash."""
        if txn.zxid <= tree_zxid:
            raise Violation(f"server {sid} applied 0x{txn.zxid:x} after 0x{tree_zxid:x} (out of order)")
        new = chain_next(tree_chain, txn)
        seen = self.chain.get(txn.zxid)
        if seen is None:
            self.chain[txn.zxid] = (new, tree_zxid)
        elif seen != (new, tree_zxid):
            raise Violation(
                f"server {sid} applied 0x{txn.zxid:x} after 0x{tree_zxid:x} with a different history than "
                f"another server (which applied it after 0x{seen[1]:x})"
            )
        if committed and txn.zxid not in self.committed_set:
            self.committed_set.add(txn.zxid)
            bisect.insort(self.committed, txn.zxid)
        self.applies += 1
        return new

    def chain_hash(self, zxid: int) -> int:
        found = self.chain.get(zxid)
        if found is None:
            raise Violation(f"no server ever applied 0x{zxid:x}")
        return found[0]

    def on_truncate(self, sid: int, cut: list[tuple[Txn, int]]) -> None:
        for txn, chain in cut:
            if txn.zxid in self.committed_set and self.chain[txn.zxid][0] == chain:
                raise Violation(f"server {sid} truncated committed txn 0x{txn.zxid:x} from its log")

    # ----------------------------------------------------------------- leaders
    def on_established(self, sid: int, epoch: int, tree_zxid: int) -> None:
        other = self.epoch_leaders.setdefault(epoch, sid)
        if other != sid:
            raise Violation(f"two established leaders in epoch {epoch}: {other} and {sid}")
        index = bisect.bisect_left(self.committed, make_zxid(epoch, 0))
        if index == 0:
            return
        needed = self.committed[index - 1]
        if not self.on_chain(tree_zxid, needed):
            raise Violation(f"leader {sid} of epoch {epoch} lacks committed txn 0x{needed:x} (its tree is at 0x{tree_zxid:x})")

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
