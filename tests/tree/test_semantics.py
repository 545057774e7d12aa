"""ZooKeeper semantics of the replicated state machine, driven through prepare → Txn → apply."""

from __future__ import annotations

import msgpack
import pytest

from zabby.errors import Err, InvariantError, ZabbyError
from zabby.opcodes import (
    CONTAINER_OWNER,
    TTL_MAX_MS,
    CreateMode,
    EventType,
    OpCode,
    owner_ttl_ms,
    ttl_owner,
)
from zabby.tree import acl as acls
from zabby.tree.datatree import DataTree
from zabby.tree.prep import PrepLimits
from zabby.tree.txns import Txn, decode_txn, encode_txn, make_zxid, txn_paths, zxid_counter, zxid_epoch, zxid_hex

from .harness import OPEN, Harness

# Stat field indexes (jute order)
CZXID, MZXID, CTIME, MTIME, VERSION, CVERSION, AVERSION, OWNER, DATALEN, NUMCHILDREN, PZXID = range(11)

CREATED, DELETED, CHANGED, CHILD = (
    EventType.NODE_CREATED,
    EventType.NODE_DELETED,
    EventType.NODE_DATA_CHANGED,
    EventType.NODE_CHILDREN_CHANGED,
)

BOB = acls.digest("bob", "pw")
BOB_IDS = [("ip", "127.0.0.1"), ("digest", BOB)]


@pytest.fixture
def h() -> Harness:
    return Harness()


def stat(h: Harness, path: str) -> tuple[int, ...]:
    node = h.tree.get(path)
    assert node is not None, path
    return node.stat()


def code_of(fn, *args, **kwargs) -> Err:
    with pytest.raises(ZabbyError) as info:
        fn(*args, **kwargs)
    return info.value.code


# ------------------------------------------------------------------ system nodes


def test_system_nodes_exist(h: Harness) -> None:
    for path in ("/", "/zookeeper", "/zookeeper/config", "/zookeeper/quota"):
        assert h.tree.get(path) is not None
    assert set(h.tree.get("/").listing()) == {"zookeeper"}
    assert set(h.tree.get("/zookeeper").listing()) == {"config", "quota"}
    assert h.tree.get("/zookeeper/config").acl == acls.READ_ACL_UNSAFE
    # ZooKeeper's addConfigNode sets that ACL with version -1, which becomes the aversion
    assert h.tree.get("/zookeeper/config").stat()[AVERSION] == -1
    assert h.tree.get("/zookeeper/quota").stat()[AVERSION] == 0


@pytest.mark.parametrize("path", ["/", "/zookeeper", "/zookeeper/config", "/zookeeper/quota"])
def test_system_nodes_cannot_be_deleted(h: Harness, path: str) -> None:
    su = h.caller(superuser=True)
    assert code_of(h.prepare, OpCode.DELETE, (path, -1)) == Err.BADARGUMENTS
    assert code_of(h.prepare, OpCode.DELETE, (path, -1), su) == Err.BADARGUMENTS
    result, _ = h.multi([(OpCode.DELETE, path, -1)])
    assert result == [(OpCode.ERROR, Err.BADARGUMENTS, None)]
    assert h.tree.get(path) is not None


def test_system_nodes_cannot_be_recreated(h: Harness) -> None:
    assert code_of(h.create, "/zookeeper") == Err.NODEEXISTS
    assert code_of(h.create, "/zookeeper/config") == Err.NODEEXISTS
    assert code_of(h.create, "/") == Err.NODEEXISTS


def test_config_node_is_read_only(h: Harness) -> None:
    assert code_of(h.set_data, "/zookeeper/config", b"x") == Err.NOAUTH
    assert code_of(h.create, "/zookeeper/config/x") == Err.NOAUTH
    assert code_of(h.set_acl, "/zookeeper/config", OPEN) == Err.NOAUTH
    # the superuser (reconfig) may write it
    h.set_data("/zookeeper/config", b"server.1=a:1:2", caller=h.caller(superuser=True))
    assert h.tree.get("/zookeeper/config").data == b"server.1=a:1:2"


# ------------------------------------------------------------------ create


def test_create_persistent_stat(h: Harness) -> None:
    root_before = stat(h, "/")
    txn = h.prepare(OpCode.CREATE, ("/a", b"hello", OPEN, 0, None))
    assert txn.type == OpCode.CREATE
    (path, st), events = h.apply(txn)
    assert path == "/a"
    assert st == stat(h, "/a")
    z = txn.zxid
    assert (st[CZXID], st[MZXID], st[PZXID]) == (z, z, z)
    assert st[CTIME] == st[MTIME] == txn.time_ms
    assert (st[VERSION], st[CVERSION], st[AVERSION], st[OWNER]) == (0, 0, 0, 0)
    assert (st[DATALEN], st[NUMCHILDREN]) == (5, 0)
    root = stat(h, "/")
    assert root[CVERSION] == root_before[CVERSION] + 1
    assert root[NUMCHILDREN] == root_before[NUMCHILDREN] + 1
    assert root[PZXID] == z
    assert root[MZXID] == root_before[MZXID]  # children changes do not touch mzxid
    assert root[VERSION] == root_before[VERSION]
    assert events == [(CREATED, "/a"), (CHILD, "/")]
    assert h.tree.get("/a").data == b"hello"


