"""The core's messages in ZooKeeper's peer protocol (``zabby.core.zk_link``): recorded streams of
ZooKeeper 3.8 servers read as the core's messages, and the core's messages written as the
packets ZooKeeper's servers expect (one ACK or COMMIT per proposal, a SNAP's fuzzy tree made
exact, an observer's sync in PROPOSAL/COMMIT pairs)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.zkpeer.helpers import packets, recorded
from zabby.core.messages import (
    Ack, AckEpoch, Commit, Diff, FollowerInfo, Inform, LeaderInfo, NewLeader, Notification, Ping, Proposal, Request,
    Message, Revalidate, Revalidated, Snap, SnapChunk, Sync, UpToDate,
)  # fmt: skip
from zabby.core.zk_link import LeaderLink, LearnerLink, vote_from_zk, vote_to_zk
from zabby.errors import RemoteProtocolError
from zabby.opcodes import OpCode
from zabby.tree.datatree import DataTree, TreeBuilder
from zabby.tree.txns import Txn, make_zxid
from zabby.wire import zk_quorum
from zabby.wire.zk_quorum import PacketType, packet
from zabby.wire.zk_snapshot import serialize_tree

ACL = ((31, "world", "anyone"),)
NEWLEADER_ZXID = make_zxid(1, 0)


def fed(link: LeaderLink | LearnerLink, data: bytes, step: int) -> list[object]:
    out: list[object] = []
    for start in range(0, len(data), step):
        out += link.receive(data[start : start + step])
    return out


def no_timeout(session_id: int) -> int | None:
    return None


@pytest.mark.parametrize("step", [1, 7, 100000])
def test_a_zookeeper_followers_stream_as_the_leaders_core_reads_it(step: int) -> None:
    data = recorded("follower1-to-leader.bin")
    link = LeaderLink()
    link.send(UpToDate())  # pings go once the learner is up to date
    for round_ in range(1, 200):  # the pings this stream answers, in order
        link.send(Ping(round=round_))
    messages = fed(link, data, step)
    assert link.sid == 1 and not link.observer
    assert messages[:3] == [FollowerInfo(accepted_epoch=0, last_zxid=0, observer=False, config_version=0),
                            AckEpoch(current_epoch=0, last_zxid=0), Ack(zxid=NEWLEADER_ZXID)]  # its second ACK of NEWLEADER is dropped
    assert Ack(zxid=NEWLEADER_ZXID) not in messages[3:]
    pings = [m for m in messages if isinstance(m, Ping)]
    assert [p.round for p in pings] == list(range(1, len(pings) + 1))
    assert any(p.sessions for p in pings)
    requests = [m for m in messages if isinstance(m, Request)]
    assert requests[0].op == OpCode.CREATE_SESSION and requests[0].args == (10000, zk_quorum.session_password(requests[0].session_id))
    create = next(r for r in requests if r.op == OpCode.CREATE)
    assert create.args == ("/s1", b"", ACL, 0, 0) and create.auth_ids == (("ip", "127.0.0.1"),)
    assert [m for m in messages if isinstance(m, Sync)] == [Sync(session_id=requests[0].session_id, cxid=12)]
    assert requests[-1].op == OpCode.CLOSE_SESSION and requests[-1].args == ()


def test_an_observer_and_a_rejoining_follower() -> None:
    observer = LeaderLink()
    messages = observer.receive(recorded("observer4-to-leader.bin"))
    assert observer.observer and messages[0] == FollowerInfo(accepted_epoch=0, last_zxid=0, observer=True, config_version=0)
    rejoin = LeaderLink()
    messages = rejoin.receive(recorded("rejoin-to-leader.bin"))
    # ACKEPOCH -1: it had accepted the epoch before; its log's epoch stands for its current one
    assert messages[1] == AckEpoch(current_epoch=1, last_zxid=make_zxid(1, 0x34))
    assert [m.zxid for m in messages if isinstance(m, Ack)][:2] == [NEWLEADER_ZXID, make_zxid(1, 0x35)]


def test_packets_out_of_order_are_refused() -> None:
    with pytest.raises(RemoteProtocolError):
        LeaderLink().receive(packet(PacketType.ACKEPOCH, 0, zk_quorum.int_bytes(0)))
    link = LeaderLink()
    link.receive(packets(recorded("follower1-to-leader.bin"))[0][0].encode())
    with pytest.raises(RemoteProtocolError):
        link.receive(packets(recorded("follower1-to-leader.bin"))[0][0].encode())
    with pytest.raises(RemoteProtocolError):
        LearnerLink(1, no_timeout).receive(packet(PacketType.FOLLOWERINFO, 0))
    with pytest.raises(RemoteProtocolError):
        LearnerLink(1, no_timeout).receive(packet(PacketType.COMMITANDACTIVATE, 5, bytes(8)))


@pytest.mark.parametrize("step", [1, 13, 100000])
def test_a_zookeeper_leaders_stream_as_a_learners_core_reads_it(step: int) -> None:
    data = recorded("leader-to-follower1.bin")
    link = LearnerLink(1, no_timeout)
    link.send(Sync(session_id=0x0100_0085_CFB9_0000, cxid=12))
    messages = fed(link, data, step)
    assert messages[:4] == [LeaderInfo(epoch=1), Diff(zxid=0), NewLeader(zxid=NEWLEADER_ZXID), UpToDate()]
    recorded_txns = [zk_quorum.txn_from_zk(zk_quorum.decode_txn(p.data)) for p in packets(data)[0] if p.type == PacketType.PROPOSAL]
    proposals = [m for m in messages if isinstance(m, Proposal)]
    assert [p.txns for p in proposals] == [(txn,) for txn in recorded_txns]
    assert [m.zxid for m in messages if isinstance(m, Commit)] == [txn.zxid for txn in recorded_txns]
    assert Sync(session_id=0x0100_0085_CFB9_0000, cxid=12) in messages


def _snap_records(link: LearnerLink, data: bytes) -> tuple[list[Message], list[tuple[Any, ...]]]:
    messages = link.receive(data)
    records = [record for m in messages if isinstance(m, SnapChunk) for record in m.records]
    return messages, records


def test_a_snap_becomes_the_cores_snap_and_a_tree() -> None:
    data = recorded("leader-to-snap-follower.bin")
    link = LearnerLink(1, no_timeout)
    messages, records = _snap_records(link, data)
    _, trees = packets(data)
    snap_zxid = make_zxid(1, 0x34)
    assert messages[:2] == [LeaderInfo(epoch=1), Snap(zxid=snap_zxid)]
    chunks = [m for m in messages if isinstance(m, SnapChunk)]
    assert chunks[-1].last and not any(c.last for c in chunks[:-1])
    assert records[0] == ("tree", snap_zxid, 0, len(trees[0].nodes))
    assert records[1:] == [tuple(node) for node in trees[0].nodes.values()]
    assert messages[len(chunks) + 2 :][:2] == [NewLeader(zxid=NEWLEADER_ZXID), Ping()]
    builder = TreeBuilder()  # the records make a zabby tree
    builder.add(records)
    tree = builder.finish()
    assert tree.last_zxid == snap_zxid and tree.nodes["/behind"].data == b"p"


class FuzzyLeader:
    """A ZooKeeper leader's SNAP whose tree already holds txns it then proposes again."""

    def __init__(self) -> None:
        self.epoch = 2
        z = self.zxid
        # the tree as serialized: /a created at z(1), and /b at z(3), a txn after the SNAP's zxid z(2)
        records = [("/", b"", ACL, 0, 0, z(3), 0, 0, 0, 2, 0, 0), ("/a", b"a", ACL, z(1), z(1), z(1), 10, 10, 0, 0, 0, 0),
                   ("/b", b"b", ACL, z(3), z(3), z(3), 30, 30, 0, 0, 0, 0)]  # fmt: skip
        self.tree = b"".join(serialize_tree({}, records)) + b"\x00\x00\x00\x0aBenWasHere"

    def zxid(self, counter: int) -> int:
        return make_zxid(self.epoch, counter)

    def txn(self, counter: int, txn_type: int, body: tuple[object, ...]) -> Txn:
        return Txn(self.zxid(counter), 0x55, counter, counter * 10, txn_type, body)

    def proposal(self, txn: Txn) -> bytes:
        return packet(PacketType.PROPOSAL, txn.zxid, zk_quorum.encode_txn(txn))

    def stream(self) -> Iterator[bytes]:
        z = self.zxid
        yield packet(PacketType.LEADERINFO, make_zxid(3, 0), zk_quorum.int_bytes(0x10000))
        yield packet(PacketType.SNAP, z(2)) + self.tree
        create_b = self.txn(3, OpCode.CREATE, ("/b", b"b", ACL, 0, 2))  # in the tree already
        set_a = self.txn(4, OpCode.SET_DATA, ("/a", b"a2", 1))
        later = self.txn(5, OpCode.DELETE, ("/b",))
        for txn in (create_b, set_a):
            yield self.proposal(txn) + packet(PacketType.COMMIT, txn.zxid)
        yield self.proposal(later)
        yield packet(PacketType.NEWLEADER, make_zxid(3, 0))
        yield packet(PacketType.COMMIT, later.zxid)


