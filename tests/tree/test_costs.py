"""What a request may cost the tree (issue 56): a txn's bytes after every expansion, a znode's
ACL entries, the ACLs and metas the tree keeps after their znodes go, a closeSession's paths."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tree.harness import OPEN, Harness
from zabby.errors import Err, ZabbyError
from zabby.opcodes import CreateMode, EventType, OpCode
from zabby.tree import acl as acls
from zabby.tree.acl import acl_cost
from zabby.tree.datatree import DataTree
from zabby.tree.prep import PrepLimits, TxnTooLarge
from zabby.tree.txns import encode_txn

AUTH = [(31, "auth", "")]


def _ids(count: int) -> list[acls.AuthId]:
    return [("ip", "127.0.0.1")] + [("digest", acls.digest(f"u{n}", f"p{n}")) for n in range(count)]


def test_a_multi_whose_auth_acl_expands_past_max_txn_bytes_is_refused_whole() -> None:
    """A 135 KB multi of 5,000 creates with the ACL ``auth``, from a session of 1,200 made-up
    digest ids, became a 270 MiB txn the server could not restart from."""
    h = Harness(PrepLimits(txn_bytes_max=64 * 1024))
    caller = h.caller(auth_ids=_ids(32))
    ops = [(OpCode.CREATE, f"/n{n}", b"", AUTH, 0, None) for n in range(100)]
    with pytest.raises(TxnTooLarge) as refused:
        h.prepare(OpCode.MULTI, (ops,), caller)
    assert refused.value.code == Err.BADARGUMENTS and "maxTxnBytes (65536)" in str(refused.value)
    assert not h.prep.pending  # nothing of it was recorded: the same creates, fewer of them, go through
    h.multi(ops[:20], caller)
    assert all(f"/n{n}" in h.tree.nodes for n in range(20))


def test_a_single_create_is_charged_for_its_expanded_acl() -> None:
    h = Harness(PrepLimits(txn_bytes_max=1000))
    with pytest.raises(TxnTooLarge):
        h.create("/big-acl", acl=AUTH, caller=h.caller(auth_ids=_ids(32)))
    assert h.prep.view("/big-acl") is None and h.create("/small-acl", acl=AUTH, caller=h.caller(auth_ids=_ids(2))) == "/small-acl"


def test_an_acl_over_max_acl_entries_is_refused() -> None:
    h = Harness(PrepLimits(acl_entries_max=8))
    many = [(31, "ip", f"10.0.0.{n}") for n in range(9)]
    with pytest.raises(ZabbyError) as refused:
        h.create("/many", acl=many)
    assert refused.value.code == Err.INVALIDACL and "maxAclEntries (8)" in str(refused.value)
    h.create("/few", acl=many[:8])
    with pytest.raises(ZabbyError, match="maxAclEntries"):  # auth, expanded into 9 ids, counts as 9
        h.set_acl("/few", AUTH, caller=h.caller(auth_ids=_ids(9)))


def test_an_acl_refused_for_its_entries_is_neither_validated_whole_nor_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """44 setACL of 18,036 ip entries each (the adversary's acl-churn): every one was validated
    whole (0.4 s of a stopped server each) and then kept in the validated-ACL cache, refused or
    not (+209 MB).  An ACL longer than maxAclEntries is refused as sent, and the cache keeps
    small ACLs only."""
    monkeypatch.setattr(acls, "_FIXED_CACHE", {})
    h = Harness(PrepLimits(acl_entries_max=256))
    h.create("/victim")
    admin = h.caller(superuser=True)
    validated: list[int] = []
    real_fix_acl = acls.fix_acl
    monkeypatch.setattr(acls, "fix_acl", lambda acl, *a, **k: validated.append(len(acl)) or real_fix_acl(acl, *a, **k))
    for round_ in range(3):
        with pytest.raises(ZabbyError, match=r"an ACL of 18036 entries, more than maxAclEntries \(256\)"):
            h.set_acl("/victim", [(31, "ip", f"10.{round_}.{n // 250}.{n % 250}") for n in range(18_036)], caller=admin)
    assert validated == []
    for round_ in range(3):  # within the bound: validated, but too large to keep
        h.set_acl("/victim", [(31, "ip", f"10.{round_}.{n // 250}.{n % 250}") for n in range(200)], caller=admin)
    assert validated == [200] * 3 and all(len(acl) <= 16 for acl in acls._FIXED_CACHE)


def _ops() -> st.SearchStrategy[tuple[Any, ...]]:
    paths = st.sampled_from(["/a", "/b", "/a/c", "/é", "/" + "x" * 300])
    data = st.one_of(st.none(), st.binary(max_size=600), st.text(max_size=200).map(str.encode))
    acl = st.one_of(st.just(OPEN), st.just(AUTH), st.lists(st.tuples(st.integers(0, 31), st.just("ip"), st.sampled_from(["10.1.1.1", "::1", "10.0.0.0/8"])), min_size=1, max_size=6))
    create = st.tuples(st.just(OpCode.CREATE), paths, data, acl, st.sampled_from([0, int(CreateMode.PERSISTENT_SEQUENTIAL)]), st.none())
    set_data = st.tuples(st.just(OpCode.SET_DATA), paths, data, st.just(-1))
    set_acl = st.tuples(st.just(OpCode.SET_ACL), paths, acl, st.just(-1))
    delete = st.tuples(st.just(OpCode.DELETE), paths, st.just(-1))
    single = st.one_of(create, set_data, set_acl, delete)
    multi = st.lists(st.one_of(create, set_data, delete), min_size=1, max_size=12).map(lambda ops: (OpCode.MULTI, ops))
    return st.one_of(single, multi)


@settings(max_examples=150, deadline=None)
@given(st.lists(_ops(), max_size=25), st.integers(0, 32), st.integers(1200, 8192))
def test_every_txn_prep_lets_through_packs_within_max_txn_bytes(ops: list[tuple[Any, ...]], ids: int, limit: int) -> None:
    """What prep charges a txn is no less than what it packs to: the log, the peers and the
    snapshots never meet a txn over the limit."""
    h = Harness(PrepLimits(txn_bytes_max=limit))
    caller = h.caller(auth_ids=_ids(ids))
    for op, *args in ops:
        try:
            txn = h.prepare(op, tuple(args) if op != OpCode.MULTI else (args[0],), caller)
        except ZabbyError:
            continue
        assert len(encode_txn(txn)) <= limit
        h.apply(txn)


def test_acls_and_metas_are_forgotten_with_their_last_znode() -> None:
    """50 setACL of fresh 30,000-entry ACLs kept 559 MB after their znode was deleted, and
    after a restart: the interning table never forgot."""
    h = Harness(PrepLimits(acl_entries_max=256))
    before = (dict(h.tree.shared.acls), dict(h.tree.shared.metas))
    h.create("/victim")
    for round_ in range(50):
        h.set_acl("/victim", [(31, "ip", f"10.{round_}.{n // 250}.{n % 250}") for n in range(256)], caller=h.caller(superuser=True))
    h.create("/ephemeral", acl=[(1, "ip", "10.9.9.9")], mode=CreateMode.EPHEMERAL, caller=h.caller(session_id=7))
    assert len(h.tree.shared.acls) == len(before[0]) + 2
    kept = DataTree.from_records(h.tree.records()).shared  # a restart keeps what its znodes hold
    assert (len(kept.acls), kept.entries()) == (len(h.tree.shared.acls), h.tree.shared.entries())
    h.delete("/victim", caller=h.caller(superuser=True))
    h.delete("/ephemeral")
    assert (h.tree.shared.acls, h.tree.shared.metas) == before


def test_a_close_session_whose_ephemerals_pass_max_txn_bytes_names_none_and_deletes_them_all() -> None:
    h = Harness(PrepLimits(txn_bytes_max=8192))
    h.open_session(5)
    caller = h.caller(session_id=5)
    paths = {h.create(f"/e{n:03d}-" + "x" * 100, mode=CreateMode.EPHEMERAL, caller=caller) for n in range(100)}
    txn = h.prepare_close(5)
    assert txn.body == (None,) and len(encode_txn(txn)) < 200
    _, events = h.apply(txn)
    assert {path for kind, path in events if kind == 2} == paths  # NodeDeleted for each
    assert not any(path in h.tree.nodes for path in paths) and 5 not in h.tree.ephemerals and 5 not in h.tree.sessions


def test_a_quota_stats_node_measures_once_a_txn_and_only_for_an_admin_of_its_znode() -> None:
    """/zookeeper/quota is world-writable, and each stats node created measures its znode's
    whole subtree in every member's apply: a 97 KB multi of them stalled the server 4.1 s."""
    h = Harness()
    bob = h.caller(auth_ids=[("ip", "127.0.0.1"), ("digest", acls.digest("bob", "pw"))])
    h.create("/big", acl=[(acls.ALL, "digest", acls.digest("bob", "pw")), (acls.READ, "world", "anyone")], caller=bob)
    for n in range(50):
        h.create(f"/big/n{n}", caller=bob)
    h.create("/zookeeper/quota/big")
    with pytest.raises(ZabbyError) as refused:  # anyone else: no ADMIN on /big
        h.create("/zookeeper/quota/big/zookeeper_stats", b"count=0,bytes=0")
    assert refused.value.code == Err.NOAUTH
    stats = (OpCode.CREATE, "/zookeeper/quota/big/zookeeper_stats", b"count=0,bytes=0", OPEN, 0, None)
    unstats = (OpCode.DELETE, "/zookeeper/quota/big/zookeeper_stats", -1)
    failed = h.prepare(OpCode.MULTI, ([stats, unstats, stats],), bob)  # the third op fails the multi
    assert [entry[1][0] for entry in failed.body[0]] == [Err.OK, Err.OK, Err.BADARGUMENTS]
    h.multi([(OpCode.CREATE, "/zookeeper/quota/big/zookeeper_limits", b"count=100,bytes=-1", OPEN, 0, None), stats], bob)
    assert h.tree.nodes["/zookeeper/quota/big/zookeeper_stats"].data == b"count=51,bytes=0"


def test_an_acl_check_parses_no_ip_entry_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``ip`` ACL was parsed entry by entry on every check: 0.3 s per read of a node with
    30,000 entries, and again per watcher of each event."""
    import ipaddress

    parsed: list[str] = []
    real = ipaddress.ip_network
    monkeypatch.setattr(ipaddress, "ip_network", lambda text, strict=True: parsed.append(text) or real(text, strict=strict))
    acl = tuple((acls.READ, "ip", f"10.77.{n // 250}.{n % 250}") for n in range(256))
    for _ in range(100):
        assert not acls.check(acl, acls.READ, [("ip", "192.168.1.1")])
        assert acls.check(acl, acls.READ, [("ip", "10.77.0.9")])
    assert len(parsed) == 256


def _refused_for(h: Harness, setting: str, op: int, args: tuple[Any, ...], caller: Any = None) -> None:
    with pytest.raises(ZabbyError) as refused:
        h.prepare(op, args, caller)
    assert refused.value.code == Err.QUOTAEXCEEDED and setting in str(refused.value)


def test_creates_past_max_znodes_are_refused_counting_those_in_flight_until_one_is_deleted() -> None:
    """Nothing bounded the tree: a client could create znodes until every member ran out of
    memory (~270 B each with no data)."""
    h = Harness(PrepLimits(znodes_max=10))
    system = len(h.tree.nodes)  # /, /zookeeper and its config and quota
    for n in range(10 - system - 2):
        h.create(f"/n{n}")
    in_flight = [h.prepare(OpCode.CREATE, (f"/p{n}", b"", OPEN, 0, None)) for n in range(2)]  # prepared, not applied
    _refused_for(h, "maxZnodes (10)", OpCode.CREATE, ("/one-more", b"", OPEN, 0, None))
    in_flight.append(h.prepare(OpCode.MULTI, ([(OpCode.DELETE, "/n0", -1), (OpCode.CREATE, "/m", b"", OPEN, 0, None)],)))
    assert h.prep.view("/m") is None and h.prep.view("/n0") is not None  # the multi failed whole
    results = [h.apply(txn)[0] for txn in in_flight][-1]
    assert [err for _, err, _ in results] == [0, Err.QUOTAEXCEEDED]
    assert len(h.tree.nodes) == 10
    h.set_data("/n0", b"shrinking or growing data adds no znode")
    h.delete("/n0")
    assert h.create("/one-more") == "/one-more" and len(h.tree.nodes) == 10


def test_max_tree_bytes_counts_paths_data_and_each_acl_the_tree_does_not_hold_yet() -> None:
    h = Harness(PrepLimits(tree_bytes_max=DataTree().size_bytes() + 2000))
    h.create("/a", b"x" * 500)
    _refused_for(h, "maxTreeBytes", OpCode.SET_DATA, ("/a", b"x" * 2000, -1))
    h.set_data("/a", b"x" * 100)  # freeing room always passes
    fresh = [(31, "ip", f"10.0.0.{n}") for n in range(16)]  # ~2,100 B to hold, though 16 entries pass maxAclEntries
    assert h.tree.size_bytes() + acl_cost(fresh) > DataTree().size_bytes() + 2000
    _refused_for(h, "maxTreeBytes", OpCode.SET_ACL, ("/a", fresh, -1))
    _refused_for(h, "maxTreeBytes", OpCode.CREATE, ("/b", b"", fresh, 0, None))
    h.create("/b", b"", fresh[:4])  # an ACL costs once, however many znodes hold it
    held = h.tree.size_bytes()
    h.create("/c", b"", fresh[:4])
    assert h.tree.size_bytes() == held + len("/c")
    h.delete("/b")
    h.delete("/c")  # the last znode holding it: the ACL's bytes are free again
    assert h.tree.size_bytes() == DataTree().size_bytes() + len("/a") + 100


@settings(max_examples=100, deadline=None)
@given(st.lists(_ops(), max_size=30), st.integers(5, 12), st.integers(0, 3000), st.integers(0, 3))
def test_the_tree_never_passes_its_bounds_with_any_writes_in_flight(ops: list[tuple[Any, ...]], znodes_max: int,
                                                                     room: int, in_flight: int) -> None:  # fmt: skip
    """Writes prepared ``in_flight`` at a time before they are applied (a leader's pipeline):
    once all are applied the tree is within both bounds, and its ACLs' bytes are what a
    restart counts again."""
    h = Harness(PrepLimits(znodes_max=znodes_max, tree_bytes_max=DataTree().size_bytes() + room))
    caller = h.caller(auth_ids=_ids(3))
    waiting: list[Any] = []
    for op, *args in ops:
        try:
            waiting.append(h.prepare(op, tuple(args) if op != OpCode.MULTI else (args[0],), caller))
        except ZabbyError:
            continue
        while len(waiting) > in_flight:
            h.apply(waiting.pop(0))
        assert len(h.tree.nodes) <= znodes_max or not waiting
    for txn in waiting:
        h.apply(txn)
    assert len(h.tree.nodes) <= max(znodes_max, 4) and h.tree.size_bytes() <= DataTree().size_bytes() + room
    assert h.tree.shared.acl_bytes == sum(acl_cost(acl) for acl in h.tree.shared.acls)
    assert DataTree.from_records(h.tree.records()).size_bytes() == h.tree.size_bytes()


def test_a_txn_validates_each_distinct_acl_once_and_at_most_max_txn_acl_entries_of_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1 MB multi of 3,655 creates, each with a fresh ACL of 16 ip entries (58,000 entries
    validated, then interned by every member): 0.45 s of a stopped server, a bystander's read
    435 ms (the adversary's tree-fill).  A txn's distinct ACLs are bounded in entries, and an
    ACL it repeats is validated once."""
    monkeypatch.setattr(acls, "_FIXED_CACHE", {})
    h = Harness(PrepLimits(txn_acl_entries_max=64))
    fresh = [(OpCode.CREATE, f"/n{n}", b"", tuple((31, "ip", f"10.0.{n}.{k}") for k in range(16)), 0, None) for n in range(5)]
    with pytest.raises(TxnTooLarge) as refused:
        h.prepare(OpCode.MULTI, (fresh,))
    assert refused.value.code == Err.BADARGUMENTS and "maxTxnAclEntries (64)" in str(refused.value)
    assert not h.prep.pending
    h.multi(fresh[:4])  # 64 entries: at the bound
    validated: list[int] = []
    real_fix_acl = acls.fix_acl
    monkeypatch.setattr(acls, "fix_acl", lambda acl, *a, **k: validated.append(len(acl)) or real_fix_acl(acl, *a, **k))
    shared = fresh[4][3]
    h.multi([(OpCode.CREATE, f"/same{n}", b"", shared, 0, None) for n in range(500)])  # one ACL, 500 times: 16 entries
    assert validated == [16] and all(f"/same{n}" in h.tree.nodes for n in range(500))
    with pytest.raises(TxnTooLarge, match="maxTxnAclEntries"):  # auth expanded into the session's ids counts too
        h.create("/auth", acl=AUTH, caller=h.caller(auth_ids=_ids(70)))


def test_a_repeated_acl_is_charged_once_whether_it_came_as_lists_or_tuples() -> None:
    """zabby's msgpack protocol decodes an ACL as lists, jute and a forwarded request as
    tuples: a multi repeating one ACL was charged per op on the server its client reached
    (refused past maxTxnAclEntries) and once on the leader it was forwarded to (accepted)."""
    for shape in (list, tuple):
        h = Harness(PrepLimits(txn_acl_entries_max=64))
        acl = shape(shape(entry) for entry in ((31, "ip", "10.0.0.1"), (1, "world", "anyone")))
        h.multi([(OpCode.CREATE, f"/n{n}", b"", acl, 0, None) for n in range(100)])  # 2 entries, not 200
        assert all(f"/n{n}" in h.tree.nodes for n in range(100)), shape


def test_max_txn_acl_entries_below_max_acl_entries_is_refused_at_start() -> None:
    from zabby.config import ConfigError, from_dict

    with pytest.raises(ConfigError, match="maxTxnAclEntries=100 must be at least maxAclEntries"):
        from_dict({"dataDir": "/tmp/x", "clientPort": "2181", "maxTxnAclEntries": "100", "maxAclEntries": "256"})


def test_the_set_data_seed_cache_is_bounded_in_paths_and_in_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A setData's digest seeds are kept by path, for at most ``SET_SEEDS_MAX`` paths of at most
    ``SET_SEEDS_PATH_MAX`` characters: a client setting nodes of 200 kB paths held their paths
    in it after the nodes were gone (38 MiB for 200 of them), counted by no bound.  The digest is
    the one the seeds computed afresh give, cached or not."""
    from zabby.tree import datatree

    monkeypatch.setattr(datatree, "SET_SEEDS_MAX", 4)
    h, fresh = Harness(), Harness()
    long_path = "/" + "x" * (datatree.SET_SEEDS_PATH_MAX + 1)
    for path in [long_path] + [f"/n{n}" for n in range(10)]:
        for harness in (h, fresh):
            harness.create(path, b"a")
        h.set_data(path, b"bb")
        h.set_data(path, b"ccc")
        fresh.tree._set_seeds.clear()
        fresh.set_data(path, b"bb")
        fresh.tree._set_seeds.clear()
        fresh.set_data(path, b"ccc")
        assert long_path not in h.tree._set_seeds and len(h.tree._set_seeds) <= 4
        assert h.tree.digest == fresh.tree.digest


def test_a_set_data_event_is_kept_once_per_path_and_follows_its_acl() -> None:
    """A setData's NodeDataChanged event is the one tuple for its path, and a create's parent's
    NodeChildrenChanged the one for that parent (the watch history then holds a reference a txn,
    not an event and its path), with the ACL its node has now: a setACL between two setData
    gives the second its new ACL, which a watcher's READ check reads."""
    h = Harness()
    h.create("/jobs", b"")
    h.create("/jobs/a", b"")
    children_changed = h.tree._set_seeds["/jobs"][3]
    h.create("/jobs/b", b"")
    assert h.tree._set_seeds["/jobs"][3] is children_changed and children_changed[:2] == (EventType.NODE_CHILDREN_CHANGED, "/jobs")
    h.create("/counter", b"0")
    h.set_data("/counter", b"1")
    first = h.tree._set_seeds["/counter"][2]
    h.set_data("/counter", b"2")
    assert h.tree._set_seeds["/counter"][2] is first and h.last_acls == [first[2]]
    h.set_acl("/counter", [(acls.READ | acls.WRITE, "world", "anyone")])
    h.set_data("/counter", b"3")
    assert h.last_acls == [((acls.READ | acls.WRITE, "world", "anyone"),)]
    assert h.tree._set_seeds["/counter"][2] is not first


@pytest.mark.parametrize("validated_before", [False, True])
def test_an_acl_with_repeated_entries_is_counted_as_asked_whether_validated_before_or_not(validated_before: bool) -> None:
    """``fix_acl`` drops an ACL's repeated entries, and keeps what it validated; the preparer
    counts the entries as asked (``maxAclEntries``, ``maxTxnAclEntries``) either way: a review
    found a fast path that counted a kept ACL's fewer entries, so that a request was refused or
    not by what the process had validated before."""
    repeated = [(31, "world", "anyone"), (31, "world", "anyone")]
    acls._FIXED_CACHE.clear()
    if validated_before:
        acls.fix_acl(repeated, [])
    h = Harness(PrepLimits(acl_entries_max=1, txn_acl_entries_max=1))
    with pytest.raises(ZabbyError) as refused:
        h.create("/a", b"", acl=repeated)
    assert refused.value.code == Err.INVALIDACL


def test_a_large_acl_is_not_kept_with_the_events_past_its_node() -> None:
    """The events kept by path hold their ACL past the node's life: one larger than
    ``SET_SEEDS_ACL_BYTES_MAX`` is not kept (the events are made each time instead)."""
    from zabby.tree import datatree

    h = Harness()
    large = [(31, "world", "anyone")] + [(31, "ip", f"10.0.{n}.1") for n in range(60)]
    h.create("/big", b"", acl=large)
    assert acls.acl_bytes(h.tree.nodes["/big"].acl) > datatree.SET_SEEDS_ACL_BYTES_MAX
    h.set_data("/big", b"1")
    h.create("/big/child", b"")
    assert h.tree._set_seeds["/big"][2] is None and h.tree._set_seeds["/big"][3] is None
    assert h.last_acls == [h.tree.nodes["/big/child"].acl, h.tree.nodes["/big"].acl]