@pytest.mark.parametrize(("op", "mode", "ttl"), [
    (OpCode.CREATE2, CreateMode.PERSISTENT, None), (OpCode.CREATE2, CreateMode.EPHEMERAL, None),
    (OpCode.CREATE2, CreateMode.PERSISTENT_SEQUENTIAL, None), (OpCode.CREATE_CONTAINER, CreateMode.CONTAINER, None),
    (OpCode.CREATE_TTL, CreateMode.PERSISTENT_WITH_TTL, 5000),
])  # fmt: skip
def test_a_create_answers_the_stat_its_node_has(h: Harness, op: int, mode: CreateMode, ttl: int | None) -> None:
    h.open_session(0x77)
    txn = h.prepare(op, ("/n", b"data", OPEN, int(mode), ttl), h.caller(0x77))
    assert txn.type == OpCode.CREATE
    (path, st), _ = h.apply(txn)
    assert st == stat(h, path)


def test_create2_and_nested(h: Harness) -> None:
    assert h.create("/a", op=OpCode.CREATE2) == "/a"
    assert h.create("/a/b") == "/a/b"
    assert set(h.tree.get("/a").listing()) == {"b"}
    assert stat(h, "/a")[CVERSION] == 1
    assert stat(h, "/a")[NUMCHILDREN] == 1


def test_create_ephemeral_owner(h: Harness) -> None:
    h.open_session(0x1234)
    path = h.create("/e", mode=CreateMode.EPHEMERAL, caller=h.caller(0x1234))
    assert stat(h, path)[OWNER] == 0x1234
    assert h.tree.ephemerals == {0x1234: {"/e"}}
    assert h.tree.ephemeral_count() == 1
    seq = h.create("/es-", mode=CreateMode.EPHEMERAL_SEQUENTIAL, caller=h.caller(0x1234))
    assert stat(h, seq)[OWNER] == 0x1234
    assert h.tree.ephemerals[0x1234] == {"/e", seq}


def test_no_children_for_ephemerals(h: Harness) -> None:
    h.create("/e", mode=CreateMode.EPHEMERAL, caller=h.caller(7))
    for mode in (CreateMode.PERSISTENT, CreateMode.EPHEMERAL, CreateMode.PERSISTENT_SEQUENTIAL, CreateMode.CONTAINER):
        assert code_of(h.create, "/e/c", mode=mode, caller=h.caller(7)) == Err.NOCHILDRENFOREPHEMERALS
    # also when the ephemeral parent is still only pending
    h.prepare(OpCode.CREATE, ("/p", b"", OPEN, int(CreateMode.EPHEMERAL), None), h.caller(7))
    assert code_of(h.prepare, OpCode.CREATE, ("/p/c", b"", OPEN, 0, None)) == Err.NOCHILDRENFOREPHEMERALS


def test_sequential_suffix_from_parent_cversion(h: Harness) -> None:
    h.create("/q")
    assert h.create("/q/n-", mode=CreateMode.PERSISTENT_SEQUENTIAL) == "/q/n-0000000000"
    h.create("/q/plain")
    assert h.create("/q/n-", mode=CreateMode.PERSISTENT_SEQUENTIAL) == "/q/n-0000000002"
    # a delete shows in the Stat's cversion, not in the suffix: ZooKeeper keeps a count of
    # creates and reports 2 × creates − children (DataNode.copyStat)
    h.delete("/q/plain")
    assert stat(h, "/q")[CVERSION] == 4
    assert h.create("/q/n-", mode=CreateMode.EPHEMERAL_SEQUENTIAL, caller=h.caller(9)) == "/q/n-0000000003"
    # trailing slash: the name is only the counter
    assert h.create("/q/", mode=CreateMode.PERSISTENT_SEQUENTIAL) == "/q/0000000004"
    # the counter is the parent's, not the prefix's
    assert h.create("/q/other-", mode=CreateMode.PERSISTENT_SEQUENTIAL) == "/q/other-0000000005"
    assert h.create("/root-", mode=CreateMode.PERSISTENT_SEQUENTIAL).startswith("/root-00000000")


def test_sequential_counter_wraps(h: Harness) -> None:
    h.create("/w")
    h.tree.get("/w").cversion = 2**31 - 1
    assert h.create("/w/s", mode=CreateMode.PERSISTENT_SEQUENTIAL) == "/w/s2147483647"
    assert h.create("/w/s", mode=CreateMode.PERSISTENT_SEQUENTIAL) == "/w/s-2147483648"


def test_sequential_pipelined_prepares_get_distinct_suffixes(h: Harness) -> None:
    h.create("/q")
    txns = [h.prepare(OpCode.CREATE, ("/q/s-", b"", OPEN, int(CreateMode.PERSISTENT_SEQUENTIAL), None)) for _ in range(3)]
    names = [txn.body[0] for txn in txns]
    assert names == ["/q/s-0000000000", "/q/s-0000000001", "/q/s-0000000002"]
    for txn in txns:
        h.apply(txn)
    assert set(h.tree.get("/q").listing()) == {"s-0000000000", "s-0000000001", "s-0000000002"}
    assert stat(h, "/q")[CVERSION] == 3


def test_sequential_name_collision_is_node_exists(h: Harness) -> None:
    h.create("/q")
    h.create("/q/s0000000001")
    # cversion is now 1 → s0000000001 exists
    assert code_of(h.create, "/q/s", mode=CreateMode.PERSISTENT_SEQUENTIAL) == Err.NODEEXISTS


def test_container_owner(h: Harness) -> None:
    path = h.create("/c", mode=CreateMode.CONTAINER, op=OpCode.CREATE_CONTAINER)
    assert h.tree.get(path).ephemeral_owner == CONTAINER_OWNER == -(2**63)
    assert stat(h, path)[OWNER] == 0  # a Stat shows only sessions as owners (DataNode.copyStat)
    assert h.tree.containers == {"/c"}
    h.create("/c/child")  # containers may have children
    h.delete("/c/child")
    _, events = h.run(OpCode.DELETE_CONTAINER, ("/c",))
    assert events == [(DELETED, "/c"), (CHILD, "/")]
    assert h.tree.containers == set()