def test_a_fuzzy_snap_is_replayed_as_zookeepers_learner_replays_it() -> None:
    leader = FuzzyLeader()
    link = LearnerLink(1, no_timeout)
    messages, records = _snap_records(link, b"".join(leader.stream()))
    z = leader.zxid
    assert messages[1] == Snap(zxid=z(4))  # the last txn committed before NEWLEADER
    nodes = {record[0]: record for record in records[1:]}
    assert records[0] == ("tree", z(4), 0, 3)
    assert nodes["/b"][3:6] == (z(3), z(3), z(3))  # the create met its node: NODEEXISTS, nothing changed
    assert nodes["/a"][1] == b"a2" and nodes["/a"][4] == z(4) and nodes["/a"][8] == 1
    assert nodes["/"][5] == z(3) and nodes["/"][9] == 2  # the parent's cversion is not raised again
    tail = messages[-3:]
    assert tail == [Proposal(txns=(leader.txn(5, OpCode.DELETE, ("/b",)),)), NewLeader(zxid=make_zxid(3, 0)), Commit(zxid=z(5))]
    # the NEWLEADER ack also acks the proposal the core got after the SNAP, once; not those
    # the link replayed (ZooKeeper's learner applies those at once, and acks none)
    assert link.send(Ack(zxid=make_zxid(3, 0))) == packet(PacketType.ACK, make_zxid(3, 0)) + packet(PacketType.ACK, z(5))
    assert link.send(Ack(zxid=z(5))) == b""


