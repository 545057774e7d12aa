"""Pipelined writes: a write that an earlier Ready logged is answered before the fsync of the
writes that came in after it, not after it (each write would otherwise wait for two fsyncs)."""

from __future__ import annotations

from typing import Any

from tests.engine.helpers import Driver, create, make_engine
from zabby.engine import Engine, Persist
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
        if isinstance(effect, Persist) and effect.append:
            paths = [txn.body[0] for txn in effect.append]
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
    assert [e.append[0].body[0] for e in effects if isinstance(e, Persist)] == ["/one"]
    assert [path for path, _stat in answered] == ["/one"]
    [ready] = readies  # a quorum of one: the Ready that logs the write also applies it, after its persist
    assert ready.append == ready.committed