def test_ttl_owner(h: Harness) -> None:
    path = h.create("/t", mode=CreateMode.PERSISTENT_WITH_TTL, ttl=5000, op=OpCode.CREATE_TTL)
    assert stat(h, path)[OWNER] == 0  # a Stat shows only sessions as owners (DataNode.copyStat)
    owner = h.tree.get(path).ephemeral_owner
    assert owner == ttl_owner(5000)
    assert owner == 0xFF00000000001388 - 2**64  # ZooKeeper's EphemeralType.TTL encoding, as a signed long
    assert owner_ttl_ms(owner) == 5000
    assert owner_ttl_ms(CONTAINER_OWNER) is None
    assert owner_ttl_ms(0) is None
    assert owner_ttl_ms(12345) is None
    assert h.tree.ttl_nodes == {"/t"}
    seq = h.create("/t/s-", mode=CreateMode.PERSISTENT_SEQUENTIAL_WITH_TTL, ttl=TTL_MAX_MS, op=OpCode.CREATE_TTL)
    assert seq == "/t/s-0000000000"
    assert owner_ttl_ms(h.tree.get(seq).ephemeral_owner) == TTL_MAX_MS
    h.delete(seq)
    h.run(OpCode.DELETE_CONTAINER, ("/t",))
    assert h.tree.ttl_nodes == set()


@pytest.mark.parametrize(
    ("op", "mode", "ttl"),
    [
        (OpCode.CREATE_TTL, CreateMode.PERSISTENT_WITH_TTL, 0),
        (OpCode.CREATE_TTL, CreateMode.PERSISTENT_WITH_TTL, -5),
        (OpCode.CREATE_TTL, CreateMode.PERSISTENT_WITH_TTL, TTL_MAX_MS + 1),
        (OpCode.CREATE_TTL, CreateMode.PERSISTENT_WITH_TTL, None),
        (OpCode.CREATE_TTL, CreateMode.PERSISTENT, None),
        (OpCode.CREATE_CONTAINER, CreateMode.PERSISTENT, None),
        (OpCode.CREATE, CreateMode.PERSISTENT, 1000),
        (OpCode.CREATE, 7, None),
        (OpCode.CREATE, -1, None),
        (OpCode.CREATE, "0", None),
    ],
)
def test_bad_create_modes(h: Harness, op: int, mode: int, ttl: int | None) -> None:
    assert code_of(h.prepare, op, ("/x", b"", OPEN, mode, ttl)) == Err.BADARGUMENTS
    assert h.tree.get("/x") is None and h.zxid == 0


def test_ttl_disabled_is_unimplemented() -> None:
    h = Harness(PrepLimits(ttl_enabled=False))
    assert code_of(h.create, "/t", mode=CreateMode.PERSISTENT_WITH_TTL, ttl=10, op=OpCode.CREATE_TTL) == Err.UNIMPLEMENTED


def test_create_errors(h: Harness) -> None:
    h.create("/a")
    assert code_of(h.create, "/a") == Err.NODEEXISTS
    assert code_of(h.create, "/missing/child") == Err.NONODE
    assert code_of(h.create, "/a/") == Err.BADARGUMENTS
    assert code_of(h.create, "a") == Err.BADARGUMENTS
    assert code_of(h.create, "/a/.") == Err.BADARGUMENTS
    # as ZooKeeper's prep does, a create looks its parent up (and checks its ACL) before it
    # checks the whole path: "/a/../b" has the parent "/a/..", which is not there
    assert code_of(h.create, "/a/../b") == Err.NONODE
    assert code_of(h.create, "/a\0b") == Err.BADARGUMENTS  # a NUL is refused first
    assert code_of(h.create, "/x", data="text") == Err.BADARGUMENTS
    assert code_of(h.create, "/x", acl=[]) == Err.INVALIDACL
    assert code_of(h.create, "/x", acl=acls.CREATOR_ALL_ACL) == Err.INVALIDACL
    assert h.zxid == 1  # failed requests consume no zxid
    assert set(h.tree.nodes) == {"/", "/zookeeper", "/zookeeper/config", "/zookeeper/quota", "/a"}


def test_data_size_limit() -> None:
    h = Harness(PrepLimits(data_bytes_max=10))
    h.create("/ok", data=b"x" * 10)
    assert code_of(h.create, "/big", data=b"x" * 11) == Err.BADARGUMENTS
    assert code_of(h.set_data, "/ok", b"x" * 11) == Err.BADARGUMENTS
    assert Harness().prep.limits.data_bytes_max == 1024 * 1024


def test_pending_creates_are_visible_to_prep(h: Harness) -> None:
    t1 = h.prepare(OpCode.CREATE, ("/a", b"", OPEN, 0, None))
    t2 = h.prepare(OpCode.CREATE, ("/a/b", b"", OPEN, 0, None))
    assert code_of(h.prepare, OpCode.CREATE, ("/a", b"", OPEN, 0, None)) == Err.NODEEXISTS
    assert code_of(h.prepare, OpCode.DELETE, ("/a", -1)) == Err.NOTEMPTY
    t3 = h.prepare(OpCode.SET_DATA, ("/a/b", b"1", 0))
    assert code_of(h.prepare, OpCode.SET_DATA, ("/a/b", b"2", 0)) == Err.BADVERSION
    t4 = h.prepare(OpCode.SET_DATA, ("/a/b", b"2", 1))
    for txn in (t1, t2, t3, t4):
        h.apply(txn)
    assert h.prep.pending == {}
    assert h.tree.get("/a/b").data == b"2"
    assert stat(h, "/a/b")[VERSION] == 2


