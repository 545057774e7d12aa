"""What client calls may make the engine hold and do (issue 56): waits for a zxid, the ops a
turn of the driver applies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.core.scenario import ACL, Scenario
from zabby.engine.clients import ZxidWaiters
from zabby.opcodes import CreateMode, OpCode
from zabby.tree.txns import Txn


def test_answered_waits_for_a_zxid_do_not_pile_up_behind_a_pending_one() -> None:
    """Answered waitForZxid waits stayed in the heap while any other wait was pending: 82 MB
    for 358,500 waits, with mntr reporting no client memory."""
    waiters = ZxidWaiters()
    answers: list[bool] = []
    waiters.put(10**12, 10**9, "patient", answers.append)  # a far zxid, a far deadline: pending throughout
    for round_ in range(30):
        for n in range(1_000):
            waiters.put(10**12, round_, ("client", n % 7), answers.append)
        waiters.expire(round_)
        assert waiters.held() <= 2 * (2 * len(waiters) + 32) + 2
    assert answers == [False] * 30_000 and len(waiters) == 1
    waiters.put(5, 10**9, "near", answers.append)
    waiters.applied(5)
    assert answers[-1] is True and len(waiters) == 1
    waiters.drop("patient")
    assert not waiters and waiters.held() <= 64


def _leader_with_a_znode() -> tuple[Scenario, int, int]:
    """3 servers whose engines apply at most 10 ops a turn; the leader, a session on it, /m."""
    c = Scenario(voters=3, turn_ops_max=10)
    leader = c.run_until(c.serving_leader).sid
    c.run_until(c.all_serving)
    session = c.open_session(leader, 60_000)
    made = c.call(leader, session, OpCode.CREATE, "/m", b"", ACL, int(CreateMode.PERSISTENT), None)
    c.run_until(lambda: made)
    return c, leader, session


def _ops_per_turn(c: Scenario) -> dict[int, list[int]]:
    """From now on, the ops each server's engine applies in each turn of its driver, in order."""
    turns: dict[int, list[int]] = {}
    for sid, node in c.cluster.nodes.items():
        engine, own = node.engine, turns.setdefault(sid, [0])

        def begin_turn(begin: Callable[[], None] = engine.begin_turn, own: list[int] = own) -> None:
            own.append(0)
            begin()

        def on_applied(txn: Txn, result: Any, checked: Callable[[Txn, Any], None] | None = engine.on_applied, own: list[int] = own) -> None:
            own[-1] += len(txn.body[0]) if txn.type == OpCode.MULTI else 1
            if checked is not None:
                checked(txn, result)

        engine.begin_turn, engine.on_applied = begin_turn, on_applied  # type: ignore[method-assign]
    return turns


def _multis(c: Scenario, leader: int, session: int, count: int, ops: int) -> None:
    answers = [c.call(leader, session, OpCode.MULTI, [[int(OpCode.SET_DATA), "/m", b"v", -1]] * ops) for _ in range(count)]
    c.run_until(lambda: all(answers) and c.converged())
    assert all(answer[0][0].type == OpCode.MULTI for answer in answers)


def test_no_turn_applies_more_than_its_ops_however_many_multis_one_ack_commits() -> None:
    """A follower's ACK commits every proposal it covers at once: on a leader of 3 servers
    flooded with multis, one Ready committed 5 to 7 multis of 1,500-3,738 setData and they were
    applied in one go (up to 0.55 s, 18,690 ops against a turn of 2,000).  A turn now applies
    what it has room for, a txn whole, on every server; the rest in the next turns."""
    c, leader, session = _leader_with_a_znode()
    turns = _ops_per_turn(c)
    _multis(c, leader, session, count=20, ops=4)
    applied = [ops for server in turns.values() for ops in server]
    assert sum(applied) == 3 * 20 * 4 and max(applied) <= 10, turns


def test_a_turn_after_a_txn_larger_than_a_turn_applies_nothing() -> None:
    """A txn is applied whole, so a turn may apply more than ``turn_ops_max`` (a multi of 5,000
    ops); the next one then applies nothing, so a client whose request came in meanwhile waits
    for one such txn, not for two (a leader's bystander waited 370 ms for two 4,216-op multis)."""
    c, leader, session = _leader_with_a_znode()
    turns = _ops_per_turn(c)
    _multis(c, leader, session, count=6, ops=15)
    for sid, server in turns.items():
        assert sum(server) == 6 * 15, (sid, server)
        assert all(ops in (0, 15) for ops in server), (sid, server)
        assert all(not (first and second) for first, second in zip(server, server[1:])), (sid, server)


def test_a_leader_expires_at_most_a_checks_worth_of_sessions_at_once_and_the_rest_soon_after() -> None:
    """20,000 sessions a client opened and dropped together all expired in one check: that
    many closeSessions prepared and logged at once stalled every client for 0.3-0.6 s."""
    from zabby.engine.engine import EXPIRIES_PER_CHECK_MAX

    c = Scenario(voters=1)
    leader = c.run_until(c.serving_leader)
    created: list[Txn] = []
    sessions = 2 * EXPIRIES_PER_CHECK_MAX + 50
    for _ in range(sessions):
        leader.engine.create_session(4_000, lambda txn, result: created.append(txn))
    c.cluster.drain(leader)
    c.run_until(lambda: len(created) == sessions)
    counts = [len(leader.tree.sessions)]
    c.run_until(lambda: counts.append(len(leader.tree.sessions)) or counts[-1] == 0, ticks_max=4_000)
    drops = [before - after for before, after in zip(counts, counts[1:]) if before > after]
    assert counts[0] == sessions and max(drops) <= EXPIRIES_PER_CHECK_MAX
    assert len(drops) >= 3  # the backlog went in consecutive checks, not one
