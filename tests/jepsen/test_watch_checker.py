"""The watch checker on hand-made histories, and ZooKeeper's txn log read from hand-made bytes."""

from __future__ import annotations

import struct
from pathlib import Path

from harness.jepsen.txn_logs import LogKeeper
from harness.jepsen.watch_checker import (
    CHANGED,
    CREATED,
    DELETED,
    HISTORY_LOST,
    Change,
    CommittedHistory,
    check_unzxid_events,
    check_zxid_events,
)
from zabby.opcodes import OpCode
from zabby.tree.txns import Txn, make_zxid

W = "/jepsen"


def z(counter: int, epoch: int = 1) -> int:
    return make_zxid(epoch, counter)


def history() -> CommittedHistory:
    """zxids 1..6 of epoch 1: a create, a set, a multi (create, set, delete of one node and a
    set of another), an error, a close of a session with an ephemeral, a write outside W."""
    h = CommittedHistory()
    h.add_log([
        Txn(z(1), 7, 1, 0, OpCode.CREATE, (f"{W}/a", b"", (), 0, 1)),
        Txn(z(2), 7, 2, 0, OpCode.SET_DATA, (f"{W}/a", b"x", 1)),
        Txn(z(3), 7, 3, 0, OpCode.MULTI, (((OpCode.CREATE, (f"{W}/m", b"", (), 0, 2)), (OpCode.SET_DATA, (f"{W}/m", b"y", 1)),
                                           (OpCode.DELETE, (f"{W}/m",)), (OpCode.SET_DATA, (f"{W}/a", b"z", 2))),)),
        Txn(z(4), 7, 4, 0, OpCode.ERROR, (-101,)),
        Txn(z(5), 8, 0, 0, OpCode.CLOSE_SESSION, ((f"{W}/eph",),)),
        Txn(z(6), 7, 5, 0, OpCode.SET_DATA, ("/elsewhere", b"", 1)),
    ])  # fmt: skip
    return h


def expected() -> list[Change]:
    return history().expected(W, 0, z(6))


def test_expected_events_follow_the_txns() -> None:
    assert [(c.zxid, c.type, c.path) for c in expected()] == [
        (z(1), CREATED, f"{W}/a"), (z(2), CHANGED, f"{W}/a"),
        (z(3), CREATED, f"{W}/m"), (z(3), CHANGED, f"{W}/m"), (z(3), DELETED, f"{W}/m"), (z(3), CHANGED, f"{W}/a"),
        (z(5), DELETED, f"{W}/eph"),
    ]  # fmt: skip
    assert history().expected(W, z(2), z(4)) == [c for c in expected() if c.zxid == z(3)]


def test_the_exact_sequence_passes_even_with_a_txn_s_events_in_another_order() -> None:
    events = expected()
    events[2:6] = reversed(events[2:6])
    verdict = check_zxid_events(events, expected(), 0, z(6))
    assert verdict.ok and verdict.events == 7 and verdict.figures()["missed"] == 0


def test_a_missed_event_is_found() -> None:
    verdict = check_zxid_events([c for c in expected() if c.type != DELETED], expected(), 0, z(6))
    assert (verdict.missed, verdict.duplicated, verdict.reordered, verdict.mismatched) == (2, 0, 0, 0)
    assert not verdict.ok
    assert verdict.examples["missed"] == [f"0x{z(3):x} DELETED {W}/m", f"0x{z(5):x} DELETED {W}/eph"]


def test_a_duplicated_event_is_found() -> None:
    events = expected()
    events.insert(2, events[1])
    verdict = check_zxid_events(events, expected(), 0, z(6))
    assert (verdict.missed, verdict.duplicated, verdict.reordered, verdict.mismatched) == (0, 1, 0, 0)


def test_a_reordered_event_is_found() -> None:
    events = expected()
    events[0], events[1] = events[1], events[0]
    verdict = check_zxid_events(events, expected(), 0, z(6))
    assert (verdict.missed, verdict.duplicated, verdict.reordered, verdict.mismatched) == (0, 0, 1, 0)


def test_an_event_with_a_wrong_zxid_type_or_path_is_a_mismatch() -> None:
    events = expected()
    events[0] = Change(z(2), CREATED, f"{W}/a")  # the create's event under the set's zxid
    events[6] = Change(z(5), CHANGED, f"{W}/eph")  # a delete reported as a change
    events.append(Change(z(6), CHANGED, "/elsewhere"))  # not under the watch
    verdict = check_zxid_events(events, expected(), 0, z(6))
    assert verdict.mismatched == 3 and verdict.missed == 2 and verdict.reordered == 0


