"""ZooKeeper's peer protocol codecs (``zabby.wire.zk_quorum``) against bytes ZooKeeper 3.8
servers sent each other: every packet, vote and txn they wrote reads back and writes again
byte for byte, whatever the split of the stream."""

from __future__ import annotations

import pytest

from tests.zkpeer.helpers import packets, recorded
from zabby.errors import OversizeError, RemoteProtocolError
from zabby.opcodes import OpCode
from zabby.wire import zk_quorum
from zabby.wire.zk_quorum import PacketType, QuorumPacket, Vote
from zabby.wire.zk_snapshot import parse_acl_map, parse_nodes, parse_sessions
from zabby.wire.zk_txn import encode_entry

STREAMS = ("follower1-to-leader.bin", "leader-to-follower1.bin", "observer4-to-leader.bin", "rejoin-to-leader.bin",
           "leader-to-rejoin.bin", "revalidating-follower-to-leader.bin")  # fmt: skip
SNAP_STREAMS = ("leader-to-snap-follower.bin", "leader-to-revalidating-follower.bin", "leader-to-observer4.bin")


@pytest.mark.parametrize("name", STREAMS)
def test_recorded_streams_read_and_write_back_byte_for_byte(name: str) -> None:
    data = recorded(name)
    whole, _ = packets(data)
    assert b"".join(p.encode() for p in whole) == data
    for step in (1, 5, 97):
        assert packets(data, step)[0] == whole


@pytest.mark.parametrize("name", SNAP_STREAMS)
def test_a_snap_is_followed_by_the_tree_and_its_signature(name: str) -> None:
    data = recorded(name)
    whole, trees = packets(data)
    snap_at = next(i for i, p in enumerate(whole) if p.type == PacketType.SNAP)
    assert [p.type for p in whole[: snap_at + 2]] == [PacketType.LEADERINFO, PacketType.SNAP, PacketType.NEWLEADER]
    head = b"".join(p.encode() for p in whole[: snap_at + 1])
    # the tree as the whole-buffer parsers of the import read it
    sessions, pos = parse_sessions(data, len(head))
    acls, pos = parse_acl_map(data, pos)
    nodes, owned, _ = parse_nodes(data, pos, acls)
    (tree,) = trees
    assert tree.nodes == nodes and tree.sessions == sessions and tree.owned == owned
    assert "/zookeeper/config" in nodes
    for step in (1, 13, 512):
        again, split_trees = packets(data, step)
        assert again == whole and split_trees[0].nodes == nodes


def test_learner_info_discovery_and_epoch_acks() -> None:
    follower, _ = packets(recorded("follower1-to-leader.bin"))
    info = follower[0]
    assert info.type == PacketType.FOLLOWERINFO and info.zxid == 0
    assert zk_quorum.learner_info(info) == zk_quorum.LearnerInfo(1, zk_quorum.PROTOCOL_VERSION, 0)
    assert follower[1].type == PacketType.ACKEPOCH and zk_quorum.int_data(follower[1]) == 0
    observer, _ = packets(recorded("observer4-to-leader.bin"))
    assert observer[0].type == PacketType.OBSERVERINFO and zk_quorum.learner_info(observer[0]).server_id == 4
    rejoin, _ = packets(recorded("rejoin-to-leader.bin"))
    assert rejoin[0].zxid == 1 << 32  # its accepted epoch
    assert rejoin[1].type == PacketType.ACKEPOCH and zk_quorum.int_data(rejoin[1]) == -1  # accepted before: not counted
    leader, _ = packets(recorded("leader-to-follower1.bin"))
    assert leader[0] == QuorumPacket(PacketType.LEADERINFO, 1 << 32, zk_quorum.int_bytes(zk_quorum.PROTOCOL_VERSION), None)
    assert leader[0].encode() == zk_quorum.packet(PacketType.LEADERINFO, 1 << 32, zk_quorum.int_bytes(0x10000))


def test_forwarded_requests_read_as_zabby_writes_and_write_back() -> None:
    seen = set()
    for name in ("follower1-to-leader.bin", "observer4-to-leader.bin", "revalidating-follower-to-leader.bin"):
        for p in packets(recorded(name))[0]:
            if p.type != PacketType.REQUEST:
                continue
            assert p.zxid == -1
            session_id, cxid, op, body = zk_quorum.decode_request(p.data)
            seen.add(op)
            args = zk_quorum.request_from_body(session_id, op, body)
            assert zk_quorum.request_body(op, args) == body, (op, args)
            assert zk_quorum.encode_request(session_id, cxid, op, body) == p.data
            if op == OpCode.CREATE_SESSION:
                assert args == (10000, zk_quorum.session_password(session_id)) and not p.authinfo
    assert seen >= {OpCode.CREATE_SESSION, OpCode.CREATE, OpCode.SET_DATA, OpCode.MULTI, OpCode.SYNC, OpCode.DELETE,
                    OpCode.SET_ACL, OpCode.CLOSE_SESSION}  # fmt: skip


