"""kazoo (the PyPI ZooKeeper client, speaking jute) drives every ZooKeeper client op against zabby.

Ops kazoo's API has no method for (createContainer, createTTL, multiRead, getEphemerals,
getAllChildrenNumber, addWatch, checkWatches, removeWatches, whoAmI) go through kazoo's own
connection as raw jute requests (``kazoo_call``); their watch events are read on a raw jute
session, since kazoo only dispatches the one-shot kinds.
"""

from __future__ import annotations

import threading

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadArgumentsError,
    BadVersionError,
    InvalidACLError,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    NoWatcherError,
    ReconfigDisabledError,
    RolledBackError,
    RuntimeInconsistency,
    UnimplementedError,
)
from kazoo.protocol.states import EventType, ZnodeStat
from kazoo.security import ACL as KazooACL
from kazoo.security import Id as KazooId
from kazoo.security import make_digest_acl

from harness.differential.kazoo_ops import kazoo_call
from tests.jute.conftest import start_kazoo, stop_kazoo
from tests.jute.helpers import OPEN_ACL, jute_session
from tests.server.wire import raw_session
from zabby.opcodes import CreateMode, OpCode, WatcherType
from zabby.testing import ServerProcess
from zabby.wire import jute


def test_create_get_set_delete_and_errors(kz: KazooClient) -> None:
    assert kz.create("/basic", b"v0") == "/basic"  # op 1: the path only
    path, stat = kz.create("/basic/child", b"c", include_data=True)  # create2: path and stat
    assert path == "/basic/child" and isinstance(stat, ZnodeStat) and stat.dataLength == 1
    data, stat = kz.get("/basic")
    assert data == b"v0" and stat.version == 0 and stat.numChildren == 1
    assert kz.exists("/basic/missing") is None  # NONODE in the header: kazoo's None
    assert kz.exists("/basic").czxid == stat.czxid
    stat = kz.set("/basic", b"v1", version=0)
    assert stat.version == 1 and stat.dataLength == 2
    with pytest.raises(BadVersionError):
        kz.set("/basic", b"v2", version=0)
    with pytest.raises(NodeExistsError):
        kz.create("/basic")
    with pytest.raises(NoNodeError):
        kz.create("/nowhere/child")
    with pytest.raises(NoNodeError):
        kz.get("/basic/missing")
    with pytest.raises(NotEmptyError):
        kz.delete("/basic")
    with pytest.raises(BadArgumentsError):
        kazoo_call(kz, OpCode.CREATE, jute.CreateRequest("/basic/.", b"", OPEN_ACL, 0))
    seq = kz.create("/basic/seq-", b"", sequence=True)
    assert seq == "/basic/seq-0000000001"  # the parent's cversion: child was created first
    assert sorted(kz.get_children("/basic")) == ["child", "seq-0000000001"]
    children, stat = kz.get_children("/basic", include_data=True)  # getChildren2
    assert sorted(children) == ["child", "seq-0000000001"] and stat.numChildren == 2
    with pytest.raises(BadVersionError):
        kz.delete("/basic/child", version=7)
    kz.delete("/basic", recursive=True)
    assert kz.exists("/basic") is None
    kz.ensure_path("/deep/er/path")
    assert kz.exists("/deep/er/path") is not None
    kz.delete("/deep", recursive=True)


def test_empty_and_binary_data_round_trip(kz: KazooClient) -> None:
    blob = bytes(range(256)) * 64
    kz.create("/binary", blob)
    assert kz.get("/binary")[0] == blob
    kz.set("/binary", b"")
    assert kz.get("/binary")[0] == b""
    kz.delete("/binary")


def test_container_and_ttl_nodes(kz: KazooClient) -> None:
    reply = kazoo_call(kz, OpCode.CREATE_CONTAINER, jute.CreateRequest("/container", b"", OPEN_ACL, CreateMode.CONTAINER))
    assert isinstance(reply, jute.Create2Response) and reply.path == "/container"
    assert reply.stat.ephemeral_owner == 0  # ZooKeeper shows only sessions as owners
    ttl = jute.CreateTTLRequest("/ttl", b"t", OPEN_ACL, CreateMode.PERSISTENT_WITH_TTL, 60_000)
    reply = kazoo_call(kz, OpCode.CREATE_TTL, ttl)
    assert reply.path == "/ttl" and kz.get("/ttl")[0] == b"t"
    with pytest.raises(BadArgumentsError):
        kazoo_call(kz, OpCode.CREATE_TTL, jute.CreateTTLRequest("/ttl2", b"", OPEN_ACL, CreateMode.PERSISTENT_WITH_TTL, 0))
    kz.delete("/ttl")
    kz.delete("/container")


