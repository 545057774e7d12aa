"""Sans-I/O tests of the client protocol: encoding, decoding, xids, watches, chroot."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from zabby.client.connection import parse_hosts
from zabby.client.protocol import CHILD, DATA, EXIST, PERSISTENT, RECURSIVE, ClientProtocol, WatchRegistry
from zabby.client import protocol as p
from zabby.client.states import EventType, KeeperState, WatchedEvent, ZnodeStat
from zabby.errors import BadVersionError, ConnectionLoss, Err, HistoryCompactedError, NoNodeError, RolledBackError, RuntimeInconsistency
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


# ----------------------------------------------------------------------------- resuming persistent watches
def _added(proto: ClientProtocol, path: str, watcher: Any, reply_zxid: int, kind: str = RECURSIVE) -> None:
    mode = 1 if kind == RECURSIVE else 0
    request = proto.new_request(OpCode.ADD_WATCH, [path, mode], p.decode_add_watch, path, watcher, kind)
    proto.sent(request)
    assert proto.handle_message([request.xid, reply_zxid, 0])[0].ok


def test_a_resume_starts_one_before_the_last_zxid_and_skips_the_events_of_it_already_heard() -> None:
    """A multi's two events share zxid 12; the connection dropped after the first: the resume
    asks from 11 and passes over the first event of 12 its history brings again."""
    proto = ClientProtocol()
    seen: list[WatchedEvent] = []
    _added(proto, "/a", seen.append, 10)
    proto.handle_message([-1, 11, 0, 1, 3, "/a/x"])
    proto.handle_message([-1, 12, 0, 1, 3, "/a/y"])
    proto.drop_connection()
    [resume] = proto.resume_requests()
    assert decode_frame(resume.frame)[1:] == [OpCode.ADD_WATCH, "/a", 1, 11]
    _, live_before = proto.handle_message([-1, 13, 0, 1, 3, "/a/w"])  # a live event before the resume's answer
    assert live_before == []  # the history brings it
    proto.sent(resume)
    proto.handle_message([resume.xid, 13, 0])
    replayed = [proto.handle_message([-1, zxid, 0, 1, 3, path, resume.xid])[1] for zxid, path in ((12, "/a/y"), (12, "/a/z"), (13, "/a/w"))]
    assert [[event.path for _, event in events] for events in replayed] == [[], ["/a/z"], ["/a/w"]]
    _, live = proto.handle_message([-1, 14, 0, 1, 3, "/a/v"])
    assert [(watchers, event.zxid) for watchers, event in live] == [([seen.append], 14)]
    assert proto.watches.feed(RECURSIVE, "/a", seen.append).zxid == 14  # type: ignore[union-attr]


def test_a_watch_with_no_event_resumes_from_where_it_was_added() -> None:
    proto = ClientProtocol()
    _added(proto, "/p", print, 20, PERSISTENT)
    [resume] = proto.resume_requests()
    assert decode_frame(resume.frame)[1:] == [OpCode.ADD_WATCH, "/p", 0, 20]


def test_history_events_go_to_their_request_alone() -> None:
    """Another watcher of the same path, live all along, does not hear the new one's history."""
    proto = ClientProtocol()
    old: list[WatchedEvent] = []
    new: list[WatchedEvent] = []
    _added(proto, "/a", old.append, 30)
    request = proto.new_request(OpCode.ADD_WATCH, ["/a", 1, 5], p.decode_add_watch_since(5), "/a", new.append, RECURSIVE)
    proto.sent(request)
    proto.handle_message([request.xid, 30, 0])
    _, events = proto.handle_message([-1, 6, 0, 3, 3, "/a", request.xid])
    assert events == [([new.append], WatchedEvent(EventType.CHANGED, KeeperState.CONNECTED, "/a", 6))]
    _, events = proto.handle_message([-1, 31, 0, 3, 3, "/a"])
    assert events == [([old.append, new.append], WatchedEvent(EventType.CHANGED, KeeperState.CONNECTED, "/a", 31))]
    _, events = proto.handle_message([-1, 7, 0, 3, 3, "/a", request.xid])  # its history is over: a stray one is dropped
    assert events == []


def test_a_resume_refused_by_every_server_is_added_again_live_with_history_lost() -> None:
    proto = ClientProtocol("/app")
    _added(proto, "/app/a", print, 40)
    for server in range(3):
        [resume] = proto.resume_requests()
        proto.sent(resume)
        done, _ = proto.handle_message([resume.xid, 50, Err.HISTORYCOMPACTED, "compacted", 45])
        assert isinstance(done.result, HistoryCompactedError) and done.result.oldest_zxid == 45
        live = proto.resume_refused(done, 3)
        assert (live is None) == (server < 2)
    assert decode_frame(live.frame)[1:] == [OpCode.ADD_WATCH, "/app/a", 1, None]  # type: ignore[union-attr]
    proto.sent(live)  # type: ignore[arg-type]
    done, events = proto.handle_message([live.xid, 52, 0])  # type: ignore[union-attr]
    assert events == [([print], WatchedEvent(EventType.HISTORY_LOST, KeeperState.CONNECTED, "/a", 52))]
    assert proto.watches.feed(RECURSIVE, "/app/a", print).live  # type: ignore[union-attr]


def test_a_feed_skips_only_events_of_the_zxid_it_had() -> None:
    feed = p.Feed(print, 12)
    feed.delivered(12)
    assert feed.resume_from() == 11 and feed.skip == 1 and not feed.live
    assert feed.takes(13) and feed.takes(13)  # a history with nothing of 12: nothing of 13 is skipped
    assert (feed.zxid, feed.count, feed.skip) == (13, 2, 0)
