"""The engine's answers to inconsistencies and failed effects:

- a leader's SNAP carries the tree exactly at the zxid the SNAP declares, even when the same
  Ready commits more after it (the race that killed learners: their snapshot held a txn they
  were then sent again), and a learner whose SNAP zxid the tree never was at is dropped;
- a learner that receives a snapshot at another zxid than declared, or whose tree digest
  differs from the leader's, repairs itself: stop serving, drop the links, reload from disk,
  a new core that asks for a SNAP;
- a failed disk is the one failure it does not repair (FailStop); a full one is repaired
  without asking for a SNAP.
"""

from __future__ import annotations

import pytest

from tests.engine.helpers import Driver, create, make_engine, tree_of
from zabby.core.messages import Snap, SnapChunk, TreeDigest
from zabby.core.ready import Ready, SoftState
from zabby.core.roles import FollowerRole
from zabby.core.types import ServerState, ZabPhase
from zabby.engine import CloseClients, DropLinks, FailStop, Persist, Reload, Send
from zabby.engine.effects import Pause
from zabby.errors import Inconsistency
from zabby.storage.files import DiskFailure, DiskFull
from zabby.tree.datatree import TreeBuilder
from zabby.tree.txns import make_zxid


def sends(effects: list) -> list[Send]:
    return [e for e in effects if isinstance(e, Send)]


def test_a_snap_carries_the_tree_at_its_declared_zxid_when_the_same_ready_commits_past_it() -> None:
    engine = make_engine([create(1), create(2)])
    driver = Driver(engine)
    ready = Ready(soft_state=engine.soft, committed=[create(3), create(4)], messages=[(2, Snap(zxid=make_zxid(1, 3)))])
    effects = driver.run_work(engine._process(ready))
    assert engine.tree.last_zxid == make_zxid(1, 4)
    [send] = sends(effects)
    assert send.messages == [(2, Snap(zxid=make_zxid(1, 3)))]
    image = send.images[(2, make_zxid(1, 3))]
    assert image[0][:2] == ("tree", make_zxid(1, 3))
    paths = {record[0] for record in image[1:] if isinstance(record[0], str)}
    assert "/n3" in paths and "/n4" not in paths


def test_snaps_at_the_start_and_at_the_end_of_a_ready() -> None:
    engine = make_engine([create(1)])
    snaps = [(2, Snap(zxid=make_zxid(1, 1))), (3, Snap(zxid=make_zxid(1, 3)))]
    [send] = sends(Driver(engine).run_work(engine._process(Ready(soft_state=engine.soft, committed=[create(2), create(3)], messages=snaps))))
    assert send.images[(2, make_zxid(1, 1))][0][1] == make_zxid(1, 1)
    assert send.images[(3, make_zxid(1, 3))][0][1] == make_zxid(1, 3)


def test_a_snap_at_a_zxid_the_tree_never_was_at_drops_that_learner_only() -> None:
    engine = make_engine([create(1)])
    other = TreeDigest(zxid=1, digest=1)
    ready = Ready(soft_state=engine.soft, committed=[create(2)], messages=[(2, Snap(zxid=make_zxid(1, 9))), (3, other)])
    effects = Driver(engine).run_work(engine._process(ready))
    [send] = sends(effects)
    assert send.messages == [(3, other)] and send.images == {}
    assert DropLinks((2,)) in effects
    assert list(engine._inputs) == [(2, 2, None)]  # the core hears of it too: link_down(2)


def learner(txns: list) -> tuple:
    """An engine that takes server 2 for its leader (its core's first Ready already done)."""
    engine = make_engine(txns)
    driver = Driver(engine, disk_txns=txns)
    driver.run()
    engine.soft = SoftState(ServerState.FOLLOWING, ZabPhase.BROADCAST, 2, 1, True)
    return engine, driver


