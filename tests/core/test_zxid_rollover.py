"""The zxid counter never rolls into the epoch: a leader steps down once it has proposed the
last counter of its epoch, and the election that follows starts a new one (ZooKeeper's
ZOOKEEPER-1277, where the counter 0xffffffff is never used).  ``zxidCounterLast`` lowers the
limit, so epochs run out in a few writes here (the simulator draws it for a share of seeds)."""

from __future__ import annotations

import pytest

from tests.core.scenario import ACL, Scenario
from tests.core.test_peer_interactions import drain, txn, z
from zabby.config import ConfigError, from_dict
from zabby.core.peer import DurableState, Peer, PeerConfig
from zabby.core.types import ServerState
from zabby.errors import InvariantError, ZabbyError
from zabby.opcodes import OpCode
from zabby.tree.txns import ZXID_COUNTER_LAST, Txn, zxid_counter, zxid_epoch

COUNTER_LAST = 6


def test_acknowledged_writes_survive_epochs_that_run_out_of_counters() -> None:
    c = Scenario(voters=3, zxid_counter_last=COUNTER_LAST)
    c.run_until(c.converged)
    acknowledged: list[tuple[str, int]] = []
    refused = 0
    for i in range(40):
        leader = c.run_until(c.serving_leader)
        path = f"/w{i}"
        try:
            answers = c.call(leader.sid, 0, OpCode.CREATE, path, b"x", ACL, 0, None)
        except ZabbyError:
            refused += 1  # it stepped down within this tick: the client hears ConnectionLoss
            continue
        c.run_until(lambda: answers or not leader.is_leader)  # noqa: B023 -- this iteration's
        if answers:
            created: Txn = answers[0][0]
            acknowledged.append((path, created.zxid))
    c.run_until(c.converged)
    counters = [zxid_counter(zxid) for _, zxid in acknowledged]
    epochs = {zxid_epoch(zxid) for _, zxid in acknowledged}
    assert max(counters) <= COUNTER_LAST and len(epochs) >= 5, (counters, epochs)
    assert len(acknowledged) >= 30, refused
    for node in c.cluster.nodes.values():
        missing = [path for path, _ in acknowledged if node.tree.get(path) is None]
        assert not missing, f"server {node.sid} lost acknowledged writes {missing}"


def test_a_leader_proposing_the_last_counter_steps_down_and_never_proposes_past_it() -> None:
    config = PeerConfig(sid=1, voters=frozenset({1}), zxid_counter_last=3)
    peer = Peer(config, DurableState(accepted_epoch=1, current_epoch=1, last_logged=z(1, 0)))
    for _ in range(200):
        peer.tick()
        drain(peer)
        if peer.established_leader:
            break
    epoch = peer.leader.epoch if peer.leader else 0
    assert peer.next_zxid == z(epoch, 1)
    peer.propose([txn(epoch, 1), txn(epoch, 2)])
    assert peer.established_leader
    peer.propose([txn(epoch, 3)])
    # no counter left: an election comes first (alone, it elects itself at once, for a new epoch)
    assert peer.state == ServerState.LOOKING or (peer.leader is not None and peer.leader.epoch > epoch), peer.state
    with pytest.raises(InvariantError):  # past the last counter: never proposed
        Peer(config, DurableState(accepted_epoch=1, current_epoch=1)).propose([txn(1, 4)])


def test_the_real_limit_is_zookeepers_and_a_lower_one_is_a_setting() -> None:
    assert ZXID_COUNTER_LAST == 0xFFFFFFFE  # 0xffffffff is never used
    assert from_dict({"dataDir": "/tmp/x", "zxidCounterLast": "100"}).zxid_counter_last == 100
    assert from_dict({"dataDir": "/tmp/x"}).zxid_counter_last == ZXID_COUNTER_LAST
    with pytest.raises(ConfigError, match="at most"):
        from_dict({"dataDir": "/tmp/x", "zxidCounterLast": "4294967295"})