def test_acls_with_digest_auth(shared_server: ServerProcess, kz: KazooClient) -> None:
    kz.add_auth("digest", "alice:secret")
    kz.create("/private", b"mine", acl=[make_digest_acl("alice", "secret", all=True)])
    acls, stat = kz.get_acls("/private")
    assert acls[0].id.scheme == "digest" and acls[0].id.id.startswith("alice:") and acls[0].perms == 31
    assert kz.get("/private")[0] == b"mine"
    other = start_kazoo(shared_server.hosts)
    try:
        with pytest.raises(NoAuthError):
            other.get("/private")
        with pytest.raises(NoAuthError):
            other.set("/private", b"theirs")
        other.add_auth("digest", "alice:secret")
        assert other.get("/private")[0] == b"mine"
    finally:
        stop_kazoo(other)
    read_only = [KazooACL(1, KazooId("world", "anyone")), make_digest_acl("alice", "secret", all=True)]
    stat = kz.set_acls("/private", read_only, version=0)
    assert stat.aversion == 1
    with pytest.raises(BadVersionError):
        kz.set_acls("/private", read_only, version=0)
    with pytest.raises(InvalidACLError):
        kz.create("/bad-acl", acl=[KazooACL(31, KazooId("nosuchscheme", "x"))])
    creator = KazooACL(31, KazooId("auth", ""))  # "auth": expanded to the session's digest ids
    kz.create("/creator-only", acl=[creator])
    assert kz.get_acls("/creator-only")[0][0].id.id.startswith("alice:")
    kz.delete("/creator-only")
    kz.delete("/private")


def test_a_digest_credential_without_a_colon_proves_an_id(shared_server: ServerProcess) -> None:
    """go-zookeeper's TestIntegration_GetSetACL: ``addauth digest blah`` is accepted by
    ZooKeeper 3.8, and an ``auth`` ACL then names ``digest:blah:<sha1 of blah>``.  zabby
    answered AUTHFAILED and closed the connection."""
    kz = start_kazoo(shared_server.hosts)
    try:
        kz.add_auth("digest", "blah")
        kz.create("/blah-only", b"x", acl=[KazooACL(31, KazooId("auth", ""))])
        acl = kz.get_acls("/blah-only")[0][0]
        assert (acl.id.scheme, acl.id.id, acl.perms) == ("digest", "blah:W/H9kn37hnlJai5s8Ay+UMHIcUU=", 31)
        assert kz.get("/blah-only")[0] == b"x"
        kz.delete("/blah-only")
    finally:
        stop_kazoo(kz)


def test_one_shot_watches(shared_server: ServerProcess, kz: KazooClient) -> None:
    events: list[object] = []
    fired = threading.Event()

    def watcher(event: object) -> None:
        events.append(event)
        fired.set()

    other = start_kazoo(shared_server.hosts)
    try:
        assert kz.exists("/watched", watch=watcher) is None  # a watch on a missing node
        other.create("/watched", b"1")
        assert fired.wait(5)
        assert events[-1].type == EventType.CREATED and events[-1].path == "/watched"
        fired.clear()
        kz.get("/watched", watch=watcher)
        other.set("/watched", b"2")
        assert fired.wait(5) and events[-1].type == EventType.CHANGED
        fired.clear()
        kz.get_children("/watched", watch=watcher)
        other.create("/watched/kid")
        assert fired.wait(5) and events[-1].type == EventType.CHILD
        fired.clear()
        kz.get("/watched", watch=watcher)
        other.delete("/watched", recursive=True)
        assert fired.wait(5) and events[-1].type == EventType.DELETED
        count = len(events)
        other.create("/watched")  # one-shot: nothing more fires
        other.delete("/watched")
        kz.sync("/")
        assert len(events) == count
    finally:
        stop_kazoo(other)


def test_multi_commits_all_or_nothing(kz: KazooClient) -> None:
    kz.create("/multi", b"0")
    txn = kz.transaction()
    txn.create("/multi/a", b"a")
    txn.set_data("/multi", b"1")
    txn.check("/multi", 1)
    txn.delete("/multi/a")
    results = txn.commit()
    assert results[0] == "/multi/a" and results[1].version == 1 and results[2] is True and results[3] is True
    txn = kz.transaction()
    txn.create("/multi/b", b"b")
    txn.check("/multi", 0)  # wrong version: the whole multi fails
    txn.set_data("/multi", b"2")
    results = txn.commit()
    assert isinstance(results[0], RolledBackError)
    assert isinstance(results[1], BadVersionError)
    assert isinstance(results[2], RuntimeInconsistency)
    assert kz.exists("/multi/b") is None and kz.get("/multi")[0] == b"1"
    kz.delete("/multi")


