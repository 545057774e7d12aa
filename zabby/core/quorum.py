"""Majority quorums over the voting members (observers never count).

While a reconfiguration is proposed but not committed, every decision (an election, a new
leader's establishment, a commit) needs a quorum of the old membership *and* of the new:
``Quorums`` is that conjunction, with ``Majority``'s interface.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class Majority:
    def __init__(self, voters: Iterable[int]) -> None:
        self.voters = frozenset(voters)
        if not self.voters:
            raise ValueError("a quorum needs at least one voting member")
        self.size = len(self.voters) // 2 + 1

    def has_quorum(self, sids: Iterable[int]) -> bool:
        return len(self.voters.intersection(sids)) >= self.size

    def committed(self, acked: Mapping[int, int]) -> int:
        """The highest zxid acknowledged by a quorum (``acked``: voter sid → its highest ack)."""
        values = sorted([acked.get(sid, 0) for sid in self.voters], reverse=True)
        return values[self.size - 1]


class Quorums:
    """A quorum of each of several memberships at once (the first is the committed one)."""

    def __init__(self, voter_sets: Iterable[Iterable[int]]) -> None:
        self.majorities = [Majority(voters) for voters in voter_sets]
        if not self.majorities:
            raise ValueError("quorums need at least one membership")
        self.voters = frozenset().union(*(m.voters for m in self.majorities))
        self.size = self.majorities[0].size

    def has_quorum(self, sids: Iterable[int]) -> bool:
        if len(self.majorities) == 1:  # no reconfig proposed: asked after every ack and write
            return self.majorities[0].has_quorum(sids)
        sids = frozenset(sids)
        return all(m.has_quorum(sids) for m in self.majorities)

    def committed(self, acked: Mapping[int, int]) -> int:
        """The highest value acknowledged by a quorum of every membership."""
        if len(self.majorities) == 1:
            return self.majorities[0].committed(acked)
        return min(m.committed(acked) for m in self.majorities)
