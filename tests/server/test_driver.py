"""The effect executor, over the server's trio I/O, carries out the engine's effects in the order their contract says: in one
``Persist``, the accepted epoch, the log cut, the append and the fsync come before the current
epoch (a learner's NEWLEADER and the DIFF before it are often one Ready; ZOOKEEPER-4643)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import msgpack
import trio

from tests.storage.helpers import TxnMaker, tree_of
from zabby import config as zoo_config
from zabby.engine import Append, Install, Persist, StageSnapshot
from zabby.server.process.forks import SNAP_CHUNK_RECORDS
from zabby.engine.storage import Storage
from zabby.server.node import ZabbyServer
from zabby.storage.epochs import read_epoch
from zabby.storage.snapshot import list_snapshots
from zabby.tree.acl import OPEN_ACL_UNSAFE
from zabby.tree.datatree import DataTree, TreeBuilder
from zabby.tree.txns import Txn, make_zxid


def make_server(tmp_path: Path, *, standalone: bool = False) -> ZabbyServer:
    data = tmp_path / "data"
    data.mkdir()
    (data / "myid").write_text("1\n")
    ensemble = {} if standalone else {"server.1": "127.0.0.1:1:2", "server.2": "127.0.0.1:3:4", "server.3": "127.0.0.1:5:6"}
    config = zoo_config.from_dict({"dataDir": str(data), "clientPort": "0", "tickTime": "200", **ensemble})
    storage = Storage(config)
    return ZabbyServer(config, storage, storage.recover(config.membership))


def create_txn(counter: int) -> Txn:
    """A create of ``/n<counter>`` at zxid (1, counter)."""
    return Txn(make_zxid(1, counter), 0x77, counter, 0, 1, (f"/n{counter}", b"", OPEN_ACL_UNSAFE, 0, 1))


def logging_persist(txns: list[Txn]) -> Persist:
    """A Persist that appends ``txns`` and syncs them, nothing else."""
    return Persist(accepted_epoch=None, current_epoch=None, truncate_to=None, append=txns, sync=True)


def test_persist_writes_the_current_epoch_after_the_log_is_synced(tmp_path: Path) -> None:
    server = make_server(tmp_path)
    calls: list[str] = []
    real_run = server.io.disk.run

    async def recording_run(fn: Any, *args: Any) -> Any:
        calls.append(getattr(fn, "__name__", repr(fn)))
        return await real_run(fn, *args)

    server.io.disk.run = recording_run  # type: ignore[method-assign]
    real_sync = server.log.sync

    def recording_sync() -> None:  # inline when the server is idle, else through disk.run
        if not calls or calls[-1] != "sync":
            calls.append("sync")
        real_sync()

    server.log.sync = recording_sync  # type: ignore[method-assign]
    txn = Txn(make_zxid(2, 1), 0x77, 1, 0, 1, ("/a", b"", OPEN_ACL_UNSAFE, 0, 1))
    effect = Persist(accepted_epoch=2, current_epoch=2, truncate_to=0, append=[txn], sync=True)
    trio.run(server.executor._persist, effect)
    assert calls == ["write_accepted_epoch", "truncate_after", "sync", "write_current_epoch"]
    assert read_epoch(server.datadir.current_epoch_path) == 2
    assert server.log.last_zxid == make_zxid(2, 1)


def test_a_snap_is_installed_with_the_digest_its_child_computed_from_the_staged_bytes(tmp_path: Path) -> None:
    """The shell feeds each staged chunk's bytes to a digest child and answers Install with
    its digest: the leader's, for the tree the engine built without one."""
    server = make_server(tmp_path)
    leader_tree = tree_of(TxnMaker().some(2500))
    records, zxid = tuple(leader_tree.records()), leader_tree.last_zxid
    server.executor._stage(StageSnapshot(2, zxid, (), start=True))
    for start in range(0, len(records), SNAP_CHUNK_RECORDS):
        chunk = records[start : start + SNAP_CHUNK_RECORDS]
        encoded = b"".join(msgpack.packb(record, use_bin_type=True) for record in chunk)
        server.executor._stage(StageSnapshot(2, zxid, chunk, start=False, encoded=encoded))
    builder = TreeBuilder(digest=False)
    builder.add(records)
    digest = trio.run(server.executor._install, Install(builder.finish(), zxid, 2))
    assert digest == leader_tree.digest
    assert list_snapshots(server.datadir.snap_dir)[0][0] == zxid
    server.close()