def test_multi_read_and_create2_in_multi(kz: KazooClient) -> None:
    kz.create("/mr", b"root")
    kz.create("/mr/x", b"x")
    ops = jute.MultiRequest([(OpCode.CREATE2, jute.CreateRequest("/mr/y", b"y", OPEN_ACL, 0))])
    ((kind, err, record),) = kazoo_call(kz, OpCode.MULTI, ops)
    # ZooKeeper 3.8's multi answers a create2 as a create: the path only (tests/differential checks this against it)
    assert kind == OpCode.CREATE and err == 0 and record == jute.CreateResponse("/mr/y")
    assert kz.get("/mr/y")[0] == b"y"
    reads = jute.MultiRequest([
        (OpCode.GET_DATA, jute.GetDataRequest("/mr/x", False)),
        (OpCode.GET_CHILDREN, jute.GetChildrenRequest("/mr", False)),
        (OpCode.GET_DATA, jute.GetDataRequest("/mr/missing", False)),
    ])  # fmt: skip
    results = kazoo_call(kz, OpCode.MULTI_READ, reads)
    assert results[0][0] == OpCode.GET_DATA and results[0][2].data == b"x"
    assert results[1][0] == OpCode.GET_CHILDREN and sorted(results[1][2].children) == ["x", "y"]
    assert results[2][:2] == (-1, -101) and results[2][2].err == -101
    kz.delete("/mr", recursive=True)


def test_sync_counts_ephemerals_and_who_am_i(kz: KazooClient) -> None:
    assert kz.sync("/") == "/"
    kz.create("/count/a/b", makepath=True)
    kz.create("/count/c")
    assert kazoo_call(kz, OpCode.GET_ALL_CHILDREN_NUMBER, jute.GetAllChildrenNumberRequest("/count")).total_number == 3
    kz.create("/count/eph1", ephemeral=True)
    kz.create("/count/a/eph2", ephemeral=True)
    reply = kazoo_call(kz, OpCode.GET_EPHEMERALS, jute.GetEphemeralsRequest("/count"))
    assert sorted(reply.ephemerals) == ["/count/a/eph2", "/count/eph1"]
    assert kazoo_call(kz, OpCode.GET_EPHEMERALS, jute.GetEphemeralsRequest("/count/a")).ephemerals == ["/count/a/eph2"]
    # a string prefix, as ZooKeeper takes it: not cut at "/", not checked as a path
    assert kazoo_call(kz, OpCode.GET_EPHEMERALS, jute.GetEphemeralsRequest("/count/ep")).ephemerals == ["/count/eph1"]
    assert kazoo_call(kz, OpCode.GET_EPHEMERALS, jute.GetEphemeralsRequest("/count/a/")).ephemerals == ["/count/a/eph2"]
    assert len(kazoo_call(kz, OpCode.GET_EPHEMERALS, jute.GetEphemeralsRequest(" / ")).ephemerals) == 2  # blank or "/": all
    kz.add_auth("digest", "bob:pw")
    infos = kazoo_call(kz, OpCode.WHO_AM_I).client_info
    assert ("digest", "bob") in [(i.auth_scheme, i.user) for i in infos]
    assert ("ip", "127.0.0.1") in [(i.auth_scheme, i.user) for i in infos]
    kz.delete("/count", recursive=True)


def test_add_check_and_remove_watches(shared_server: ServerProcess, kz: KazooClient) -> None:
    kz.create("/pw", b"")
    with jute_session(shared_server.port) as session:
        header, _ = session.call(OpCode.ADD_WATCH, jute.AddWatchRequest("/pw", 1))  # persistent recursive
        assert header.err == 0
        kz.create("/pw/a", b"")
        kz.set("/pw/a", b"1")
        seen = [session.wait_event(), session.wait_event()]
        assert [(e.type, e.path) for e in seen] == [(1, "/pw/a"), (3, "/pw/a")]  # persistent: fires again
        header, _ = session.call(OpCode.CHECK_WATCHES, jute.CheckWatchesRequest("/pw", WatcherType.PERSISTENT_RECURSIVE))
        assert header.err == 0
        header, _ = session.call(OpCode.REMOVE_WATCHES, jute.RemoveWatchesRequest("/pw", WatcherType.ANY))
        assert header.err == 0
        header, _ = session.call(OpCode.CHECK_WATCHES, jute.CheckWatchesRequest("/pw", WatcherType.ANY))
        assert header.err == -121  # NOWATCHER
        header, _ = session.call(OpCode.GET_DATA, jute.GetDataRequest("/pw", True))
        assert header.err == 0
        header, _ = session.call(OpCode.CHECK_WATCHES, jute.CheckWatchesRequest("/pw", WatcherType.DATA))
        assert header.err == 0
    with pytest.raises(NoWatcherError):
        kazoo_call(kz, OpCode.REMOVE_WATCHES, jute.RemoveWatchesRequest("/pw", WatcherType.CHILDREN))
    assert kazoo_call(kz, OpCode.ADD_WATCH, jute.AddWatchRequest("/pw", 0)) == jute.ErrorResponse(0)  # as ZooKeeper answers
    kz.delete("/pw", recursive=True)