def test_events_outside_start_and_end_are_not_judged_and_history_lost_is_counted() -> None:
    events = [Change(z(1), CREATED, f"{W}/a"), Change(z(2), HISTORY_LOST, W), *expected()[1:], Change(z(9), CREATED, f"{W}/late")]
    verdict = check_zxid_events(events[1:], history().expected(W, z(1), z(6)), z(1), z(6))
    assert verdict.history_lost == 1 and verdict.events == 6 and verdict.missed == 0 and verdict.mismatched == 0


def test_an_event_where_no_log_reaches_is_unverifiable() -> None:
    h = CommittedHistory()
    h.add_log([Txn(z(1), 7, 1, 0, OpCode.CREATE, (f"{W}/a", b"", (), 0, 1)), Txn(z(4), 7, 2, 0, OpCode.DELETE, (f"{W}/a",))])
    assert h.holes(z(1), z(4)) == [(z(1), z(4))] and not h.covers(z(2))
    events = [*h.expected(W, 0, z(4))]
    events.insert(1, Change(z(2), CHANGED, f"{W}/a"))
    verdict = check_zxid_events(events, h.expected(W, 0, z(4)), 0, z(4), h.covers)
    assert verdict.ok and verdict.unverifiable == 1
    h.add_log([Txn(z(2), 7, 3, 0, OpCode.SET_DATA, (f"{W}/a", b"", 1)), Txn(z(3), 7, 4, 0, OpCode.SET_DATA, (f"{W}/a", b"", 2))])
    assert h.holes(z(1), z(4)) == [] and h.holes(0, z(9)) == [(0, z(1)), (z(4), z(9))]


def test_a_log_covers_a_move_to_the_next_epoch_unless_a_snapshot_lies_between() -> None:
    log = [Txn(z(5), 7, 1, 0, OpCode.DELETE, (f"{W}/a",)), Txn(z(1, epoch=2), 7, 2, 0, OpCode.DELETE, (f"{W}/b",))]
    plain, synced = CommittedHistory(), CommittedHistory()
    plain.add_log(log)
    synced.add_log(log, snapshot_zxids=[z(6)])
    assert plain.holes(z(5), z(1, epoch=2)) == [] and plain.covers(z(6))
    assert synced.holes(z(5), z(1, epoch=2)) == [(z(5), z(1, epoch=2))] and not synced.covers(z(6))


def test_logs_merge_and_conflicts_are_named() -> None:
    h = history()
    h.add_log([Txn(z(2), 7, 2, 0, OpCode.SET_DATA, (f"{W}/a", b"x", 1)), Txn(z(7), 7, 6, 0, OpCode.DELETE, (f"{W}/a",))])
    h.add_log([Txn(z(6), 7, 5, 0, OpCode.SET_DATA, (f"{W}/other", b"", 1))])
    assert h.conflicts == [z(6)] and h.zxid_of(DELETED, f"{W}/a") == z(7)
    assert h.holes(z(1), z(7)) == []


def test_without_zxids_missed_and_duplicated_are_counted_by_type_and_path() -> None:
    plain = [Change(-1, c.type, c.path) for c in expected()]
    assert check_unzxid_events(plain, expected()).figures()["missed"] == 0
    verdict = check_unzxid_events([*plain[:3], plain[3], *plain[4:6], plain[0]], expected())
    assert (verdict.missed, verdict.duplicated, verdict.checked_zxids) == (1, 1, False)
    assert verdict.examples["missed"] == [f"DELETED {W}/eph"]


# -- ZooKeeper's log ---------------------------------------------------------------------------


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">i", len(raw)) + raw


def _record(zxid: int, txn_type: int, body: bytes) -> bytes:
    entry = struct.pack(">qiqqi", 0x77, 1, zxid, 0, txn_type) + body
    return struct.pack(">qi", 0, len(entry)) + entry + b"B"


