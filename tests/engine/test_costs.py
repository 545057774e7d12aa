"""What client calls may make the engine hold (issue 56): waits for a zxid."""

from __future__ import annotations

from zabby.engine.clients import ZxidWaiters


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