def test_pending_delete_then_recreate(h: Harness) -> None:
    h.create("/a", data=b"old")
    t1 = h.prepare(OpCode.DELETE, ("/a", 0))
    assert code_of(h.prepare, OpCode.SET_DATA, ("/a", b"", -1)) == Err.NONODE
    t2 = h.prepare(OpCode.CREATE, ("/a", b"new", OPEN, 0, None))
    h.apply(t1)
    assert h.prep.view("/a") is not None  # still pending as created
    h.apply(t2)
    assert h.tree.get("/a").data == b"new"
    assert stat(h, "/a")[CZXID] == t2.zxid


# ------------------------------------------------------------------ delete / setData / setACL


def test_delete(h: Harness) -> None:
    h.create("/a")
    h.create("/a/b", data=b"x")
    before = stat(h, "/a")
    assert code_of(h.delete, "/a") == Err.NOTEMPTY
    assert code_of(h.delete, "/a/b", 3) == Err.BADVERSION
    assert code_of(h.delete, "/a/zz") == Err.NONODE
    assert code_of(h.delete, "/zz/zz") == Err.NONODE
    h.set_data("/a/b", b"y")
    assert code_of(h.delete, "/a/b", 0) == Err.BADVERSION
    txn = h.prepare(OpCode.DELETE, ("/a/b", 1))
    _, events = h.apply(txn)
    assert events == [(DELETED, "/a/b"), (CHILD, "/a")]
    after = stat(h, "/a")
    assert after[NUMCHILDREN] == 0
    assert after[CVERSION] == before[CVERSION] + 1  # a Stat's cversion counts deletes too
    assert h.tree.get("/a").cversion == 1  # ... the count kept (the sequential suffix) does not
    assert after[PZXID] == txn.zxid
    assert after[MZXID] == before[MZXID]
    h.delete("/a", -1)
    assert h.tree.get("/a") is None and "a" not in h.tree.get("/").listing()


def test_set_data_stat(h: Harness) -> None:
    h.create("/a", data=b"1")
    created = stat(h, "/a")
    txn = h.prepare(OpCode.SET_DATA, ("/a", b"four", 0))
    assert txn.body == ("/a", b"four", 1)
    st, events = h.apply(txn)
    assert events == [(CHANGED, "/a")]
    assert st == stat(h, "/a")
    assert st[VERSION] == 1 and st[MZXID] == txn.zxid and st[MTIME] == txn.time_ms
    assert st[CZXID] == created[CZXID] and st[CTIME] == created[CTIME] and st[PZXID] == created[PZXID]
    assert st[DATALEN] == 4 and st[CVERSION] == 0 and st[AVERSION] == 0
    assert code_of(h.set_data, "/a", b"", 0) == Err.BADVERSION
    assert h.set_data("/a", b"", 1)[VERSION] == 2
    assert h.set_data("/a", b"z", -1)[VERSION] == 3
    assert code_of(h.set_data, "/nope", b"") == Err.NONODE


def test_a_set_data_nobody_here_answers_changes_the_tree_alike_and_makes_no_stat() -> None:
    answered, unanswered = Harness(), Harness()
    for h in (answered, unanswered):
        h.create("/a", data=b"1")
        h.create("/a/child")
    txn = answered.prepare(OpCode.SET_DATA, ("/a", b"four", 0))
    st, events = answered.tree.apply(txn)
    assert unanswered.tree.apply(txn, answered=False) == (None, events)
    assert st == stat(answered, "/a")
    assert answered.tree.content_hash() == unanswered.tree.content_hash()
    assert answered.tree.digest == unanswered.tree.digest == unanswered.tree.compute_digest()
    assert answered.tree.data_size == unanswered.tree.data_size


def test_a_create_nobody_here_answers_changes_the_tree_alike_and_makes_no_stat() -> None:
    answered, unanswered = Harness(), Harness()
    for h in (answered, unanswered):
        h.create("/a")
    txn = answered.prepare(OpCode.CREATE, ("/a/b", b"data", OPEN, 0, None))
    (path, st), events = answered.tree.apply(txn)
    assert unanswered.tree.apply(txn, answered=False) == (("/a/b", None), events)
    assert path == "/a/b" and st == stat(answered, "/a/b")
    assert answered.tree.content_hash() == unanswered.tree.content_hash()
    assert answered.tree.digest == unanswered.tree.digest == unanswered.tree.compute_digest()


@pytest.mark.parametrize("txn", [Txn(1, 0, 0, 0, {"x": 1}, ("/a",)),  # type: ignore[arg-type]  # a map where the type goes
                                 Txn(1, 0, 0, 0, OpCode.MULTI, ((({"x": 1}, ("/a",)),),))])  # fmt: skip
def test_a_txn_of_an_unhashable_type_is_refused_as_no_txn(txn: Txn) -> None:
    """A log record whose type decodes to a map (its CRC right: written so) is an
    InvariantError, which replay and the export turn into their own errors, not a TypeError."""
    with pytest.raises(InvariantError):
        DataTree().apply(txn)


