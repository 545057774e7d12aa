"""Sans-I/O tests of the client protocol: encoding, decoding, xids, watches, chroot."""

from __future__ import annotations

import msgpack
import pytest

from zabby.client.connection import parse_hosts
from zabby.client.protocol import CHILD, DATA, EXIST, PERSISTENT, RECURSIVE, ClientProtocol, WatchRegistry
from zabby.client import protocol as p
from zabby.client.states import EventType, KeeperState, WatchedEvent, ZnodeStat
from zabby.errors import BadVersionError, ConnectionLoss, NoNodeError, RolledBackError, RuntimeInconsistency
from zabby.opcodes import OpCode

STAT = [1, 2, 3000, 4000, 5, 6, 7, 0, 9, 10, 11]


def decode_frame(frame: bytes) -> list:
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    return msgpack.unpackb(frame[4:], raw=False)


def test_parse_hosts_with_chroot_and_defaults() -> None:
    assert parse_hosts("a:1,b:2/app/x") == ([("a", 1), ("b", 2)], "/app/x")
    assert parse_hosts("a") == ([("a", 2181)], "")
    assert parse_hosts("[::1]:5,h:6/") == ([("::1", 5), ("h", 6)], "")
    with pytest.raises(ValueError):
        parse_hosts("/only-chroot")


def test_chroot_paths_both_ways() -> None:
    proto = ClientProtocol("/app")
    assert proto.server_path("/") == "/app"
    assert proto.server_path("/a/b") == "/app/a/b"
    assert proto.client_path("/app") == "/"
    assert proto.client_path("/app/a") == "/a"
    assert ClientProtocol("").server_path("/a") == "/a"


def test_request_encoding_and_reply_matching_in_order() -> None:
    proto = ClientProtocol()
    r1 = proto.new_request(OpCode.GET_DATA, ["/a", False], p.decode_get, "/a")
    r2 = proto.new_request(OpCode.SET_DATA, ["/a", b"v", -1], p.decode_stat)
    assert decode_frame(r1.frame) == [1, OpCode.GET_DATA, "/a", False]
    assert decode_frame(r2.frame) == [2, OpCode.SET_DATA, "/a", b"v", -1]
    proto.sent(r1)
    proto.sent(r2)
    done, events = proto.handle_message([1, 7, 0, b"data", STAT])
    assert done is r1 and done.ok and done.result == (b"data", ZnodeStat(*STAT)) and events == []
    done, _ = proto.handle_message([2, 9, -103, "version mismatch"])
    assert done is r2 and not done.ok and isinstance(done.result, BadVersionError)
    assert proto.last_zxid == 9


def test_unknown_xid_is_connection_loss() -> None:
    proto = ClientProtocol()
    with pytest.raises(ConnectionLoss):
        proto.handle_message([5, 1, 0, None])


def test_special_xids_matched_out_of_order() -> None:
    proto = ClientProtocol()
    get = proto.new_request(OpCode.GET_DATA, ["/a", False], p.decode_get, "/a")
    ping = proto.ping_request()
    proto.sent(get)
    proto.sent(ping)
    done, _ = proto.handle_message([-2, 0, 0])
    assert done is ping and done.ok
    assert list(proto.pending) == [get]


def test_xid_wraps_to_positive() -> None:
    proto = ClientProtocol()
    proto._xid = 2**31 - 1
    assert proto.next_xid() == 1


def test_exists_registers_exist_or_data_watch() -> None:
    proto = ClientProtocol()
    seen: list[WatchedEvent] = []
    missing = proto.new_request(OpCode.EXISTS, ["/m", True], p.decode_exists, "/m", seen.append)
    present = proto.new_request(OpCode.EXISTS, ["/p", True], p.decode_exists, "/p", seen.append)
    proto.sent(missing)
    proto.sent(present)
    assert proto.handle_message([missing.xid, 1, 0, None])[0].result is None
    assert proto.handle_message([present.xid, 1, 0, STAT])[0].result == ZnodeStat(*STAT)
    assert proto.watches.paths(EXIST) == ["/m"] and proto.watches.paths(DATA) == ["/p"]
    _, events = proto.handle_message([-1, 5, 0, 1, 3, "/m"])
    assert events == [([seen.append], WatchedEvent(EventType.CREATED, KeeperState.CONNECTED, "/m", 5))]
    assert events[0][1][:3] == (EventType.CREATED, KeeperState.CONNECTED, "/m")  # kazoo's three fields come first
    assert proto.watches.paths(EXIST) == []  # one-shot
    assert proto.last_zxid == 5


