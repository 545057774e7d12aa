"""Majority quorums over the voting members (observers never count)."""

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
        values = sorted((acked.get(sid, 0) for sid in self.voters), reverse=True)
        return values[self.size - 1]