def test_set_acl_stat(h: Harness) -> None:
    h.create("/a")
    before = stat(h, "/a")
    txn = h.prepare(OpCode.SET_ACL, ("/a", acls.READ_ACL_UNSAFE, 0))
    st, events = h.apply(txn)
    assert events == []
    assert st[AVERSION] == 1
    assert st[MZXID] == before[MZXID] and st[VERSION] == 0
    assert h.tree.get("/a").acl == acls.READ_ACL_UNSAFE
    # READ-only now: ADMIN is needed for setACL, so even the right aversion is refused
    assert code_of(h.set_acl, "/a", OPEN, 1) == Err.NOAUTH
    su = h.caller(superuser=True)
    assert code_of(h.set_acl, "/a", OPEN, 0, caller=su) == Err.BADVERSION
    assert h.set_acl("/a", OPEN, 1, caller=su)[AVERSION] == 2
    assert h.set_acl("/a", OPEN, -1)[AVERSION] == 3
    assert code_of(h.set_acl, "/a", [], -1) == Err.INVALIDACL
    assert code_of(h.set_acl, "/nope", OPEN) == Err.NONODE


# ------------------------------------------------------------------ ACL enforcement


def test_noauth_with_digest_acl(h: Harness) -> None:
    anon = h.caller(1)
    bob = h.caller(2, BOB_IDS)
    h.create("/s", acl=[(acls.ALL, "digest", BOB)], caller=bob)
    assert h.tree.get("/s").acl == ((acls.ALL, "digest", BOB),)
    assert code_of(h.set_data, "/s", b"x", caller=anon) == Err.NOAUTH
    assert code_of(h.create, "/s/c", caller=anon) == Err.NOAUTH
    assert code_of(h.set_acl, "/s", OPEN, caller=anon) == Err.NOAUTH
    result, _ = h.multi([(OpCode.CHECK, "/s", 0)], caller=anon)
    assert result == [(OpCode.ERROR, Err.NOAUTH, None)]
    h.set_data("/s", b"x", caller=bob)
    h.create("/s/c", caller=bob)
    # delete needs DELETE on the parent, not on the node; ZooKeeper checks it before it
    # looks the node up, so a missing node under such a parent is NOAUTH too
    assert code_of(h.delete, "/s/c", caller=anon) == Err.NOAUTH
    assert code_of(h.delete, "/s/missing", caller=anon) == Err.NOAUTH
    h.delete("/s/c", caller=bob)
    h.create("/s/c", caller=h.caller(3, superuser=True))
    # the node itself being locked does not stop its deletion when the parent allows it
    h.create("/open")
    h.create("/open/locked", acl=[(acls.READ, "digest", BOB)])
    h.delete("/open/locked", caller=anon)


@pytest.mark.parametrize(
    ("perms", "allowed"),
    [
        (acls.READ, set()),
        (acls.WRITE, {"set_data"}),
        (acls.CREATE, {"create"}),
        (acls.DELETE, {"delete_child"}),
        (acls.ADMIN, {"set_acl"}),
        (acls.ALL, {"set_data", "create", "delete_child", "set_acl"}),
    ],
)
def test_each_permission_bit(perms: int, allowed: set[str]) -> None:
    h = Harness()
    su = h.caller(9, superuser=True)
    h.create("/n", acl=[(acls.ALL, "world", "anyone")])
    h.create("/n/child", caller=su)
    h.set_acl("/n", [(perms, "world", "anyone")], caller=su)
    attempts = {
        "set_data": lambda: h.set_data("/n", b"x"),
        "create": lambda: h.create("/n/new"),
        "delete_child": lambda: h.delete("/n/child"),
        "set_acl": lambda: h.set_acl("/n", [(perms, "world", "anyone")]),
    }
    for name, attempt in attempts.items():
        if name in allowed:
            attempt()
        else:
            assert code_of(attempt) == Err.NOAUTH, name


def test_ip_acl(h: Harness) -> None:
    h.create("/lan", acl=[(acls.ALL, "ip", "10.0.0.0/8")], caller=h.caller(superuser=True))
    assert code_of(h.set_data, "/lan", b"x", caller=h.caller(1, [("ip", "192.168.0.1")])) == Err.NOAUTH
    h.set_data("/lan", b"x", caller=h.caller(1, [("ip", "10.9.8.7")]))


def test_creator_all_acl_expands_to_the_creator(h: Harness) -> None:
    bob = h.caller(2, BOB_IDS)
    h.create("/mine", acl=acls.CREATOR_ALL_ACL, caller=bob)
    assert h.tree.get("/mine").acl == ((acls.ALL, "digest", BOB),)
    assert code_of(h.set_data, "/mine", b"x") == Err.NOAUTH
    h.set_data("/mine", b"x", caller=bob)


# ------------------------------------------------------------------ multi


def test_multi_success(h: Harness) -> None:
    h.create("/m", data=b"0")
    before_root = stat(h, "/")
    txn = h.prepare(
        OpCode.MULTI,
        (
            [
                (OpCode.CHECK, "/m", 0),
                (OpCode.CREATE, "/m/a", b"a", OPEN, 0, None),
                (OpCode.CREATE, "/m/a/b", b"b", OPEN, 0, None),
                (OpCode.SET_DATA, "/m", b"1", 0),
                (OpCode.CHECK, "/m", 1),  # sees the earlier setData of this multi
                (OpCode.CREATE, "/m/s-", b"", OPEN, int(CreateMode.PERSISTENT_SEQUENTIAL), None),
                (OpCode.DELETE, "/m/a/b", 0),
            ],
        ),
    )
    assert txn.type == OpCode.MULTI
    result, events = h.apply(txn)
    assert [entry[:2] for entry in result] == [
        (OpCode.CHECK, 0),
        (OpCode.CREATE, 0),
        (OpCode.CREATE, 0),
        (OpCode.SET_DATA, 0),
        (OpCode.CHECK, 0),
        (OpCode.CREATE, 0),
        (OpCode.DELETE, 0),
    ]
    assert result[1][2][0] == "/m/a"
    assert result[5][2][0] == "/m/s-0000000001"
    assert result[3][2][VERSION] == 1
    assert events == [
        (CREATED, "/m/a"), (CHILD, "/m"),
        (CREATED, "/m/a/b"), (CHILD, "/m/a"),
        (CHANGED, "/m"),
        (CREATED, "/m/s-0000000001"), (CHILD, "/m"),
        (DELETED, "/m/a/b"), (CHILD, "/m/a"),
    ]  # fmt: skip
    m = stat(h, "/m")
    assert m[VERSION] == 1 and m[CVERSION] == 2 and m[NUMCHILDREN] == 2 and m[MZXID] == txn.zxid and m[PZXID] == txn.zxid
    a = stat(h, "/m/a")
    assert a[CVERSION] == 2 and a[NUMCHILDREN] == 0 and a[CZXID] == txn.zxid  # /m/a/b created, then deleted
    assert stat(h, "/") == before_root
    assert h.prep.pending == {}


