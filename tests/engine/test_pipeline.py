"""Pipelined writes: a write that an earlier Ready logged is answered before the fsync of the
writes that came in after it, not after it (each write would otherwise wait for two fsyncs);
with the log's sync in the background, later writes are logged while it runs, and nothing is
answered or acknowledged before the sync covers it."""

from __future__ import annotations

from typing import Any

from tests.engine.helpers import Driver, create, make_engine
from zabby.engine import Append, Engine
from zabby.opcodes import CreateMode, OpCode
from zabby.tree.acl import OPEN_ACL_UNSAFE
from zabby.tree.prep import Caller


def serving_session(engine: Engine, driver: Driver) -> int:
    created: list[int] = []
    engine.create_session(4000, lambda txn, result: created.append(txn.session_id))
    for _ in range(50):
        engine.tick()
        driver.run()
        if created:
            return created[0]
    raise AssertionError("the standalone engine did not serve")


def test_a_logged_write_is_answered_before_the_fsync_of_the_next() -> None:
    engine = make_engine([create(1)], servers=1)
    driver = Driver(engine)
    session = serving_session(engine, driver)
    events: list[str] = []

    def submit(path: str, cxid: int) -> None:
        args = (path, b"v", OPEN_ACL_UNSAFE, int(CreateMode.PERSISTENT), None)
        engine.submit(int(OpCode.CREATE), args, Caller(session, []), cxid, lambda txn, result: events.append(f"answered {path}"))

    submit("/a", 1)
    result: Any = None
    for _ in range(100):
        effect = engine.next_effect(result)
        if effect is None:
            break
        if isinstance(effect, Append) and effect.txns:
            paths = [txn.body[0] for txn in effect.txns]
            events.append(f"fsync {','.join(paths)} starts")
            if paths == ["/a"]:
                submit("/b", 2)  # read by the loop while /a is on its way to disk
            events.append(f"fsync {','.join(paths)} done")
        result = driver.answer(effect)
    assert events == ["fsync /a starts", "fsync /a done", "answered /a", "fsync /b starts", "fsync /b done", "answered /b"]


def test_a_standalone_write_is_logged_and_applied_in_one_ready(monkeypatch: Any) -> None:
    engine = make_engine([create(1)], servers=1)
    driver = Driver(engine)
    session = serving_session(engine, driver)
    readies = []
    take = engine.peer.ready
    monkeypatch.setattr(engine.peer, "ready", lambda: readies.append(take()) or readies[-1])
    answered: list[Any] = []
    args = ("/one", b"v", OPEN_ACL_UNSAFE, int(CreateMode.PERSISTENT), None)
    engine.submit(int(OpCode.CREATE), args, Caller(session, []), 1, lambda txn, result: answered.append(result))
    effects = driver.run()
    assert [e.txns[0].body[0] for e in effects if isinstance(e, Append)] == ["/one"]
    assert [path for path, _stat in answered] == ["/one"]
    [ready] = readies  # a quorum of one: the Ready that logs the write also applies it, after its persist
    assert ready.append == ready.committed


def _serving_in_background() -> tuple[Engine, Driver, int]:
    """A standalone engine serving a session; its driver leaves every Append's sync to the
    background (the test's ``log_synced``) from here on."""
    engine = make_engine([create(1)], servers=1)
    driver = Driver(engine, disk_txns=[create(1)])
    session = serving_session(engine, driver)
    driver.syncs_at_once = False
    return engine, driver, session


def _writer(engine: Engine, session: int, answered: list[str]) -> Any:
    def submit(path: str, cxid: int) -> None:
        args = (path, b"v", OPEN_ACL_UNSAFE, int(CreateMode.PERSISTENT), None)
        engine.submit(int(OpCode.CREATE), args, Caller(session, []), cxid, lambda txn, result: answered.append(path))

    return submit


def test_with_the_sync_in_the_background_writes_are_logged_meanwhile_and_answered_once_durable() -> None:
    engine, driver, session = _serving_in_background()
    answered: list[str] = []
    submit = _writer(engine, session, answered)
    submit("/a", 1)
    [append_a] = [e for e in driver.run() if isinstance(e, Append)]
    submit("/b", 2)  # arrives while /a's sync runs: logged at once, behind it
    [append_b] = [e for e in driver.run() if isinstance(e, Append)]
    assert [t.body[0] for t in append_a.txns + append_b.txns] == ["/a", "/b"] and append_a.sync and append_b.sync
    assert answered == [] and engine.awaiting_sync
    assert engine.applied_once_synced == append_b.txns[-1].zxid and engine.tree.last_zxid < append_a.txns[0].zxid
    engine.log_synced(append_a.txns[-1].zxid)  # the first sync covered /a only
    driver.run()
    assert answered == ["/a"] and engine.tree.get("/b") is None
    engine.log_synced(append_b.txns[-1].zxid)
    driver.run()
    assert answered == ["/a", "/b"] and not engine.awaiting_sync


def test_a_ready_that_changes_more_than_the_log_first_syncs_and_finishes_those_waiting() -> None:
    engine, driver, session = _serving_in_background()
    answered: list[str] = []
    _writer(engine, session, answered)("/a", 1)
    driver.run()
    assert answered == [] and engine.awaiting_sync
    engine.peer._ready.drop_links.append(9)  # the next Ready drops a link: it cannot wait for the sync
    effects = driver.run()
    kinds = [type(e).__name__ for e in effects]
    assert kinds[0] == "Persist" and not effects[0].append and effects[0].sync  # the whole log made durable first
    assert answered == ["/a"] and not engine.awaiting_sync
    assert kinds.index("DropLinks") > 0


def test_a_failed_background_sync_fails_the_work_and_the_engine_repairs() -> None:
    engine, driver, session = _serving_in_background()
    answered: list[str] = []
    _writer(engine, session, answered)("/a", 1)
    driver.run()
    engine.log_synced(0, OSError("injected"))
    driver.run()
    assert answered == [] and engine.stats.repairs == 1 and not engine.awaiting_sync
    assert engine.tree.get("/a") is None  # the reload found the log without it


def test_a_write_of_a_session_prepared_but_not_yet_applied_is_taken() -> None:
    """A leader takes a session's writes from the moment its createSession is prepared, as
    ZooKeeper's session tracker does: a quorum of followers may apply it, and a client answer
    its connect, before the leader's own fsync lets the leader apply it."""
    engine = make_engine([create(1)], servers=1)
    driver = Driver(engine)
    serving_session(engine, driver)  # serving
    opened: list[int] = []
    answered: list[Any] = []
    engine.create_session(4000, lambda txn, result: opened.append(txn.session_id))
    session = engine._proposals[-1].session_id  # prepared, not yet proposed nor applied
    assert session not in engine.tree.sessions
    args = ("/early", b"v", OPEN_ACL_UNSAFE, int(CreateMode.PERSISTENT), None)
    engine.submit(int(OpCode.CREATE), args, Caller(session, []), 1, lambda txn, result: answered.append((txn.type, result)))
    driver.run()
    assert opened == [session]
    assert answered and answered[0][0] == OpCode.CREATE, answered
    assert "/early" in engine.tree.nodes