def test_unimplemented_ops_answer_unimplemented_and_keep_the_session(kz: KazooClient) -> None:
    with pytest.raises(UnimplementedError):
        kazoo_call(kz, 999)
    with pytest.raises(UnimplementedError):
        kazoo_call(kz, OpCode.CHECK, jute.CheckVersionRequest("/", 0))  # check is a multi op only
    assert kz.exists("/") is not None


def test_reconfig_is_refused_while_reconfig_is_disabled(kz: KazooClient) -> None:
    with pytest.raises(ReconfigDisabledError):
        kz.reconfig(joining=None, leaving=None, new_members="server.9=127.0.0.1:1:2")
    assert kz.exists("/") is not None


def test_protocols_see_each_others_writes_and_events(shared_server: ServerProcess, kz: KazooClient) -> None:
    with raw_session(shared_server.port) as msgpack_session:
        reply = msgpack_session.call(OpCode.CREATE, "/cross", b"from-msgpack", [[31, "world", "anyone"]], 0, 0)
        assert reply[2] == 0
        assert kz.get("/cross")[0] == b"from-msgpack"
        fired = threading.Event()
        kz.get("/cross", watch=lambda event: fired.set())
        assert msgpack_session.call(OpCode.SET_DATA, "/cross", b"msgpack-write", -1)[2] == 0
        assert fired.wait(5)
        assert msgpack_session.call(OpCode.GET_DATA, "/cross", True)[2] == 0  # a msgpack watch
        kz.set("/cross", b"jute-write")
        reply = msgpack_session.call(OpCode.GET_DATA, "/cross", False)
        assert msgpack_session.events and msgpack_session.events[0][3] == 3  # NodeDataChanged first
        assert reply[3] == b"jute-write"
    kz.delete("/cross")


def test_four_letter_words_on_the_same_port(kz: KazooClient) -> None:
    assert kz.command(b"ruok") == "imok"
    assert "Mode: standalone" in kz.command(b"srvr")
    assert kz.server_version()[0] == 3


def test_set_watches_after_reconnect_fires_missed_events(shared_server: ServerProcess, kz: KazooClient) -> None:
    kz.create("/sw", b"0")
    kz.create("/sw2", b"0")
    first = jute_session(shared_server.port, timeout_ms=6000)
    assert first.response is not None
    session_id, password = first.response.session_id, first.response.password
    header, _ = first.call(OpCode.GET_DATA, jute.GetDataRequest("/sw", True))
    last_zxid = header.zxid
    first.close()  # the connection, not the session
    kz.set("/sw", b"changed while away")
    kz.delete("/sw2")
    with jute_session(shared_server.port, session_id=session_id, password=password, last_zxid=last_zxid) as again:
        assert again.response is not None and again.response.session_id == session_id
        watches = jute.SetWatches(last_zxid, ["/sw"], ["/sw-absent"], [])
        header, _ = again.call(OpCode.SET_WATCHES, watches, xid=jute.XID_SET_WATCHES)
        assert header.xid == jute.XID_SET_WATCHES and header.err == 0
        assert (again.wait_event().type, again.events) == (3, [])  # NodeDataChanged, missed
        watches2 = jute.SetWatches2(last_zxid, [], [], [], ["/sw"], [])
        header, _ = again.call(OpCode.SET_WATCHES2, watches2, xid=jute.XID_SET_WATCHES)
        assert header.err == 0
        kz.set("/sw", b"again")
        kz.set("/sw", b"and again")
        assert [again.wait_event().type, again.wait_event().type] == [3, 3]  # persistent
        header, _ = again.call(OpCode.PING, xid=jute.XID_PING)
        assert header.xid == jute.XID_PING and header.err == 0
        header, _ = again.call(OpCode.CLOSE_SESSION)
        assert header.err == 0
    kz.delete("/sw")


def test_null_data_reads_back_null_and_empty_data_empty(kz: KazooClient) -> None:
    """kazoo's own test_create_null_data and test_set_null_data: null is not empty."""
    kz.create("/nulldata", None)
    kz.create("/emptydata", b"")
    assert kz.get("/nulldata")[0] is None and kz.get("/emptydata")[0] == b""
    kz.set("/emptydata", None)
    data, stat = kz.get("/emptydata")
    assert data is None and stat.data_length == 0 and stat.version == 1