def test_learner_packets_are_zookeepers_own() -> None:
    """What a zabby learner sends is byte for byte what ZooKeeper's follower 1 sent."""
    sent, _ = packets(recorded("follower1-to-leader.bin"))
    received, _ = packets(recorded("leader-to-follower1.bin"))
    link = LearnerLink(1, lambda session_id: 10000)
    assert link.send(FollowerInfo(accepted_epoch=0, last_zxid=0)) == sent[0].encode()
    assert link.send(AckEpoch(current_epoch=0, last_zxid=0)) == sent[1].encode()
    leader = LeaderLink()  # what the leader read them as, written back by the learner
    for p in sent:
        for message in leader.receive(p.encode()):
            if isinstance(message, Request):  # a sync's path and the session's ids are not kept: its leader reads neither
                assert link.send(message) == p.encode()
    link.receive(b"".join(p.encode() for p in received[:5]))  # a PING: its zxid is echoed
    touched = next(p for p in sent if p.type == PacketType.PING and p.data)
    sessions = tuple(session_id for session_id, _ in zk_quorum.decode_touches(touched.data))
    assert link.send(Ping(sessions=sessions)) == packet(PacketType.PING, received[4].zxid, touched.data)


def test_acks_are_one_per_proposal_committed_or_not() -> None:
    """ZooKeeper's leader waits for an ACK of every PROPOSAL it sent, and drops a learner that
    left one unacked for syncLimit, even once a quorum of others committed it."""
    link = LearnerLink(1, no_timeout)
    txns = [Txn(make_zxid(1, n), 0, n, 0, OpCode.DELETE, (f"/{n}",)) for n in range(1, 5)]
    link.receive(packet(PacketType.DIFF, 0) + b"".join(packet(PacketType.PROPOSAL, t.zxid, zk_quorum.encode_txn(t)) for t in txns)
                 + packet(PacketType.COMMIT, txns[0].zxid))  # fmt: skip
    assert link.send(Ack(zxid=txns[2].zxid)) == b"".join(packet(PacketType.ACK, t.zxid) for t in txns[:3])
    assert link.send(Ack(zxid=txns[2].zxid)) == b""
    assert link.send(Ack(zxid=txns[3].zxid)) == packet(PacketType.ACK, txns[3].zxid)
    assert link.send(Revalidate(session_id=7, timeout_ms=4000)) == packet(PacketType.REVALIDATE, -1, zk_quorum.encode_revalidate(7, 4000))
    assert link.receive(packet(PacketType.REVALIDATE, -1, zk_quorum.encode_revalidated(7, False))) == [Revalidated(7, False)]


