"""A ZooKeeper 3.8 deployment moved onto zabby and back (``harness.differential.migration``): every
read identical on all three servers, sessions re-attached, and damaged directories handled as
ZooKeeper handles them, each compared with ZooKeeper itself started on the same directory.

The long run (20 seeds of 5,000 operations, the figures in docs/operations.md) is
``python scripts/zookeeper_migration.py --seeds 20 --ops 5000``, and ``-m slow`` here.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.differential.migration import (
    damage_an_owner,
    damage_newest_snapshot,
    differences,
    lose_a_log,
    run_seed,
    tear_last_record,
    zabby_view,
    zookeeper_data,
    zookeeper_view,
)  # fmt: skip
from harness.local.zookeeper import ZooKeeperUnavailable, ensure_zookeeper
from zabby.ops.errors import DataError
from zabby.ops.zk_import import import_zookeeper

QUICK_OPS = 300
SEED = 7
LIMITS = f"/zookeeper/quota/migrate-{SEED}/zookeeper_limits"  # a node every snapshot holds, with the workload's quota
LONG_SEEDS, LONG_OPS = range(20), 5000


@pytest.fixture(scope="module")
def zookeeper() -> None:
    try:
        ensure_zookeeper()
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"ZooKeeper 3.8 cannot run here: {exc}")


@pytest.fixture(scope="module")
def zk_data(zookeeper: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One ZooKeeper data dir the workload left, copied for each damage."""
    yield zookeeper_data(tmp_path_factory.mktemp("workload"), seed=SEED, ops=QUICK_OPS)


def copy_of(data_dir: Path, target: Path) -> Path:
    shutil.copytree(data_dir, target)
    return target


def test_a_quick_round_trip_answers_as_zookeeper(zookeeper: None, tmp_path: Path) -> None:
    run = run_seed(tmp_path, seed=1, ops=QUICK_OPS)
    assert run.passed, "\n".join(run.problems)
    assert run.imported is not None and run.imported.txns > 0 and run.imported.digests_matched > 0


@pytest.mark.slow
@pytest.mark.parametrize("seed", LONG_SEEDS)
def test_long_round_trips_answer_as_zookeeper(zookeeper: None, tmp_path: Path, seed: int) -> None:
    run = run_seed(tmp_path, seed, LONG_OPS)
    assert run.passed, "\n".join(run.problems)


def test_a_damaged_newest_snapshot_falls_back_as_zookeeper_does(zk_data: Path, tmp_path: Path) -> None:
    damaged = copy_of(zk_data, tmp_path / "damaged")
    snapshot = damage_newest_snapshot(damaged, LIMITS, b"count=1000,bytes=-1")
    theirs, log = zookeeper_view(damaged, tmp_path / "zookeeper")
    ours, report = zabby_view(damaged, tmp_path / "zabby")
    assert f"problem reading snap file {tmp_path / 'zookeeper' / 'data' / 'version-2' / snapshot.name}\n" in log  # ZooKeeper fell back too
    assert report.snapshot != snapshot and any(str(snapshot) in why and "offset" in why for why in report.skipped)
    assert not differences(theirs, ours)


def test_zookeepers_fallback_keeps_the_damaged_snapshots_ephemerals(zk_data: Path, tmp_path: Path) -> None:
    """ZooKeeper 3.8 tries each snapshot on the same DataTree, and DataTree.deserialize clears
    the nodes but not the ephemerals it indexed: after falling back, a persistent node that the
    damaged snapshot showed as an ephemeral (a damaged ephemeralOwner) is deleted at load as a
    dead session's.  The import falls back to a clean tree: it keeps the node."""
    null = f"/migrate-{SEED}/null"
    damaged = copy_of(zk_data, tmp_path / "damaged")
    damage_an_owner(damaged, null, None)
    theirs, _ = zookeeper_view(damaged, tmp_path / "zookeeper")
    ours, _ = zabby_view(damaged, tmp_path / "zabby")
    whole, _ = zookeeper_view(zk_data, tmp_path / "whole")
    assert null not in theirs.nodes and null in ours.nodes
    assert not differences(whole, ours)


def test_a_torn_tail_is_dropped_as_zookeeper_drops_it(zk_data: Path, tmp_path: Path) -> None:
    torn = copy_of(zk_data, tmp_path / "torn")
    log_file, offset, zxid = tear_last_record(torn)
    theirs, _ = zookeeper_view(torn, tmp_path / "zookeeper")
    ours, report = zabby_view(torn, tmp_path / "zabby")
    assert report.torn == f"{log_file} at offset {offset}: a record without its end marker"
    assert report.last_zxid == zxid - 1  # the torn txn is lost, as on ZooKeeper
    assert not differences(theirs, ours)


def test_a_gap_in_the_logs_is_refused_where_zookeeper_loses_txns(zk_data: Path, tmp_path: Path) -> None:
    holed = copy_of(zk_data, tmp_path / "holed")
    lost = lose_a_log(holed)
    with pytest.raises(DataError, match="a gap in the txn logs") as caught:
        import_zookeeper(holed, tmp_path / "zabby", 1)
    assert "snapshot." in str(caught.value) and "log." in str(caught.value) and "offset" in str(caught.value)
    assert not (tmp_path / "zabby").exists()
    theirs, _ = zookeeper_view(holed, tmp_path / "zookeeper")
    whole, _ = zookeeper_view(zk_data, tmp_path / "whole")
    assert differences(whole, theirs), f"ZooKeeper started without {lost.name} and answered as if nothing were missing"