def test_a_snapshot_at_another_zxid_than_declared_is_refused_and_the_learner_asks_for_a_snap(caplog: pytest.LogCaptureFixture) -> None:
    engine, driver = learner([create(1)])
    tree = tree_of([create(1), create(2)])
    builder = TreeBuilder()
    builder.add(tree.records())
    engine._snap_in[2] = (Snap(zxid=make_zxid(1, 1)), builder)
    engine.peer.expects_snapshot = lambda sid, zxid: True  # type: ignore[method-assign]  # as in a SNAP sync
    engine.receive(2, SnapChunk(records=(), last=True))
    effects = driver.run()
    assert Reload("a snapshot stream was refused", snapshot_wanted=True) in effects
    assert engine.peer.snapshot_wanted and engine.tree.last_zxid == make_zxid(1, 1)  # never installed
    assert engine.peer.state == ServerState.LOOKING and not engine.serving
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "the snapshot from server 2 is refused: it declares 0x100000001 but holds a tree at 0x100000002" in line


def test_a_core_restart_drops_the_link_to_a_leader_the_configuration_file_does_not_name() -> None:
    """A leader that a reconfig added (server 7, in no zoo.cfg of this server's): the restart
    drops its link too, or the leader's old stream runs on into the new core's sync (sim seed
    2187 with the soak's options: an INFORM sent before the restart, then a SNAP after it)."""
    engine, driver = learner([create(1)])
    engine.peer.role = FollowerRole(leader=7)
    engine._snap_in[7] = (Snap(zxid=make_zxid(1, 1)), TreeBuilder())
    engine.peer.expects_snapshot = lambda sid, zxid: True  # type: ignore[method-assign]
    engine.receive(7, SnapChunk(records=(("not", "a record"),), last=True))
    effects = driver.run()
    [drop] = [e for e in effects if isinstance(e, DropLinks)]
    assert set(drop.sids) == {2, 3, 7}


def test_a_digest_that_differs_from_the_leaders_is_an_inconsistency() -> None:
    engine, driver = learner([create(1), create(2)])
    good = engine.tree.digest_at(make_zxid(1, 1))
    engine.receive(2, TreeDigest(zxid=make_zxid(1, 1), digest=good))
    assert driver.run_work(engine._feed()) == []  # equal: nothing happens
    engine.receive(2, TreeDigest(zxid=make_zxid(1, 2), digest=engine.tree.digest ^ 1))
    with pytest.raises(Inconsistency, match="the tree digest at 0x100000002 is"):
        driver.run_work(engine._feed())
    assert engine.stats.digest_mismatches == 1


def test_a_digest_from_a_server_that_is_not_our_leader_is_ignored() -> None:
    engine, driver = learner([create(1)])
    engine.receive(3, TreeDigest(zxid=make_zxid(1, 1), digest=12345))
    assert driver.run_work(engine._feed()) == [] and not engine.digests.expected


def test_a_digest_ahead_of_the_tree_waits_until_the_tree_gets_there() -> None:
    engine, driver = learner([])
    ahead = tree_of([create(1), create(2)])
    engine.receive(2, TreeDigest(zxid=make_zxid(1, 2), digest=ahead.digest))
    driver.run_work(engine._feed())
    assert len(engine.digests.expected) == 1
    driver.run_work(engine._process(Ready(soft_state=engine.soft, append=[create(1), create(2)], must_sync=True,
                                          committed=[create(1), create(2)])))  # fmt: skip
    assert not engine.digests.expected and engine.stats.repairs == 0


def test_an_inconsistency_is_repaired_with_one_error_line(caplog: pytest.LogCaptureFixture) -> None:
    engine, driver = learner([create(1)])
    engine.receive(2, TreeDigest(zxid=make_zxid(1, 1), digest=engine.tree.digest ^ 1))
    effects = driver.run()
    assert effects[:3] == [CloseClients(), DropLinks((2, 3)), Reload("restarting the core", snapshot_wanted=True)]
    assert engine.stats.repairs == 1 and engine.peer.snapshot_wanted and not engine.serving
    [line] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert line.getMessage().startswith("Inconsistency: the tree digest at 0x100000001 is")
    assert line.exc_info is None  # one line saying what it saw, no traceback