def test_pings_carry_touched_sessions_and_revalidate_its_session() -> None:
    touched = [zk_quorum.decode_touches(p.data) for p in packets(recorded("follower1-to-leader.bin"))[0] if p.type == PacketType.PING]
    assert [] in touched and any(touched)
    for touches in touched:
        assert all(timeout == 10000 for _, timeout in touches)
        assert zk_quorum.decode_touches(zk_quorum.encode_touches(touches)) == touches
    (revalidate,) = [p for p in packets(recorded("revalidating-follower-to-leader.bin"))[0] if p.type == PacketType.REVALIDATE]
    session_id, timeout_ms = zk_quorum.decode_revalidate(revalidate.data)
    assert timeout_ms == 10000 and zk_quorum.encode_revalidate(session_id, timeout_ms) == revalidate.data
    (answer,) = [p for p in packets(recorded("leader-to-revalidating-follower.bin"))[0] if p.type == PacketType.REVALIDATE]
    assert zk_quorum.decode_revalidated(answer.data) == (session_id, True)
    assert zk_quorum.encode_revalidated(session_id, True) == answer.data


@pytest.mark.parametrize("name", ("leader-to-follower1.bin", "leader-to-observer4.bin", "leader-to-rejoin.bin"))
def test_proposed_txns_map_to_zabby_txns_and_back(name: str) -> None:
    """What ZooKeeper's leader proposes (or informs) reads as a zabby txn, and that txn writes
    back as the same entry, but for a create's type: zabby's leader proposes create2 (a
    follower answers a create2 from its Stat, and a create too)."""
    types = set()
    for p in packets(recorded(name))[0]:
        if p.type not in (PacketType.PROPOSAL, PacketType.INFORM):
            continue
        zk = zk_quorum.decode_txn(p.data)
        assert zk.zxid == p.zxid and zk.digest is not None and zk.digest[0] == 2
        types.add(zk.type)
        txn = zk_quorum.txn_from_zk(zk)
        back = zk_quorum.zk_from_txn(txn, zk.digest)
        expected = zk._replace(type=OpCode.CREATE2) if zk.type == OpCode.CREATE else zk
        assert back == expected
        if zk.type != OpCode.CREATE:
            assert encode_entry(back) == p.data
    assert {OpCode.CREATE_SESSION, OpCode.CREATE, OpCode.SET_DATA, OpCode.MULTI, OpCode.CLOSE_SESSION} <= types


def test_txn_types_zookeeper_would_log_for_zabby_creates() -> None:
    acl = ((31, "world", "anyone"),)
    session = 0x0100000000000001
    ttl_owner = zk_quorum.ttl_owner(5000)
    plain = zk_quorum.Txn(5, session, 1, 7, OpCode.CREATE, ("/a", b"x", acl, 0, 1))
    ephemeral = plain._replace(body=("/e", b"", acl, session, 2))
    container = plain._replace(body=("/c", None, acl, zk_quorum.CONTAINER_OWNER, 3))
    ttl = plain._replace(body=("/t", b"", acl, ttl_owner, 4))
    assert zk_quorum.zk_from_txn(plain).type == OpCode.CREATE2
    assert zk_quorum.zk_from_txn(ephemeral).body == ("/e", b"", acl, True, 2)
    assert zk_quorum.zk_from_txn(container)[4:6] == (OpCode.CREATE_CONTAINER, ("/c", None, acl, 3))
    assert zk_quorum.zk_from_txn(ttl)[4:6] == (OpCode.CREATE_TTL, ("/t", b"", acl, 4, 5000))
    multi = plain._replace(type=OpCode.MULTI, body=(((OpCode.CREATE, plain.body), (OpCode.DELETE, ("/x",))),))
    assert zk_quorum.zk_from_txn(multi).body == (((OpCode.CREATE, ("/a", b"x", acl, False, 1)), (OpCode.DELETE, ("/x",))),)
    # a failed multi as ZooKeeper's leader logs it: the ops before the failure as they were
    logged = zk_quorum.ZkTxn(0x55, 3, 9, 7, OpCode.MULTI, (((OpCode.SET_DATA, ("/a", b"x", 2)), (OpCode.ERROR, (-114,)),
                                                            (OpCode.ERROR, (-2,))),))  # fmt: skip
    assert zk_quorum.txn_from_zk(logged).body == (((OpCode.ERROR, (0,)), (OpCode.ERROR, (-114,)), (OpCode.ERROR, (-2,))),)
    failed = plain._replace(type=OpCode.ERROR, body=(-101, "no node /a"))
    assert zk_quorum.zk_from_txn(failed).body == (-101,)
    closed = plain._replace(type=OpCode.CLOSE_SESSION, body=(None,))  # zabby: "all it owns"; ZooKeeper deletes them all too
    assert zk_quorum.zk_from_txn(closed).body == ((),)
    for txn in (plain, ephemeral, container, ttl, multi):  # and back, exactly
        assert zk_quorum.txn_from_zk(zk_quorum.decode_txn(zk_quorum.encode_txn(txn))) == txn
    assert zk_quorum.txn_from_zk(zk_quorum.decode_txn(zk_quorum.encode_txn(failed))) == failed._replace(body=(-101, ""))


