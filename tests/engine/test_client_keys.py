"""A client's write is keyed by (session, cxid), values the client chooses: a repeated cxid
must neither drop another write's answer nor leak the outstanding count (issue 42: 1,001
setData with xid 42 leaked it to globalOutstandingLimit and wedged every client)."""

from __future__ import annotations

from tests.engine.helpers import Driver, create, make_engine
from tests.engine.test_pipeline import serving_session
from zabby.engine.clients import Waiters
from zabby.opcodes import CreateMode, OpCode
from zabby.tree.acl import OPEN_ACL_UNSAFE
from zabby.tree.prep import Caller


def test_waiters_answer_a_repeated_key_in_arrival_order() -> None:
    waiters: Waiters[str] = Waiters()
    for value in ("first", "second", "third"):
        waiters.put((7, 42), value)
    waiters.put((7, 43), "other")
    assert len(waiters) == 4
    assert [waiters.pop((7, 42)) for _ in range(4)] == ["first", "second", "third", None]
    assert waiters.pop((7, 43)) == "other" and not waiters and len(waiters) == 0


def test_a_thousand_writes_with_one_cxid_are_each_answered_and_the_count_returns_to_zero() -> None:
    engine = make_engine([create(1)], servers=1)
    driver = Driver(engine)
    session = serving_session(engine, driver)
    answered: list[str] = []
    for i in range(1001):
        args = (f"/key{i}", b"v", OPEN_ACL_UNSAFE, int(CreateMode.PERSISTENT), None)
        engine.submit(int(OpCode.CREATE), args, Caller(session, []), 42, lambda txn, result: answered.append(txn.body[0] if txn.type == OpCode.CREATE else str(txn.body)))
    assert engine.outstanding == 1001
    for _ in range(200):
        engine.tick()
        driver.run()
        if len(answered) == 1001:
            break
    assert answered == [f"/key{i}" for i in range(1001)]  # each its own answer, in order
    assert engine.outstanding == 0 and not engine.waiting


def test_a_txn_of_another_op_with_the_same_key_does_not_answer_a_waiting_write() -> None:
    """The fault harness's seed 46017: a session's (session, cxid) came back in a txn of
    another op (kazoo restarts xids at 1 on each connection; the session's other connection,
    here through another server, sent a delete with the cxid a create waits for here).  The
    delete answered the create's slot, whose answer ``result[0]`` raised on its None and
    crashed the engine.  Each waiter is answered by a txn of its own op only."""
    from zabby.server.clients.session import _write_values

    engine = make_engine([create(1)], servers=1)
    driver = Driver(engine)
    session = serving_session(engine, driver)
    caller = Caller(session, [])
    answers: list[tuple[str, object]] = []

    def answer(op: int, name: str):  # the slot's answer, as zabby.server.clients.session makes it
        def done(txn, result) -> None:  # type: ignore[no-untyped-def]
            answers.append((name, txn.body if txn.type == OpCode.ERROR else _write_values(op, result)))

        return done

    engine.submit(int(OpCode.CREATE), ("/x", b"v", OPEN_ACL_UNSAFE, int(CreateMode.PERSISTENT), None), caller, 1, answer(OpCode.CREATE, "setup"))
    for _ in range(50):
        engine.tick()
        driver.run()
        if answers:
            break
    assert answers == [("setup", ["/x"])]
    # the delete, forwarded by another server for the session's new connection (as _act_on
    # prepares it), then the create of this server's connection, with the same cxid
    engine._prepare(int(OpCode.DELETE), ("/x", -1), caller, 5, forwarded=True)
    engine.submit(int(OpCode.CREATE), ("/y", b"v", OPEN_ACL_UNSAFE, int(CreateMode.PERSISTENT), None), caller, 5, answer(OpCode.CREATE, "create"))
    for _ in range(50):
        engine.tick()
        driver.run()
        if len(answers) == 2:
            break
    assert answers[1:] == [("create", ["/y"])]  # its own txn's answer, not the delete's
    assert "/x" not in engine.tree.nodes and engine.outstanding == 0 and not engine.waiting
