"""The simulator's own parts behave like the real thing they stand for (TCP links, a disk
with an fsync), and its checkers bite."""

from __future__ import annotations

import random

import pytest

from zabby.opcodes import OpCode
from zabby.sim.checkers import Checker, Violation
from zabby.sim.network import Network
from zabby.sim.options import SimOptions, swarm
from zabby.tree.txns import Txn, make_zxid


def txn(counter: int, epoch: int = 1) -> Txn:
    return Txn(make_zxid(epoch, counter), 0, counter, 0, 1, ())


def drain(network: Network, now: int) -> list[tuple[str, int, int, object]]:
    out = []
    while (event := network.pop_due(now)) is not None:
        out.append((event.kind, event.src, event.dst, event.message))
    return out


# --------------------------------------------------------------------- network
def test_links_are_fifo_whatever_the_delays() -> None:
    network = Network(random.Random(1), SimOptions(seed=1, delay_ticks_min=1, delay_ticks_max=9))
    for i in range(50):
        network.send(0, 1, 2, i)
    assert [m for _, _, _, m in drain(network, 100)] == list(range(50))


def test_a_break_loses_in_flight_and_tells_both_ends() -> None:
    network = Network(random.Random(1), SimOptions(seed=1, delay_ticks_min=5, delay_ticks_max=5))
    network.send(0, 1, 2, "lost")
    network.partition(1, {(1, 2), (2, 1)})
    events = drain(network, 10)
    assert sorted((kind, src, dst) for kind, src, dst, _ in events) == [("down", 1, 2), ("down", 2, 1)]
    network.heal()
    network.send(11, 2, 1, "new connection")
    assert drain(network, 20) == [("msg", 2, 1, "new connection")]


def test_one_way_partition_still_breaks_the_connection_on_send() -> None:
    network = Network(random.Random(1), SimOptions(seed=1))
    network.partition(0, {(1, 2)})
    network.send(1, 2, 1, "gets through")
    assert drain(network, 10) == [("msg", 2, 1, "gets through")]
    network.send(11, 1, 2, "blocked")
    assert sorted(kind for kind, *_ in drain(network, 20)) == ["down", "down"]


def test_a_close_tells_only_the_other_end_and_may_flush() -> None:
    delivered = set()
    for seed in range(20):
        network = Network(random.Random(seed), SimOptions(seed=seed, delay_ticks_min=3, delay_ticks_max=3))
        network.send(0, 1, 2, "before close")
        network.close(0, 1, 2)
        events = drain(network, 10)
        assert events[-1][:3] == ("down", 2, 1) and all(e[1] != 1 or e[0] == "msg" for e in events[:-1])
        delivered.add(len(events))
    assert delivered == {1, 2}  # reset (lost) and graceful (flushed) closes both happen


def test_swarm_is_a_function_of_the_seed() -> None:
    assert swarm(random.Random(5), 5) == swarm(random.Random(5), 5)
    sizes = {swarm(random.Random(s), s).voter_count for s in range(200)}
    assert sizes == {1, 3, 5}


# --------------------------------------------------------------------- checkers
def test_out_of_order_apply_is_caught() -> None:
    checker = Checker()
    chain = checker.on_apply(1, 0, 0, txn(1), committed=True)
    with pytest.raises(Violation):
        checker.on_apply(1, make_zxid(1, 1), chain, txn(1), committed=True)


def test_different_histories_at_one_zxid_are_caught() -> None:
    checker = Checker()
    checker.on_apply(1, 0, 0, txn(1), committed=True)
    with pytest.raises(Violation):
        checker.on_apply(2, 0, 0, txn(1)._replace(cxid=99), committed=False)


def test_two_leaders_in_one_epoch_are_caught() -> None:
    checker = Checker()
    checker.on_established(1, 2, 0)
    with pytest.raises(Violation):
        checker.on_established(2, 2, 0)


def test_a_leader_missing_a_committed_txn_is_caught() -> None:
    checker = Checker()
    chain = checker.on_apply(1, 0, 0, txn(1), committed=True)
    checker.on_apply(1, make_zxid(1, 1), chain, txn(2), committed=True)
    checker.on_apply(2, make_zxid(1, 1), chain, txn(1, epoch=2), committed=False)
    with pytest.raises(Violation):
        checker.on_established(2, 3, make_zxid(2, 1))


def test_a_leader_without_a_quorum_of_the_committed_membership_is_caught() -> None:
    """The reconfig committed at 0x100000001 made {3, 4, 5} the voters: a leader of a later
    epoch established by {1, 2} (a quorum of the first membership only) is a split brain."""
    checker = Checker()
    checker.memberships.append((0, frozenset({1, 2, 3})))
    members = "server.3=sim:3:3:participant\nserver.4=sim:4:4:participant\nserver.5=sim:5:5:participant\nversion=100000001\n"
    reconfig = Txn(make_zxid(1, 1), 0, 1, 0, OpCode.RECONFIG, (members,))
    checker.on_apply(3, 0, 0, reconfig, committed=True)
    checker.on_established(4, 2, make_zxid(1, 1), frozenset({3, 4}))
    with pytest.raises(Violation, match="no quorum of the membership committed at 0x100000001"):
        checker.on_established(1, 3, make_zxid(1, 1), frozenset({1, 2}))
