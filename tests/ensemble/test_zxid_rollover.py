"""3-server ensembles of real processes whose epochs run out of zxid counters: each leader
steps down after the last counter of its epoch, an election starts the next epoch, and no
acknowledged write is lost.

Two ways to reach the end of an epoch without 4 billion writes:

- ``test_epochs_roll_over_without_losing_an_acknowledged_write``: the limit is lowered
  (``zxidCounterLast``, from ZooKeeper's 0xfffffffe) and the ensemble rolls over many times.
- ``test_a_log_near_the_real_limit_rolls_over_once``: the real limit, with data directories
  prepared so that the first election's epoch is already the epoch of their log, ending 14
  counters before 0xfffffffe.  Every election starts a NEW epoch at counter 1 (max
  acceptedEpoch + 1), so a log near the limit in an epoch the epoch files already name does
  not get there: the leader would start the next epoch afresh.  Here the epoch files say 1
  and the log is in epoch 2 (a state Zab never writes, and ZooKeeper refuses to load: its
  currentEpoch is behind its last zxid; zabby loads it as it is), so the first election
  picks epoch 2 and its leader goes on from the log's last counter.
"""

from __future__ import annotations

import time
from pathlib import Path

from zabby import SyncClient
from zabby.client.fourletter import srvr_zxid
from zabby.errors import ConnectionLoss, NodeExistsError
from zabby.opcodes import OpCode
from zabby.storage import ACCEPTED_EPOCH, CURRENT_EPOCH, TxnLog, read_epoch, write_epoch, write_snapshot
from zabby.storage.datadir import VERSION_DIR
from zabby.storage.txnlog import list_segments, read_segment
from zabby.testing import Ensemble, wait_until
from zabby.tree.acl import OPEN_ACL_UNSAFE
from zabby.tree.datatree import DataTree
from zabby.tree.txns import ZXID_COUNTER_LAST, Txn, encode_txn, follows, make_zxid, zxid_counter, zxid_epoch, zxid_hex

COUNTER_LAST = 40
WRITES = 200


def last_zxid(ensemble: Ensemble, sid: int) -> int | None:
    """The server's last zxid, None while it does not serve (an election after a step-down)."""
    return srvr_zxid(ensemble.servers[sid].port)


def serving_zxids(ensemble: Ensemble) -> dict[int, int]:
    """Every server's last zxid, once all of them serve."""
    zxids: dict[int, int | None] = {}

    def all_serving() -> bool:
        zxids.update({sid: last_zxid(ensemble, sid) for sid in ensemble.servers})
        return all(zxid is not None for zxid in zxids.values())

    wait_until(all_serving, 30.0, "every server serving")
    return {sid: zxid for sid, zxid in zxids.items() if zxid is not None}


def test_epochs_roll_over_without_losing_an_acknowledged_write(tmp_path: Path) -> None:
    ensemble = Ensemble(tmp_path, 3, tickTime=200, zxidCounterLast=COUNTER_LAST)
    ensemble.start()
    try:
        first_epoch = zxid_epoch(serving_zxids(ensemble)[1])
        client = SyncClient(ensemble.hosts, timeout=6.0)
        client.start(timeout=20)
        acknowledged = []
        for index in range(WRITES):
            path = f"/w{index}"
            try:
                client.retry(client.create, path, b"x")
            except NodeExistsError:  # a retried create that had landed before the step-down
                pass
            acknowledged.append(path)
        client.stop()
        zxids = serving_zxids(ensemble)
        assert all(zxid_counter(zxid) <= COUNTER_LAST for zxid in zxids.values()), zxids
        assert min(zxid_epoch(zxid) for zxid in zxids.values()) >= first_epoch + WRITES // COUNTER_LAST, zxids
        for sid, server in ensemble.servers.items():
            reader = SyncClient(server.hosts, timeout=6.0)
            reader.start(timeout=20)
            try:
                reader.sync("/")
                wait_until(lambda: len(reader.get_children("/")) >= WRITES + 1, 20.0, f"server {sid} has every write")  # noqa: B023
                missing = [path for path in acknowledged if reader.exists(path) is None]
                assert not missing, f"server {sid} lost {missing}"
            finally:
                reader.stop()
        assert all(server.running() for server in ensemble.servers.values())
    finally:
        ensemble.kill_all()


# --- the real limit, from a log near it -------------------------------------------------------

PREPARED_EPOCH = 2  # the epoch of the prepared log; the epoch files say one less (see the module's docstring)
SNAPSHOT_ZXID = make_zxid(PREPARED_EPOCH, ZXID_COUNTER_LAST - 30)
LOG_LAST_ZXID = make_zxid(PREPARED_EPOCH, ZXID_COUNTER_LAST - 14)  # 0x2fffffff0: 14 counters left
NEAR_LIMIT_WRITES = 60  # more than the counters left (each session's create and close takes one too)
WRITE_ATTEMPTS = 100  # per write: ConnectionLoss while the ensemble elects, then retried
WRITES_WAIT_S = 30.0  # all the writes, retries included


def prepared_history() -> tuple[list[Txn], list[Txn]]:
    """The same history for every server: ``(in the snapshot, in the log after it)``.  A few
    creates early in the epoch, the snapshot's last one at ``SNAPSHOT_ZXID`` (the counters in
    between stand for the 4 billion txns the snapshot took in), then a contiguous log to
    ``LOG_LAST_ZXID``."""
    zxids = [make_zxid(PREPARED_EPOCH, counter) for counter in (1, 2, 3)] + [SNAPSHOT_ZXID]
    zxids += range(SNAPSHOT_ZXID + 1, LOG_LAST_ZXID + 1)
    txns = [Txn(zxid, 0, index, 1_700_000_000_000 + index, OpCode.CREATE, (f"/h{index}", b"h", OPEN_ACL_UNSAFE, 0, index + 1))
            for index, zxid in enumerate(zxids)]  # fmt: skip
    return txns[:4], txns[4:]


