"""A member whose storage is damaged repairs it from its leader and, meanwhile, helps elect nobody.

Servers 1 and 2 logged txns (1, 1)..(1, 4), so those may have been committed and acknowledged;
server 3 logged only the first two.  Server 2's log is damaged (a flipped bit: zabby.storage
finds it, ``Storage.recover`` starts a repair and the tree comes back empty).  If server 2
voted as an empty server would, it and server 3 would elect a leader without (1, 3) and (1, 4).
"""

from __future__ import annotations

from tests.core.scenario import Scenario, creates
from zabby.engine.storage import Storage
from zabby.sim.fs import SimFS


def damaged_history(repair_marked: bool) -> Scenario:
    c = Scenario(voters=3)
    logged = creates(1, 4)
    c.preload(1, accepted_epoch=1, txns=logged)
    c.preload(2, accepted_epoch=1, txns=logged)
    c.preload(3, accepted_epoch=1, txns=logged[:2])
    c.down(1)
    node = c.node(2)
    storage = Storage(node.config, fs=node.fs)
    storage.recover(None)
    if repair_marked:
        storage.datadir.start_repair("a bit flipped in its log")
    else:  # what a server would be with its data dir wiped by hand, or its damage missed
        storage.close()
        node.fs = SimFS()
        storage = Storage(node.config, fs=node.fs)
        storage.recover(None)
        storage.write_accepted_epoch(1)
        storage.write_current_epoch(1)
    storage.close()
    c.restart(2)
    c.restart(3)
    return c


def test_a_repairing_server_votes_for_nobody_until_a_leader_has_synced_it() -> None:
    c = damaged_history(repair_marked=True)
    assert c.node(2).peer.repairing and c.node(2).tree_zxid == 0
    c.run(300)
    assert c.serving_leader() is None  # server 3 lacks (1, 3) and (1, 4); server 2 helps nobody win
    c.node(1).restart_at = 0
    c.restart(1)
    c.run_until(c.converged)
    assert c.serving_leader() is c.node(1)
    for sid in (1, 2, 3):
        assert c.node(sid).tree.get("/n1-4") is not None, sid
    assert not c.node(2).peer.repairing and not c.node(2).storage.datadir.repairing  # repaired, durably


def test_without_the_repair_mark_an_empty_server_helps_elect_a_leader_that_lost_txns() -> None:
    """Why the mark matters: the same history with server 2 simply empty elects server 3."""
    c = damaged_history(repair_marked=False)
    leader = c.run_until(c.serving_leader, ticks_max=300)
    assert leader is c.node(3) and leader.tree.get("/n1-4") is None