def test_zookeeper_log_records_become_txns(tmp_path: Path) -> None:
    create = _string(f"{W}/a") + struct.pack(">i", 1) + b"v" + struct.pack(">i", 0) + b"\x00" + struct.pack(">i", 1)
    set_data = _string(f"{W}/a") + struct.pack(">i", 1) + b"w" + struct.pack(">i", 1)
    delete = _string(f"{W}/a")
    multi = struct.pack(">i", 2) + struct.pack(">i", OpCode.SET_DATA) + struct.pack(">i", len(set_data)) + set_data \
        + struct.pack(">i", OpCode.DELETE) + struct.pack(">i", len(delete)) + delete  # fmt: skip
    close = struct.pack(">i", 1) + _string(f"{W}/eph")
    records = [_record(z(1), OpCode.CREATE, create), _record(z(2), OpCode.MULTI, multi), _record(z(3), OpCode.CLOSE_SESSION, close),
               _record(z(4), OpCode.CREATE_SESSION, struct.pack(">i", 4000))]  # fmt: skip
    h = CommittedHistory()
    h.add_log(_kept(tmp_path, {f"log.{z(1):x}": struct.pack(">4sIq", b"ZKLG", 2, 0) + b"".join(records) + bytes(64)}))
    assert [(c.zxid, c.type, c.path) for c in h.expected(W, 0, z(4))] == [
        (z(1), CREATED, f"{W}/a"), (z(2), CHANGED, f"{W}/a"), (z(2), DELETED, f"{W}/a"), (z(3), DELETED, f"{W}/eph"),
    ]  # fmt: skip
    assert sorted(h.changes) == [z(1), z(2), z(3), z(4)]


def test_a_torn_zookeeper_log_yields_what_came_before(tmp_path: Path) -> None:
    whole = _record(z(1), OpCode.DELETE, _string(f"{W}/a"))
    assert [t.zxid for t in _kept(tmp_path, {"log.1": struct.pack(">4sIq", b"ZKLG", 2, 0) + whole + whole[:-5]})] == [z(1)]
    keeper = LogKeeper({1: tmp_path / "absent"}, tmp_path / "kept-absent")
    keeper.look()
    assert keeper.server_txns(1, "zookeeper") == []


def _kept(data_dir: Path, files: dict[str, bytes]) -> list[Txn]:
    """``files`` written into ``data_dir/version-2``, kept by a LogKeeper, then deleted (as a
    server deletes its log): what the keeper still reads."""
    log_dir = data_dir / "version-2"
    log_dir.mkdir()
    for name, data in files.items():
        (log_dir / name).write_bytes(data)
    keeper = LogKeeper({1: data_dir}, data_dir / "kept")
    keeper.look()
    for name in files:
        (log_dir / name).unlink()
    keeper.look()
    return keeper.server_txns(1, "zookeeper")


def test_a_proposal_past_its_epoch_s_committed_end_is_not_expected() -> None:
    """Server A led epoch 1 to z(3) and started epoch 2; server B logged a proposal z(4) of
    epoch 1 that was never committed, then took a snapshot at z(1, epoch=2) from the leader."""
    leader = [Txn(z(3), 7, 1, 0, OpCode.CREATE, (f"{W}/a", b"", (), 0, 1)), Txn(z(1, epoch=2), 7, 2, 0, OpCode.SET_DATA, (f"{W}/a", b"x", 1)),
              Txn(z(2, epoch=2), 7, 3, 0, OpCode.DELETE, (f"{W}/a",))]  # fmt: skip
    follower = [leader[0], Txn(z(4), 7, 9, 0, OpCode.CREATE, (f"{W}/phantom", b"", (), 0, 2)), leader[2]]
    h = CommittedHistory()
    h.add_log(follower, snapshot_zxids=[z(1, epoch=2)])
    assert h.uncommitted == [] and z(4) in h.changes  # alone, the follower's jump is explained by its snapshot
    h.add_log(leader)
    assert h.uncommitted == [z(4)]
    assert [c.path for c in h.expected(W, 0, z(9, epoch=2))] == [f"{W}/a"] * 3
    verdict = check_zxid_events([*h.expected(W, 0, z(9, epoch=2)), Change(z(4), CREATED, f"{W}/phantom")], h.expected(W, 0, z(9, epoch=2)), 0, z(9, epoch=2))
    assert verdict.mismatched == 1


def test_the_keeper_notes_zookeeper_and_zabby_snapshot_names(tmp_path: Path) -> None:
    snap_dir = tmp_path / "version-2"
    snap_dir.mkdir()
    for name in ("snapshot.100000003", f"snapshot.{z(5):016x}", "snapshot.12.tmp", "log.1"):
        (snap_dir / name).write_bytes(b"")
    keeper = LogKeeper({1: tmp_path}, tmp_path / "kept")
    keeper.look()
    assert sorted(keeper.snapshots[1]) == [z(3), z(5)]