def _txns(first: int, count: int) -> tuple[Txn, ...]:
    return tuple(Txn(make_zxid(1, n), 0, n, 0, OpCode.SET_DATA, ("/x", b"%d" % n, n)) for n in range(first, first + count))


def test_a_followers_commits_are_one_per_proposal_sent_on_its_link() -> None:
    link = LeaderLink()
    link.receive(packets(recorded("follower1-to-leader.bin"))[0][0].encode())
    assert link.send(LeaderInfo(epoch=1)) == packets(recorded("leader-to-follower1.bin"))[0][0].encode()
    assert link.send(Ping(round=3)) == b""  # a ZooKeeper learner exits on a PING before its sync, and answers none during it
    assert link.send(Diff(zxid=0)) == packet(PacketType.DIFF, 0)
    assert link.send(Ping(round=3)) == b""
    txns = _txns(1, 3)
    assert link.send(Proposal(txns=txns)) == b"".join(packet(PacketType.PROPOSAL, t.zxid, zk_quorum.encode_txn(t)) for t in txns)
    assert link.send(Commit(zxid=txns[0].zxid)) == packet(PacketType.COMMIT, txns[0].zxid)
    assert link.send(NewLeader(zxid=NEWLEADER_ZXID)) == packet(PacketType.NEWLEADER, NEWLEADER_ZXID)
    # between NEWLEADER and UPTODATE a COMMIT waits: a ZooKeeper learner with no proposal since
    # NEWLEADER fails its sync on one (its Learner.syncWithLeader's NullPointerException)
    assert link.send(Commit(zxid=txns[1].zxid)) == b""
    assert link.send(Commit(zxid=txns[1].zxid)) == b""  # a ZooKeeper follower exits on a COMMIT it holds no proposal for
    assert link.send(UpToDate()) == packet(PacketType.UPTODATE, -1) + packet(PacketType.COMMIT, txns[1].zxid)
    assert link.send(Commit(zxid=txns[2].zxid)) == packet(PacketType.COMMIT, txns[2].zxid)
    assert link.send(Ping(round=4)) == packet(PacketType.PING, txns[2].zxid)
    assert link.receive(packet(PacketType.PING, txns[2].zxid, zk_quorum.encode_touches([(9, 4000)]))) == [Ping(sessions=(9,), round=4)]
    assert link.send(Sync(session_id=9, cxid=3)) == packet(PacketType.SYNC, 0)


def test_an_observers_sync_goes_in_committed_pairs_then_informs() -> None:
    link = LeaderLink()
    link.receive(packets(recorded("observer4-to-leader.bin"))[0][0].encode())
    link.send(Diff(zxid=0))
    txns = _txns(1, 4)
    assert link.send(Proposal(txns=txns[:3])) == b""  # held: an uncommitted PROPOSAL at UPTODATE fails its sync
    pair = b"".join(packet(PacketType.PROPOSAL, t.zxid, zk_quorum.encode_txn(t)) + packet(PacketType.COMMIT, t.zxid) for t in txns[:2])
    assert link.send(Commit(zxid=txns[1].zxid)) == pair
    link.send(UpToDate())
    informed = link.send(Inform(txns=txns[1:]))  # txns[1] went already; txns[2] was held
    assert informed == b"".join(packet(PacketType.INFORM, t.zxid, zk_quorum.encode_txn(t)) for t in txns[2:])


def test_votes_both_ways() -> None:
    note = Notification(leader=3, zxid=make_zxid(2, 7), peer_epoch=2, election_epoch=5, state="following")
    vote = vote_to_zk(note, b"server.3=h:1:2:participant\nversion=0")
    assert vote.state == zk_quorum.ElectionState.FOLLOWING and vote.version == 2
    assert vote_from_zk(zk_quorum.decode_vote(zk_quorum.encode_vote(vote))) == note
    with pytest.raises(RemoteProtocolError):
        vote_from_zk(zk_quorum.Vote(9, 3, 0, 0, 0))


