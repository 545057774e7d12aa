"""Snapshots to disk: one every snapCount/2 to snapCount committed txns, and, as in
ZooKeeper's SyncRequestProcessor, one that falls due while the last is still being written is
skipped rather than queued behind it (its count starts again)."""

from __future__ import annotations

import logging

import pytest

from tests.engine.helpers import Driver, create, make_engine
from zabby.core.ready import Ready

from zabby.engine import WriteSnapshot
from zabby.opcodes import OpCode
from zabby.tree.acl import OPEN_ACL_UNSAFE
from zabby.tree.txns import Txn, make_zxid


class Committer:
    """Commits the next txns, one Ready each, and returns the snapshots asked for meanwhile."""

    def __init__(self, engine) -> None:  # type: ignore[no-untyped-def]
        self.engine, self.driver, self.counter = engine, Driver(engine), 0

    def __call__(self, count: int) -> list[WriteSnapshot]:
        snapshots = []
        for _ in range(count):
            self.counter += 1
            txn = create(self.counter)  # logged and committed in one Ready, as a quorum of one does
            ready = Ready(soft_state=self.engine.soft, append=[txn], must_sync=True, committed=[txn])
            snapshots += [effect for effect in self.driver.run_work(self.engine._process(ready)) if isinstance(effect, WriteSnapshot)]
        return snapshots


def test_a_snapshot_due_while_the_last_is_being_written_is_skipped_and_its_count_starts_again(caplog: pytest.LogCaptureFixture) -> None:
    engine = make_engine(servers=1, snap_count=4)  # each snapshot due after 3 or 4 txns
    commit = Committer(engine)
    [first] = commit(engine._snapshot_due)
    assert first.zxid == engine.tree.last_zxid

    with caplog.at_level(logging.WARNING, logger="zabby.server"):
        assert commit(engine._snapshot_due) == []  # the first one is still being written
    assert engine.stats.snapshots_skipped == 1
    assert "too busy to snapshot" in caplog.text

    engine.snapshot_written(first.zxid, True, 5.0)
    commit.driver.run()
    # queued, the skipped one would start with the next txn; skipped, its count started again
    assert commit(engine._snapshot_due - 1) == []
    [second] = commit(1)
    assert second.zxid == engine.tree.last_zxid
    assert engine.stats.snapshots_taken == 1 and engine.stats.snapshots_skipped == 1


def test_a_multi_counts_each_of_its_ops_toward_snap_count() -> None:
    """A restart replays the log since the newest snapshot op by op: a multi of thousands of
    creates counted as one txn let 46 MB of log (18,900 txns) pile up below snapCount in the
    adversary's long run, and each restart took 7-10 s to replay it."""
    engine = make_engine(servers=1, snap_count=100)  # each snapshot due after 51 to 100 ops
    ops = tuple((int(OpCode.CREATE), (f"/m{i}", b"v", OPEN_ACL_UNSAFE, 0, i)) for i in range(engine._snapshot_due))
    multi = Txn(make_zxid(1, 1), 0x77, 1, 1001, int(OpCode.MULTI), (ops,))
    ready = Ready(soft_state=engine.soft, append=[multi], must_sync=True, committed=[multi])
    snapshots = [effect for effect in Driver(engine).run_work(engine._process(ready)) if isinstance(effect, WriteSnapshot)]
    assert [snapshot.zxid for snapshot in snapshots] == [multi.zxid]
    assert engine.tree.node_count() >= len(ops)