def prepare_data_dir(data_dir: Path) -> None:
    """``prepared_history`` in ``data_dir`` (myid is there already): snapshot, log, epoch files."""
    in_snapshot, in_log = prepared_history()
    tree = DataTree()
    for txn in in_snapshot:
        tree.apply(txn)
    version_dir = data_dir / VERSION_DIR
    version_dir.mkdir(parents=True, exist_ok=True)
    write_snapshot(version_dir, SNAPSHOT_ZXID, tree.records())
    log = TxnLog(version_dir)
    log.open()
    try:
        log.append([(txn.zxid, encode_txn(txn)) for txn in in_log])
        log.sync()
    finally:
        log.close()
    write_epoch(version_dir / ACCEPTED_EPOCH, PREPARED_EPOCH - 1)
    write_epoch(version_dir / CURRENT_EPOCH, PREPARED_EPOCH - 1)


def logged_zxids(data_dir: Path) -> list[int]:
    """Every zxid in the server's txn log, oldest first, read without changing anything."""
    zxids: list[int] = []
    for _first, path in list_segments(data_dir / VERSION_DIR):
        zxids += [zxid for zxid, _payload, _end in read_segment(path, zxids[-1] if zxids else 0)]
    return zxids


def write_acknowledged(client: SyncClient, path: str, data: bytes, seen: list[str], deadline: float) -> None:
    """Create ``path`` until acknowledged, retrying on ConnectionLoss only (noted in ``seen``),
    at most ``WRITE_ATTEMPTS`` times and until ``deadline`` (monotonic); NodeExists after a
    ConnectionLoss is the lost attempt having landed (checked by its data)."""
    lost, attempts = False, 0
    while attempts < WRITE_ATTEMPTS and time.monotonic() < deadline:
        attempts += 1
        try:
            client.create(path, data)
            return
        except ConnectionLoss as error:
            seen.append(f"{path}: {error!r}")
            lost = True
            time.sleep(0.05)
        except NodeExistsError:
            assert lost, f"{path} existed before any attempt was lost"
            assert client.get(path)[0] == data, f"{path} holds another write's data"
            return
    raise AssertionError(f"{path} not acknowledged ({attempts} attempts): {seen[-3:]}")


def test_a_log_near_the_real_limit_rolls_over_once(tmp_path: Path) -> None:
    ensemble = Ensemble(tmp_path, 3, tickTime=200)  # ZooKeeper's limit: no zxidCounterLast
    for server in ensemble.servers.values():
        prepare_data_dir(server.data_dir)
    ensemble.start()
    try:
        assert set(serving_zxids(ensemble).values()) == {LOG_LAST_ZXID}
        client = SyncClient(ensemble.hosts, timeout=6.0)
        client.start(timeout=20)
        acknowledged: dict[str, bytes] = {}
        connection_losses: list[str] = []
        deadline = time.monotonic() + WRITES_WAIT_S
        try:
            for index in range(NEAR_LIMIT_WRITES):
                path, data = f"/w{index}", f"write {index}".encode()
                write_acknowledged(client, path, data, connection_losses, deadline)  # any other error fails the test
                acknowledged[path] = data
        finally:
            client.stop()
        zxids = serving_zxids(ensemble)
        assert all(zxid_epoch(zxid) > PREPARED_EPOCH for zxid in zxids.values()), {sid: zxid_hex(z) for sid, z in zxids.items()}
        for sid, server in ensemble.servers.items():
            reader = SyncClient(server.hosts, timeout=6.0)
            reader.start(timeout=20)
            try:
                reader.sync("/")
                wrong = {path: data for path, data in acknowledged.items() if reader.exists(path) is None or reader.get(path)[0] != data}
                assert not wrong, f"server {sid} lost or changed {sorted(wrong)}"
            finally:
                reader.stop()
        assert all(server.running() for server in ensemble.servers.values())
    finally:
        ensemble.stop_all()
    last_counter_logged = False
    for sid, server in ensemble.servers.items():
        logged = logged_zxids(server.data_dir)
        assert logged, f"server {sid} has no log"
        past = [zxid_hex(zxid) for zxid in logged if not 1 <= zxid_counter(zxid) <= ZXID_COUNTER_LAST]
        assert not past, f"server {sid} logged counters outside 1..0x{ZXID_COUNTER_LAST:x}: {past}"
        jumps = [(zxid_hex(a), zxid_hex(b)) for a, b in zip(logged, logged[1:], strict=False) if not follows(a, b)]
        assert not jumps, f"server {sid}: zxids that do not follow (a gap, or an epoch no election started): {jumps}"
        epochs = sorted({zxid_epoch(zxid) for zxid in logged})
        accepted = read_epoch(server.data_dir / VERSION_DIR / ACCEPTED_EPOCH)
        assert epochs[0] == PREPARED_EPOCH and len(epochs) >= 2 and epochs[-1] <= accepted, (sid, epochs, accepted)
        last_counter_logged |= make_zxid(PREPARED_EPOCH, ZXID_COUNTER_LAST) in logged
    assert last_counter_logged, f"no server logged 0x{make_zxid(PREPARED_EPOCH, ZXID_COUNTER_LAST):x}: the epoch was never used up"