@pytest.mark.parametrize(
    ("ops", "codes"),
    [
        (
            [(OpCode.CREATE, "/n1", b"", OPEN, 0, None), (OpCode.CREATE, "/m", b"", OPEN, 0, None), (OpCode.SET_DATA, "/m", b"", -1)],
            [Err.OK, Err.NODEEXISTS, Err.RUNTIMEINCONSISTENCY],
        ),
        (
            [(OpCode.CHECK, "/m", 5), (OpCode.CREATE, "/n1", b"", OPEN, 0, None)],
            [Err.BADVERSION, Err.RUNTIMEINCONSISTENCY],
        ),
        (
            [(OpCode.CREATE, "/n1", b"", OPEN, 0, None), (OpCode.CREATE, "/n1/x", b"", OPEN, 0, None), (OpCode.DELETE, "/n1", -1)],
            [Err.OK, Err.OK, Err.NOTEMPTY],
        ),
        (
            [(OpCode.DELETE, "/m", -1), (OpCode.SET_DATA, "/m", b"", -1), (OpCode.CHECK, "/m", 0), (OpCode.CHECK, "/", -1)],
            [Err.OK, Err.NONODE, Err.RUNTIMEINCONSISTENCY, Err.RUNTIMEINCONSISTENCY],
        ),
        ([(OpCode.SET_ACL, "/m", OPEN, -1)], [Err.UNIMPLEMENTED]),
        ([(OpCode.CREATE, "/n1", b"", OPEN, 0, None), (OpCode.GET_DATA, "/m")], [Err.OK, Err.UNIMPLEMENTED]),
        ([(OpCode.CREATE, "/n1"), (OpCode.CHECK, "/m", 0)], [Err.BADARGUMENTS, Err.RUNTIMEINCONSISTENCY]),
        ([(OpCode.CHECK, "/m", 0), ()], [Err.OK, Err.BADARGUMENTS]),
        ([(OpCode.CHECK, "/m", 0), "junk"], [Err.OK, Err.BADARGUMENTS]),
        ([(OpCode.CREATE, "/e", b"", OPEN, 1, None), (OpCode.CREATE, "/e/c", b"", OPEN, 0, None)], [Err.OK, Err.NOCHILDRENFOREPHEMERALS]),
        ([(OpCode.CREATE, "bad", b"", OPEN, 0, None)], [Err.BADARGUMENTS]),
        ([(OpCode.CREATE, "/n1", b"", [], 0, None)], [Err.INVALIDACL]),
    ],
)
def test_multi_failure_codes(h: Harness, ops: list, codes: list[Err]) -> None:
    h.create("/m")
    digest = h.tree.content_hash()
    zxid = h.zxid
    txn = h.prepare(OpCode.MULTI, (ops,))
    assert txn.zxid == zxid + 1  # a failed multi is still a txn
    assert all(sub_type == OpCode.ERROR for sub_type, _ in txn.body[0])
    assert txn_paths(txn.type, txn.body) == []
    assert h.prep.pending == {}  # nothing of the failed multi leaks into later prepares
    result, events = h.apply(txn)
    assert result == [(OpCode.ERROR, code, None) for code in codes]
    assert events == []
    assert h.tree.content_hash() == digest
    assert h.tree.last_zxid == txn.zxid
    # the ops of the failed multi were not applied, and a retry of a valid one still works
    assert h.tree.get("/n1") is None
    h.create("/n1")


def test_failed_multi_does_not_disturb_pending(h: Harness) -> None:
    t1 = h.prepare(OpCode.CREATE, ("/a", b"", OPEN, 0, None))
    t2 = h.prepare(OpCode.MULTI, ([(OpCode.DELETE, "/a", -1), (OpCode.CREATE, "/a", b"", OPEN, 0, None), (OpCode.CHECK, "/zz", -1)],))
    t3 = h.prepare(OpCode.SET_DATA, ("/a", b"x", 0))  # /a still pending-created with version 0
    for txn in (t1, t2, t3):
        h.apply(txn)
    assert stat(h, "/a")[VERSION] == 1
    assert stat(h, "/a")[CZXID] == t1.zxid


def test_empty_multi(h: Harness) -> None:
    result, events = h.multi([])
    assert result == [] and events == []
    assert code_of(h.prepare, OpCode.MULTI, ("notalist",)) == Err.BADARGUMENTS


def test_non_write_op_is_unimplemented(h: Harness) -> None:
    assert code_of(h.prepare, OpCode.GET_DATA, ("/",)) == Err.UNIMPLEMENTED


# ------------------------------------------------------------------ sessions


def test_sessions_table(h: Harness) -> None:
    assert h.open_session(0x51, 4000, b"pw") == 0x51
    assert h.tree.sessions == {0x51: (4000, b"pw")}
    h.close_session(0x51)
    assert h.tree.sessions == {}