def test_repair_reloads_from_disk_and_starts_a_new_core() -> None:
    engine, driver = learner([create(1), create(2), create(3)])
    engine.tree = tree_of([])  # an in-memory tree that went wrong
    driver.run_work(engine._repair(Inconsistency("seen")))
    assert engine.tree.last_zxid == make_zxid(1, 3)
    assert engine.peer.snapshot_wanted and engine.peer.state == ServerState.LOOKING


def test_a_second_repair_soon_after_the_first_pauses_first() -> None:
    engine, driver = learner([create(1)])
    driver.run_work(engine._repair(Inconsistency("one")))
    effects = driver.run_work(engine._repair(Inconsistency("two")))
    assert isinstance(effects[0], Pause) and effects[0].until_ms == engine.clock.monotonic_ms() + 1000


def test_a_failed_disk_is_fail_stop() -> None:
    engine = make_engine([create(1)], servers=1)
    driver = Driver(engine)
    driver.fail_next[Persist] = DiskFailure("fsync of the log failed: [Errno 5] Input/output error")
    driver.run()  # standalone: elects itself and persists its epochs
    assert FailStop("fsync of the log failed: [Errno 5] Input/output error") in driver.effects
    assert engine.stats.repairs == 0


def test_a_full_disk_is_repaired_without_asking_for_a_snap() -> None:
    engine = make_engine([create(1)], servers=1)
    driver = Driver(engine, disk_txns=[create(1)])
    driver.fail_next[Persist] = DiskFull("no space")
    driver.run()
    assert Reload("restarting the core", snapshot_wanted=False) in driver.effects
    assert engine.stats.repairs == 1 and engine.serving  # standalone: it leads itself again


def session_after_a_stall(touched_after_stall: bool) -> tuple[object, int, list[bool]]:
    """A standalone engine (tick 200 ms) with a 4 s session touched every tick, then stalled
    for 10 s (no tick, nothing read), then ticked on time; whether the session lives, per tick."""
    engine = make_engine([create(1)], servers=1)
    driver = Driver(engine)
    clock = engine.clock
    created: list = []
    engine.create_session(4000, lambda txn, result: created.append(txn.session_id))
    for _ in range(50):  # elects itself, creates the session, checks expiry on time
        engine.tick()
        driver.run()
        clock.now_ms += engine.core_tick_ms  # type: ignore[attr-defined]
        if created:
            engine.touch(created[0])
    [session] = created
    clock.now_ms += 10_000  # type: ignore[attr-defined]  # the loop stood still (a blocking fsync)
    alive = []
    for tick in range(60):
        engine.tick()
        driver.run()
        alive.append(session in engine.tree.sessions)
        clock.now_ms += engine.core_tick_ms  # type: ignore[attr-defined]
        if touched_after_stall and tick == 0:
            engine.touch(session)  # the client's ping that waited in the socket, read after the stall
    return engine, session, alive


def test_a_session_pinging_through_the_servers_own_stall_lives_on(caplog: pytest.LogCaptureFixture) -> None:
    _engine, _session, alive = session_after_a_stall(touched_after_stall=True)
    assert alive[0] and alive[-1]  # touched once after the stall, then silent: still within its 4 s
    assert any("this server stalled" in record.getMessage() for record in caplog.records)


def test_a_silent_session_still_expires_one_check_after_a_stall() -> None:
    _engine, _session, alive = session_after_a_stall(touched_after_stall=False)
    assert alive[0] and not alive[-1]
    assert alive.index(False) <= 2 * 200 // 50 + 2  # the check after the excused one expires it


def test_a_failure_acting_on_a_ready_that_needs_no_effects_is_repaired(monkeypatch: pytest.MonkeyPatch) -> None:
    engine, driver = learner([create(1)])
    pending = [Ready(soft_state=engine.soft, touched_sessions=[0x77])]  # asks for no effect
    monkeypatch.setattr(engine.peer, "has_ready", lambda: bool(pending))
    monkeypatch.setattr(engine.peer, "ready", pending.pop)

    def touch(session_id: int, now_ms: int) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(engine.sessions, "touch", touch)
    effects = driver.run()  # not raised out of next_effect: the core restarts from disk
    assert Reload("restarting the core", snapshot_wanted=True) in effects
    assert engine.stats.repairs == 1 and not pending