def test_a_snap_staged_without_its_bytes_leaves_the_digest_to_the_engine(tmp_path: Path) -> None:
    server = make_server(tmp_path)
    leader_tree = tree_of(TxnMaker().some(100))
    records, zxid = tuple(leader_tree.records()), leader_tree.last_zxid
    server.executor._stage(StageSnapshot(2, zxid, (), start=True))
    server.executor._stage(StageSnapshot(2, zxid, records, start=False))  # packed again: no bytes to pass on
    assert trio.run(server.executor._install, Install(DataTree.from_records(records), zxid, 2)) is None
    server.close()


class _QuietEngine:
    """An engine with nothing to do, receiving a SNAP or not."""

    receiving_snapshot = False
    throttled = False
    inputs_queued = 0

    def next_effect(self, result: Any = None, error: BaseException | None = None) -> None:
        return None

    def begin_turn(self) -> None:
        pass

    def has_work(self) -> bool:
        return False


def test_the_cyclic_collector_is_off_while_a_snap_arrives_and_back_on_after(tmp_path: Path) -> None:
    server = make_server(tmp_path)
    engine = server.engine = server.executor.engine = _QuietEngine()  # type: ignore[assignment]
    try:
        engine.receiving_snapshot = True
        server.run_effects()
        assert not gc.isenabled()
        server.run_effects()
        assert not gc.isenabled()
        engine.receiving_snapshot = False  # installed, broken or abandoned: no SNAP coming
        server.run_effects()
        assert gc.isenabled()
    finally:
        gc.enable()
        server.close()


def test_the_loop_fsyncs_inline_only_for_a_single_write_waiting_alone(tmp_path: Path) -> None:
    """An fsync on the loop blocks it: worth it for one write with nothing else to do, not
    for a batch of the ensemble's writes, however few of them this server's clients sent
    (a leader logs the writes its followers forwarded: ~1 ms blocked per batch under load)."""
    server = make_server(tmp_path)
    try:
        assert server.engine.outstanding == 0
        assert server.executor._fsync_inline(1) and server.executor._fsync_inline(0)
        assert not server.executor._fsync_inline(3)  # forwarded writes: none of them this server's
        server.engine.outstanding = 2
        assert not server.executor._fsync_inline(1)
        server.engine.outstanding = 1
        server.executor._fsync_recent_s = 0.05  # a slow disk: never on the loop
        assert not server.executor._fsync_inline(1)
        # a Persist (a role change's, a SNAP's) is carried out at once only when it syncs nothing
        assert server.executor._persists_now(logging_persist([create_txn(1)])) is False
        assert server.executor._persists_now(Persist(None, None, None, [create_txn(1)], False))
    finally:
        server.close()


def test_a_single_write_alone_is_synced_inline_and_answered_durable(tmp_path: Path) -> None:
    """The engine's one path, the driver's choice: an Append synced right here says so (the
    engine finishes its Ready at once); a batch is left to the background sync."""
    server = make_server(tmp_path)
    try:
        assert server.executor._append_in_background(Append([create_txn(1)], True)) == (False, True)
        assert server.log.last_zxid == create_txn(1).zxid
    finally:
        server.close()


def test_a_standalone_server_awaits_the_sync_of_a_batch(tmp_path: Path) -> None:
    """It commits only on its own fsync: a batch's Append waits for its sync off the loop and
    is answered durable, and the writes read meanwhile make the next batch."""
    server = make_server(tmp_path, standalone=True)
    try:
        assert not server.config.peers
        assert server.executor._appends_now(Append([create_txn(1)], True))  # one write alone: inline
        assert server.executor._appends_now(Append([create_txn(1), create_txn(2)], False))  # nothing to sync
        assert not server.executor._appends_now(Append([create_txn(1), create_txn(2)], True))
        assert trio.run(server.executor._append_and_sync, Append([create_txn(1), create_txn(2)], True)) == (False, True)
        assert server.log.last_zxid == create_txn(2).zxid
    finally:
        server.close()