def test_close_session_removes_ephemerals(h: Harness) -> None:
    s1, s2 = 0x100, 0x200
    h.open_session(s1)
    h.open_session(s2)
    h.create("/app")
    h.create("/app/e1", mode=CreateMode.EPHEMERAL, caller=h.caller(s1))
    h.create("/app/e2", mode=CreateMode.EPHEMERAL_SEQUENTIAL, caller=h.caller(s1))
    h.create("/e3", mode=CreateMode.EPHEMERAL, caller=h.caller(s1))
    h.create("/app/other", mode=CreateMode.EPHEMERAL, caller=h.caller(s2))
    h.create("/app/p", caller=h.caller(s1))  # persistent: survives
    app_before = stat(h, "/app")
    txn = h.prepare_close(s1)
    assert txn.type == OpCode.CLOSE_SESSION
    assert set(txn.body[0]) == {"/app/e1", "/app/e20000000001", "/e3"}
    _, events = h.apply(txn)
    assert sorted(events) == sorted(
        [
            (DELETED, "/app/e1"), (CHILD, "/app"),
            (DELETED, "/app/e20000000001"), (CHILD, "/app"),
            (DELETED, "/e3"), (CHILD, "/"),
        ]
    )  # fmt: skip
    assert set(h.tree.get("/app").listing()) == {"other", "p"}
    assert stat(h, "/app")[PZXID] == txn.zxid
    assert stat(h, "/app")[CVERSION] == app_before[CVERSION] + 2  # two of its ephemerals went
    assert s1 not in h.tree.ephemerals and s1 not in h.tree.sessions
    assert h.tree.ephemerals == {s2: {"/app/other"}}
    assert h.prep.pending == {}


def test_close_session_includes_pending_ephemerals(h: Harness) -> None:
    s = 0x300
    h.open_session(s)
    h.create("/old", mode=CreateMode.EPHEMERAL, caller=h.caller(s))
    t1 = h.prepare(OpCode.CREATE, ("/new", b"", OPEN, int(CreateMode.EPHEMERAL), None), h.caller(s))
    t2 = h.prepare(OpCode.MULTI, ([(OpCode.CREATE, "/viamulti", b"", OPEN, int(CreateMode.EPHEMERAL), None)],), h.caller(s))
    t3 = h.prepare(OpCode.SET_DATA, ("/new", b"x", -1), h.caller(s))
    close = h.prepare_close(s)
    assert set(close.body[0]) == {"/old", "/new", "/viamulti"}
    # after the close is prepared, the nodes are gone for prep
    assert code_of(h.prepare, OpCode.SET_DATA, ("/new", b"", -1)) == Err.NONODE
    t4 = h.prepare(OpCode.CREATE, ("/new", b"again", OPEN, 0, None))
    for txn in (t1, t2, t3, close, t4):
        h.apply(txn)
    assert h.tree.get("/old") is None and h.tree.get("/viamulti") is None
    assert h.tree.get("/new").data == b"again" and stat(h, "/new")[OWNER] == 0
    assert h.tree.ephemeral_count() == 0


def test_close_session_skips_pending_deletes(h: Harness) -> None:
    s = 0x400
    h.create("/a", mode=CreateMode.EPHEMERAL, caller=h.caller(s))
    h.create("/b", mode=CreateMode.EPHEMERAL, caller=h.caller(s))
    t1 = h.prepare(OpCode.DELETE, ("/a", -1), h.caller(s))
    close = h.prepare_close(s)
    assert close.body[0] == ("/b",)
    h.apply(t1)
    _, events = h.apply(close)
    assert events == [(DELETED, "/b"), (CHILD, "/")]
    assert h.tree.ephemerals == {}


def test_close_unknown_session_is_harmless(h: Harness) -> None:
    h.create("/a")
    digest = h.tree.content_hash()
    assert h.close_session(0x999) == []
    assert h.tree.content_hash() == digest


# ------------------------------------------------------------------ apply guards, txns, snapshots


def test_apply_rejects_old_zxids(h: Harness) -> None:
    h.create("/a")
    stale = Txn(h.zxid, 1, 1, 0, OpCode.CREATE, ("/b", b"", OPEN, 0, 1))
    with pytest.raises(InvariantError):
        h.tree.apply(stale)
    with pytest.raises(InvariantError):
        h.tree.apply(Txn(h.zxid + 10, 1, 1, 0, OpCode.CREATE, ("/a", b"", OPEN, 0, 2)))  # exists
    with pytest.raises(InvariantError):
        h.tree.apply(Txn(h.zxid + 11, 1, 1, 0, OpCode.DELETE, ("/nope",)))


def test_txn_codec_and_helpers() -> None:
    txn = Txn(make_zxid(3, 7), 0x55, 9, 1234, OpCode.MULTI, (((OpCode.CREATE, ("/a", b"\x00", OPEN, 0, 1)), (OpCode.DELETE, ("/b",))),))
    assert decode_txn(encode_txn(txn)) == txn
    assert txn_paths(txn.type, txn.body) == ["/a", "/b"]
    assert txn_paths(OpCode.CLOSE_SESSION, (("/x", "/y"),)) == ["/x", "/y"]
    assert txn_paths(OpCode.CREATE_SESSION, (10, b"")) == []
    assert zxid_epoch(txn.zxid) == 3 and zxid_counter(txn.zxid) == 7
    assert zxid_hex(make_zxid(1, 0x10)) == "0x100000010"


