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
