"""A new 3-server ensemble seeded by ``zabby-admin snapshot restore`` comes up at the
snapshot's state (every znode and Stat, the digest at the snapshot's zxid) in a new epoch."""

from __future__ import annotations

from pathlib import Path

from harness.local.admin import admin_settings, digest_at
from tests.ops.helpers import admin, read_tree, tree_nodes
from tests.storage.helpers import TxnMaker, tree_of
from zabby import SyncClient
from zabby.storage.epochs import read_epoch
from zabby.storage.snapshot import write_snapshot
from zabby.testing import Ensemble
from zabby.tree.txns import zxid_epoch

EPOCH = 4


def test_a_restored_ensemble_serves_the_snapshot_in_a_new_epoch(tmp_path: Path) -> None:
    tree = tree_of(TxnMaker(epoch=EPOCH).some(5000))
    snapshot = write_snapshot(tmp_path, tree.last_zxid, tree.records())
    ensemble = Ensemble(tmp_path / "ensemble", 3, tickTime=200, **admin_settings())
    for sid, server in ensemble.servers.items():
        code, _, err = admin("snapshot", "restore", str(snapshot), "--data-dir", str(server.data_dir), "--myid", str(sid))
        assert code == 0, err
    try:
        ensemble.start()
        ensemble.wait_leader()
        for server in ensemble.servers.values():
            assert digest_at(server.admin_port, tree.last_zxid) == tree.digest
        with SyncClient(ensemble.hosts, timeout=10.0) as client:
            assert read_tree(client) == tree_nodes(tree)
            _, stat = client.create("/after-restore", b"x", include_data=True)
        assert zxid_epoch(stat.czxid) == EPOCH + 1
        for server in ensemble.servers.values():
            assert read_epoch(server.data_dir / "version-2" / "currentEpoch") == EPOCH + 1
    finally:
        ensemble.kill_all()
