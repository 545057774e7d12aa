"""zkCli.sh 3.8 runs every command of its help (harness/differential/zkcli.py) against ZooKeeper
3.8 and against zabby with the same output, times, ids and ports aside: addWatch included
(it broke ZooKeeper's Java client before zabby answered its ErrorResponse)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from harness.differential import zkcli
from harness.differential.servers import running_pair
from harness.local.zookeeper import ZooKeeperUnavailable, ensure_zookeeper


def test_zkcli_prints_the_same_on_both(tmp_path: Path) -> None:
    try:
        ensure_zookeeper()
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"ZooKeeper 3.8 cannot run here: {exc}")
    with running_pair(tmp_path) as (reference, zabby):
        theirs, ours = zkcli.run(reference.hosts), zkcli.run(zabby.hosts)
    assert len(theirs) > 100 and any("NodeCreated" in line or "Node already exists" in line for line in theirs)
    assert theirs == ours, "\n".join(difflib.unified_diff(theirs, ours, "zookeeper", "zabby", lineterm="", n=1))


def test_whoami_ids_are_compared_as_a_set() -> None:
    lines = ["Auth scheme: User", "ip: 127.0.0.1", "digest: bob", "[zk] 2"]
    assert zkcli._sorted_sets(lines) == ["Auth scheme: User", "digest: bob", "ip: 127.0.0.1", "[zk] 2"]


def test_removal_events_of_one_removewatches_are_compared_sorted() -> None:
    persistent = "WatchedEvent state:SyncConnected type:PersistentWatchRemoved path:/w"
    child = "WatchedEvent state:SyncConnected type:ChildWatchRemoved path:/w"
    created = "WatchedEvent state:SyncConnected type:NodeCreated path:/w"
    assert zkcli._removals_sorted([created, persistent, child, created]) == [created, child, persistent, created]
    assert zkcli._removals_sorted([child, created, persistent]) == [child, created, persistent]