def _populate(h: Harness) -> None:
    h.open_session(0x11, 3000, b"p1")
    h.open_session(0x22, 5000, b"p2")
    h.create("/a", data=b"A", acl=[(acls.ALL, "digest", BOB), (acls.READ, "world", "anyone")], caller=h.caller(1, BOB_IDS))
    h.create("/a/b", data=b"B", caller=h.caller(1, BOB_IDS))
    h.create("/a/b/", mode=CreateMode.PERSISTENT_SEQUENTIAL, caller=h.caller(1, BOB_IDS))
    h.create("/e", mode=CreateMode.EPHEMERAL, caller=h.caller(0x11))
    h.create("/c", mode=CreateMode.CONTAINER, op=OpCode.CREATE_CONTAINER)
    h.create("/c/t", data=b"t", mode=CreateMode.PERSISTENT_WITH_TTL, ttl=777, op=OpCode.CREATE_TTL)
    h.set_data("/a/b", b"BB")
    h.set_acl("/c", acls.READ_ACL_UNSAFE)
    h.create("/gone")
    h.delete("/gone")


def _restore(records: list) -> DataTree:
    return DataTree.from_records(records)


@pytest.mark.parametrize("through_msgpack", [False, True])
def test_snapshot_round_trip(h: Harness, through_msgpack: bool) -> None:
    _populate(h)
    records = list(h.tree.records())
    if through_msgpack:
        raw = [msgpack.packb(r, use_bin_type=True) for r in records]
        records = [msgpack.unpackb(r, raw=False) for r in raw]
    restored = _restore(records)
    assert restored.content_hash() == h.tree.content_hash()
    assert restored.last_zxid == h.tree.last_zxid
    assert restored.sessions == h.tree.sessions
    assert restored.ephemerals == h.tree.ephemerals == {0x11: {"/e"}}
    assert restored.containers == h.tree.containers == {"/c"}
    assert restored.ttl_nodes == h.tree.ttl_nodes == {"/c/t"}
    assert restored.data_size == h.tree.data_size
    assert restored.node_count() == h.tree.node_count()
    for path, node in h.tree.nodes.items():
        other = restored.get(path)
        assert other is not None and other.stat() == node.stat() and list(other.children) == list(node.children)
        assert other.acl == node.acl and other.data == node.data
    # the restored tree keeps working: same txns give the same result on both
    h2 = Harness()
    h2.tree = restored
    h2.prep.tree = restored
    h2.zxid, h2.now = h.zxid, h.now
    for hh in (h, h2):
        hh.close_session(0x11)
        hh.create("/a/b/", mode=CreateMode.PERSISTENT_SEQUENTIAL, caller=hh.caller(1, BOB_IDS))
    assert set(h.tree.get("/a/b").listing()) == {"0000000000", "0000000001"}
    assert h2.tree.content_hash() == h.tree.content_hash()


def test_null_data_is_kept_apart_from_empty_data_through_txns_and_snapshots(h: Harness) -> None:
    """ZooKeeper keeps a null znode's data null (a read gives null back), and counts it as
    empty everywhere else: Stat, sizes, quotas, the digest."""
    from zabby.server.clients.reads import get_data
    from zabby.tree.datatree import shown_data
    from zabby.tree.watches import WatchManager

    h.create("/null", None)  # type: ignore[arg-type]
    h.create("/empty", b"")
    h.create("/set", b"x")
    h.set_data("/set", None)  # type: ignore[arg-type]
    assert [shown_data(h.tree.get(p).data) for p in ("/null", "/empty", "/set")] == [None, b"", None]
    assert stat(h, "/null")[DATALEN] == stat(h, "/set")[DATALEN] == 0
    twin = Harness()  # the same writes with empty data: the same digest (as ZooKeeper's)
    twin.create("/null", b"")
    twin.create("/empty", b"")
    twin.create("/set", b"x")
    twin.set_data("/set", b"")
    assert twin.tree.digest == h.tree.digest and twin.tree.data_size == h.tree.data_size
    for records in (list(h.tree.records()), [msgpack.unpackb(msgpack.packb(r, use_bin_type=True), raw=False) for r in h.tree.records()]):
        restored = _restore(records)
        assert [shown_data(restored.get(p).data) for p in ("/null", "/empty", "/set")] == [None, b"", None]
        assert restored.digest == h.tree.digest
    reply = get_data(h.tree, WatchManager(), h.caller(1), ["/null", False])  # type: ignore[arg-type]
    assert reply[0] is None
    txn = h.prepare(OpCode.SET_DATA, ("/empty", None, -1))
    assert decode_txn(encode_txn(txn)) == txn and txn.body[1] is None  # the log keeps it null


def test_digest_sees_every_change(h: Harness) -> None:
    seen = {h.tree.content_hash()}
    h.create("/a")
    seen.add(h.tree.content_hash())
    h.set_data("/a", b"x")
    seen.add(h.tree.content_hash())
    h.set_acl("/a", acls.READ_ACL_UNSAFE)
    seen.add(h.tree.content_hash())
    h.open_session(5)
    seen.add(h.tree.content_hash())
    assert len(seen) == 5


def test_data_size_and_counts(h: Harness) -> None:
    fresh = h.tree.data_size
    h.create("/abc", data=b"12345")
    assert h.tree.data_size == fresh + len("/abc") + 5
    h.set_data("/abc", b"1")
    assert h.tree.data_size == fresh + len("/abc") + 1
    h.delete("/abc")
    assert h.tree.data_size == fresh
    h.create("/x")
    h.create("/x/y")
    h.create("/x/y/z")
    assert h.tree.count_descendants("/x") == 2
    assert h.tree.count_descendants("/") == 6
    assert h.tree.node_count() == 7
