"""A learner's check of its tree against the leader's digests (ZooKeeper 3.6+'s digest).

The leader sends ``TreeDigest(zxid, digest)`` after it applied ``zxid``; the learner may be
behind (the digest waits until its tree gets there) or already past it (its tree keeps the
digests of its last applies).  A mismatch is an ``Inconsistency``: the engine then repairs
itself and resyncs by SNAP.
"""

from __future__ import annotations

from collections import deque

from zabby.errors import Inconsistency
from zabby.engine.stats import ServerStats
from zabby.tree.datatree import DataTree

EXPECTED_MAX = 256


class DigestCheck:
    def __init__(self, stats: ServerStats) -> None:
        self.stats = stats
        self.expected: deque[tuple[int, int]] = deque(maxlen=EXPECTED_MAX)

    def expect(self, zxid: int, digest: int, leader: int, tree: DataTree) -> None:
        self.expected.append((zxid, digest))
        self.check(tree, leader)

    def check(self, tree: DataTree, leader: int | None) -> None:
        """Compare every expected digest the tree has reached.

        Raises:
            Inconsistency: one differs from ours at the same zxid.
        """
        expected = self.expected
        while expected and expected[0][0] <= tree.last_zxid:
            zxid, digest = expected.popleft()
            mine = tree.digest_at(zxid)
            if mine is not None and mine != digest:
                self.stats.digest_mismatches += 1
                raise Inconsistency(f"the tree digest at 0x{zxid:x} is 0x{mine:016x} here but 0x{digest:016x} "
                                    f"on the leader (server {leader})")  # fmt: skip

    def clear(self) -> None:
        self.expected.clear()
