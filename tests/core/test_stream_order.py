"""Each link keeps its order when the shell sends a Ready's regular messages late (after a
background fsync) and takes the next Readys meanwhile: until a Ready is advanced, what would
be early to a server it has regular messages for is regular too, behind them.  A learner's
forwarded writes are always early (``Peer.forward``)."""

from __future__ import annotations

from tests.core.test_sync_rounds import established
from zabby.core.messages import Ping, Proposal, Sync
from zabby.opcodes import OpCode
from zabby.tree.txns import Txn


def _txn(zxid: int) -> Txn:
    return Txn(zxid, 0x77, 1, 1000, int(OpCode.CREATE), ("/x", b"v", [], 0, 1))


def test_a_proposal_stays_behind_a_regular_message_of_a_ready_not_yet_advanced() -> None:
    peer, followers = established()
    peer.client_sync(Sync(session_id=7, cxid=1))
    first = peer.ready()  # the sync's round: PINGs, regular (they echo what the leader logged)
    assert sorted(sid for sid, m in first.messages if isinstance(m, Ping)) == sorted(followers)
    zxid = peer.next_zxid
    peer.propose([_txn(zxid)])
    second = peer.ready()  # the first is not advanced (its PINGs wait): the PROPOSALs wait behind them
    assert not second.early_messages
    assert sorted((sid, m.txns[0].zxid) for sid, m in second.messages if isinstance(m, Proposal)) == [(sid, zxid) for sid in sorted(followers)]
    peer.advance(first)  # the PINGs are sent; the PROPOSALs of the second still wait
    peer.propose([_txn(peer.next_zxid)])
    third = peer.ready()
    assert not third.early_messages and sorted(sid for sid, m in third.messages if isinstance(m, Proposal)) == sorted(followers)
    peer.advance(second)
    peer.advance(third)  # every link is free again
    peer.propose([_txn(peer.next_zxid)])
    fourth = peer.ready()
    assert sorted(sid for sid, m in fourth.early_messages if isinstance(m, Proposal)) == sorted(followers)
    peer.advance(fourth)
    assert not peer._unsent_sids
