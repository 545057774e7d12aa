"""A learner whose newest snapshot holds txns the leader truncates (ZOOKEEPER-1549).

A snapshot installed by SNAP from a leader that never got established can hold that
leader's uncommitted tail; a later leader without that tail sends TRUNC below the snapshot.
Cutting the log cannot take txns out of a snapshot, so the learner must not reload "to the
truncation point" from it: it refuses the TRUNC and gets a SNAP.  The dirty disk is built by
hand here (five servers and an exact crash schedule would be needed to get it by chance).
"""

from __future__ import annotations

from pathlib import Path

from zabby import SyncClient
from zabby.client.fourletter import srvr
from zabby.opcodes import OpCode
from zabby.storage.datadir import DataDir
from zabby.storage.snapshot import list_snapshots
from zabby.testing import Ensemble, wait_until
from zabby.tree.acl import OPEN_ACL_UNSAFE
from zabby.tree.prep import Caller, Preparer
from zabby.tree.txns import Txn, encode_txn

GHOSTS = 5


def _add_uncommitted_tail_and_its_snapshot(data_dir: Path) -> int:
    """Append GHOSTS creates after the log's end and snapshot the tree with them: the disk a
    learner keeps after a SNAP from a leader whose tail was never committed."""
    datadir = DataDir(data_dir)
    tree, log = datadir.recover()
    preparer = Preparer(tree)
    zxid = log.last_zxid
    for index in range(GHOSTS):
        zxid += 1
        args = (f"/ghost{index}", b"never committed", list(OPEN_ACL_UNSAFE), 0, -1)
        txn_type, body = preparer.prepare(OpCode.CREATE, args, Caller(0, []), zxid, 0)
        txn = Txn(zxid, 0, 0, 0, txn_type, body)
        log.append([(zxid, encode_txn(txn))])
        tree.apply(txn)
    log.sync()
    datadir.take_snapshot(tree.records(), zxid)
    datadir.close()
    return zxid


def _tree(hosts: str) -> dict[str, bytes]:
    with SyncClient(hosts, timeout=10.0) as client:
        client.sync("/")
        found = {}
        stack = ["/"]
        while stack:
            path = stack.pop()
            for name in client.get_children(path):
                child = f"{path.rstrip('/')}/{name}"
                found[child] = client.get(child)[0]
                stack.append(child)
        return found


def test_a_trunc_below_a_dirty_snapshot_is_answered_by_a_snap(tmp_path: Path) -> None:
    group = Ensemble(tmp_path, 3, tickTime=100)
    group.start()
    try:
        group.wait_leader()
        with SyncClient(group.hosts, timeout=10.0) as client:
            for index in range(20):
                client.create(f"/before{index}", b"committed")
        wait_until(lambda: len({srvr(s.port)["Zxid"] for s in group.servers.values()}) == 1,
                   10.0, "all three servers at the same zxid")  # fmt: skip
        group.kill_all()
        dirty = group.servers[1]
        ghost_zxid = _add_uncommitted_tail_and_its_snapshot(dirty.data_dir)

        for sid in (2, 3):
            group.servers[sid].launch()
        group.servers[2].wait_serving(30.0)
        with SyncClient(f"{group.servers[2].hosts},{group.servers[3].hosts}", timeout=10.0) as client:
            for index in range(20):
                client.create(f"/after{index}", b"new epoch")
        dirty.start(30.0)
        assert dirty.wait_mode({"follower"}) == "follower"

        expected = _tree(group.servers[2].hosts)
        assert not any(path.startswith("/ghost") for path in expected)
        assert _tree(dirty.hosts) == expected
        newest_zxid, _ = list_snapshots(dirty.data_dir / "version-2")[0]
        assert newest_zxid > ghost_zxid, "the leader's snapshot must supersede the dirty one"

        dirty.kill()  # and what it recovers from its own disk has no ghost either
        dirty.start(30.0)
        assert _tree(dirty.hosts) == expected
    finally:
        group.kill_all()