def test_exists_nonode_error_still_registers_watch() -> None:
    proto = ClientProtocol()
    req = proto.new_request(OpCode.EXISTS, ["/m", True], p.decode_exists, "/m", print)
    proto.sent(req)
    done, _ = proto.handle_message([req.xid, 1, -101, "no node"])
    assert done.ok and done.result is None and proto.watches.paths(EXIST) == ["/m"]


def test_failed_get_raises_and_sets_no_watch() -> None:
    proto = ClientProtocol()
    req = proto.new_request(OpCode.GET_DATA, ["/m", True], p.decode_get, "/m", print)
    proto.sent(req)
    done, _ = proto.handle_message([req.xid, 1, -101, "no node"])
    assert isinstance(done.result, NoNodeError) and len(proto.watches) == 0


def test_watch_registry_trigger_table_and_dedup() -> None:
    reg = WatchRegistry()
    a, b, c = (lambda e: None), (lambda e: None), (lambda e: None)
    reg.add(DATA, "/n", a)
    reg.add(EXIST, "/n", a)  # same watcher twice: fires once
    reg.add(CHILD, "/n", b)
    reg.add(PERSISTENT, "/n", c)
    assert reg.triggered(EventType.CHANGED, "/n") == [a, c]
    assert reg.triggered(EventType.CHILD, "/n") == [b, c]
    assert reg.triggered(EventType.CHANGED, "/n") == [c]  # persistent stays
    reg.add(RECURSIVE, "/", a)
    assert reg.triggered(EventType.DELETED, "/x/y") == [a]
    assert reg.triggered(EventType.CHILD, "/x") == []  # recursive never gets CHILD
    reg.remove("/n", 4)
    assert reg.triggered(EventType.CHANGED, "/n") == [a]  # only the recursive one on / is left


def test_event_paths_unchrooted() -> None:
    proto = ClientProtocol("/app")
    proto.watches.add(DATA, "/app/a", print)
    _, events = proto.handle_message([-1, 3, 0, 2, 3, "/app/a"])
    assert events[0][1].path == "/a" and events[0][1].type is EventType.DELETED


def test_set_watches_request_carries_the_one_shot_kinds_and_last_zxid() -> None:
    """Persistent watches are not in it: they resume from their own zxids (resume_requests)."""
    proto = ClientProtocol()
    assert proto.set_watches_request() is None
    proto.watches.add(PERSISTENT, "/p", print)
    assert proto.set_watches_request() is None
    for kind, path in ((DATA, "/d"), (EXIST, "/e"), (CHILD, "/c"), (RECURSIVE, "/r")):
        proto.watches.add(kind, path, print)
    proto.last_zxid = 42
    req = proto.set_watches_request()
    assert decode_frame(req.frame) == [-8, 101, 42, ["/d"], ["/e"], ["/c"], [], []]


def test_drop_connection_keeps_watches_and_expire_clears_them() -> None:
    proto = ClientProtocol()
    proto.watches.add(DATA, "/d", print)
    req = proto.new_request(OpCode.SYNC, ["/"], p.decode_path)
    proto.sent(req)
    assert proto.drop_connection() == [req] and not proto.pending
    assert len(proto.watches) == 1
    fired = proto.expire()
    assert fired == [([print], WatchedEvent(EventType.NONE, KeeperState.EXPIRED_SESSION, None))]
    assert len(proto.watches) == 0


def test_multi_results_like_kazoo() -> None:
    proto = ClientProtocol("/c")
    ok = p.decode_multi(proto, None, [[[1, 0, ["/c/a", STAT]], [5, 0, STAT], [2, 0, None], [13, 0, None]]])  # type: ignore[arg-type]
    assert ok == ["/a", ZnodeStat(*STAT), True, True]
    failed = p.decode_multi(proto, None, [[[-1, 0, None], [-1, -103, None], [-1, -2, None]]])  # type: ignore[arg-type]
    assert [type(x) for x in failed] == [RolledBackError, BadVersionError, RuntimeInconsistency]


def test_multi_read_results() -> None:
    proto = ClientProtocol()
    out = p.decode_multi_read(proto, None, [[[4, 0, [b"x", STAT]], [8, 0, ["a", "b"]], [4, -101, None]]])  # type: ignore[arg-type]
    assert out[0] == (b"x", ZnodeStat(*STAT)) and out[1] == ["a", "b"] and isinstance(out[2], NoNodeError)


def test_znodestat_properties() -> None:
    stat = ZnodeStat(*STAT)
    assert stat.created == 3.0 and stat.last_modified == 4.0
    assert (stat.acl_version, stat.children_version, stat.data_length, stat.children_count) == (7, 6, 9, 10)
    assert stat.owner_session_id is None