def test_the_election_handshake_and_a_vote() -> None:
    data = recorded("election-3-to-1.bin")
    initial, used = zk_quorum.read_initial_message(data)  # type: ignore[misc]
    assert initial.sid == 3 and len(initial.addresses) == 1
    host, port = initial.addresses[0]
    assert zk_quorum.encode_initial_message(3, host, port) == data[:used]
    for cut in range(used):
        assert zk_quorum.read_initial_message(data[:cut]) is None
    length = int.from_bytes(data[used : used + 4], "big")
    payload = data[used + 4 : used + 4 + length]
    assert used + 4 + length == len(data)
    vote = zk_quorum.decode_vote(payload)
    assert (vote.state, vote.leader, vote.zxid, vote.election_epoch, vote.peer_epoch, vote.version) == (0, 3, 0, 1, 0, 2)
    assert zk_quorum.election_frame(zk_quorum.encode_vote(vote)) == data[used:]
    # the config it carries, as zk_quorum.config_text writes a membership
    members = []
    for line in vote.config.decode().splitlines()[:-1]:
        key, value = line.split("=")
        host, quorum, election, role = value.split(":")
        members.append((int(key.split(".")[1]), host, int(quorum), int(election), role == "observer"))
    assert zk_quorum.config_text(reversed(members), 0).encode() == vote.config
    assert vote.config.endswith(b"\nversion=0")


def test_older_votes_and_bad_input() -> None:
    full = zk_quorum.encode_vote(Vote(1, 2, 3 << 32 | 5, 4, 3, config=b"x"))
    assert zk_quorum.decode_vote(full[:36] + bytes(4)) == Vote(1, 2, 3 << 32 | 5, 4, 3, 0, b"")  # before 3.4.6: no version
    assert zk_quorum.decode_vote(full[:40]) == Vote(1, 2, 3 << 32 | 5, 4, 3, 0, b"")
    assert zk_quorum.decode_vote(full[:28]) == Vote(1, 2, 3 << 32 | 5, 4, 3, 0, b"")  # peer epoch from the zxid
    for bad in (full[:27], full[:39], full[:43], full[:-1]):
        with pytest.raises(RemoteProtocolError):
            zk_quorum.decode_vote(bad)
    with pytest.raises(RemoteProtocolError):
        zk_quorum.read_initial_message((-3).to_bytes(8, "big", signed=True) + bytes(12))
    with pytest.raises(RemoteProtocolError):
        zk_quorum.read_initial_message(zk_quorum.encode_initial_message(2, "h", 1)[:16] + (5000).to_bytes(4, "big"))
    assert zk_quorum.read_initial_message((7).to_bytes(8, "big")) == (zk_quorum.InitialMessage(7), 8)  # a bare id: oldest form
    reader = zk_quorum.PacketReader(data_bytes_max=100)
    reader.feed(zk_quorum.packet(PacketType.PROPOSAL, 1, bytes(101)))
    with pytest.raises(OversizeError):
        reader.next_packet()
    reader = zk_quorum.PacketReader()
    reader.feed(zk_quorum.packet(PacketType.ACK, 1)[:-1])
    assert reader.next_packet() is None
    with pytest.raises(RemoteProtocolError):
        zk_quorum.decode_txn(b"\x00" * 10)
    with pytest.raises(RemoteProtocolError):
        zk_quorum.decode_touches(bytes(13))