def test_a_snap_tree_of_a_zabby_tree_builds_the_same_tree() -> None:
    """What a zabby leader's SNAP sends a ZooKeeper learner (``serialize_tree`` of its records)
    reads back, through a learner link, as the same records."""
    tree = DataTree()
    for n, path in enumerate(("/a", "/a/b", "/c")):
        parent = path.rsplit("/", 1)[0] or "/"
        cversion = tree.nodes[parent].cversion + 1
        tree.apply(Txn(make_zxid(1, n + 1), 0, n, 5, OpCode.CREATE, (path, b"d" if n else None, ACL, 0, cversion)))
    records = list(tree.records())
    stream = b"".join(serialize_tree({}, [tuple(r) for r in records[1:]])) + b"\x00\x00\x00\x0aBenWasHere"
    link = LearnerLink(1, no_timeout)
    messages, got = _snap_records(link, packet(PacketType.SNAP, tree.last_zxid) + stream + packet(PacketType.NEWLEADER, NEWLEADER_ZXID))
    assert got[0] == ("tree", tree.last_zxid, 0, len(records) - 1)
    assert got[1:] == [tuple(r) for r in records[1:]]
    assert messages[-1] == NewLeader(zxid=NEWLEADER_ZXID)


def test_proposals_and_informs_carry_the_leaders_digest() -> None:
    txns = _txns(1, 2)
    link = LeaderLink(digest_of=lambda zxid: (2, zxid * 10) if zxid == txns[0].zxid else None)
    link.receive(packets(recorded("follower1-to-leader.bin"))[0][0].encode())
    sent, _ = packets(link.send(Proposal(txns=txns)))
    assert [zk_quorum.decode_txn(p.data).digest for p in sent] == [(2, txns[0].zxid * 10), None]


def _uptodate_follower() -> LeaderLink:
    link = LeaderLink()
    link.receive(packets(recorded("follower1-to-leader.bin"))[0][0].encode())
    for message in (LeaderInfo(epoch=1), Diff(zxid=0), NewLeader(zxid=NEWLEADER_ZXID), UpToDate()):
        link.send(message)
    return link


def _forward(link: LeaderLink, session_id: int, cxid: int, op: int) -> None:
    body = zk_quorum.encode_request(session_id, cxid, op, b"" if op == OpCode.SYNC else zk_quorum.request_body(op, ("/x", b"v", -1)))
    link.receive(packet(PacketType.REQUEST, -1, body))


def _set(zxid_counter: int, session_id: int, cxid: int) -> Txn:
    return Txn(make_zxid(1, zxid_counter), session_id, cxid, 0, OpCode.SET_DATA, ("/x", b"v", zxid_counter))


def test_a_followers_writes_and_syncs_are_answered_in_the_order_it_forwarded_them() -> None:
    """A ZooKeeper follower matches each COMMIT and SYNC with the oldest write or sync it
    forwarded, and takes any other for another server's (answering its client out of order, or
    never): zabby's leader answers a sync after a round of PINGs, so a write forwarded after it
    may commit first (its COMMIT waits for the SYNC), and one forwarded just before may not be
    proposed yet when the sync is answered (the SYNC waits for its COMMIT)."""
    link = _uptodate_follower()
    _forward(link, 9, 1, OpCode.SET_DATA)
    _forward(link, 9, 2, OpCode.SYNC)
    _forward(link, 9, 3, OpCode.SET_DATA)
    other, first, after = _set(1, 5, 40), _set(2, 9, 1), _set(3, 9, 3)
    link.send(Proposal(txns=(other, first, after)))
    commit = {t.zxid: packet(PacketType.COMMIT, t.zxid) for t in (other, first, after)}
    assert link.send(Commit(zxid=after.zxid)) == commit[other.zxid] + commit[first.zxid]  # the write after the sync waits
    assert link.send(Sync(session_id=9, cxid=2)) == packet(PacketType.SYNC, 0) + commit[after.zxid]
    _forward(link, 9, 4, OpCode.SET_DATA)
    _forward(link, 9, 5, OpCode.SYNC)
    assert link.send(Sync(session_id=9, cxid=5)) == b""  # before the write forwarded ahead of it
    late = _set(4, 9, 4)
    link.send(Proposal(txns=(late,)))
    assert link.send(Commit(zxid=late.zxid)) == packet(PacketType.COMMIT, late.zxid) + packet(PacketType.SYNC, 0)


def test_a_forwarded_write_that_made_no_txn_holds_nothing_back() -> None:
    link = _uptodate_follower()
    _forward(link, 9, 1, OpCode.SET_DATA)  # (dropped by the leader: no txn answers it)
    _forward(link, 9, 2, OpCode.SET_DATA)
    txn = _set(1, 9, 2)
    link.send(Proposal(txns=(txn,)))
    assert link.send(Commit(zxid=txn.zxid)) == packet(PacketType.COMMIT, txn.zxid)
    _forward(link, 9, 3, OpCode.SYNC)
    assert link.send(Sync(session_id=9, cxid=3)) == packet(PacketType.SYNC, 0)
