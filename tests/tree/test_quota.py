"""Quotas in the tree: the znodes zkCli's setquota writes, the usage the tree keeps in the stats
node (as ZooKeeper 3.8's DataTree does), the digest over it, and prep's enforcement."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zabby.errors import Err, ZabbyError
from zabby.opcodes import OpCode
from zabby.tree import quota
from zabby.tree.datatree import DataTree
from zabby.tree.prep import PrepLimits

from .harness import OPEN, Harness


def set_quota(h: Harness, path: str, limits: bytes) -> None:
    """What zkCli's setquota does: the folders, the limits node, then a zeroed stats node."""
    folder = "/zookeeper/quota"
    for name in path.strip("/").split("/"):
        folder += "/" + name
        if h.tree.get(folder) is None:
            h.create(folder)
    h.create(quota.limits_path(path), limits)
    h.create(quota.stats_path(path), b"count=0,bytes=0")


def stats(h: Harness, path: str) -> bytes:
    node = h.tree.get(quota.stats_path(path))
    assert node is not None
    return node.data


def check_digest(tree: DataTree) -> None:
    assert tree.digest == tree.compute_digest()


# ----------------------------------------------------------------- StatsTrack text
def test_stats_text_is_zookeepers() -> None:
    text = b"count=3,bytes=-1=;byteHardLimit=10;countHardLimit=-1"  # as ZooKeeper 3.8 writes it
    values = quota.parse_stats(text)
    assert values == {"count": 3, "bytes": -1, "byteHardLimit": 10, "countHardLimit": -1}
    assert quota.format_stats(values) == text
    assert quota.format_stats({"count": 2, "bytes": 1}) == b"count=2,bytes=1"
    assert quota.parse_stats(b"count=x,,bytes=,junk") == {"bytes": -1}  # nodes anyone may write


def test_governing_root_is_the_nearest_at_or_above() -> None:
    roots = {"/a", "/a/b/c"}
    assert quota.governing_root(roots, "/a") == "/a"
    assert quota.governing_root(roots, "/a/b") == "/a"
    assert quota.governing_root(roots, "/a/b/c/d") == "/a/b/c"
    assert quota.governing_root(roots, "/ab") is None
    assert quota.governing_root(roots, "/") is None


# ----------------------------------------------------------------- the tree keeps usage
def test_stats_node_counts_the_subtree_when_created_and_follows_every_write() -> None:
    h = Harness()
    h.create("/app", b"xy")
    h.create("/app/a", b"abc")
    set_quota(h, "/app", b"count=10,bytes=-1")
    assert stats(h, "/app") == b"count=2,bytes=5"  # the root counts itself
    h.create("/app/b", b"1234")
    h.set_data("/app/a", b"a")
    assert stats(h, "/app") == b"count=3,bytes=7"
    h.delete("/app/b")
    assert stats(h, "/app") == b"count=2,bytes=3"
    h.create("/other", b"zzz")  # outside the quota
    assert stats(h, "/app") == b"count=2,bytes=3"
    check_digest(h.tree)


def test_stats_node_keeps_its_stat_while_its_data_follows_usage() -> None:
    h = Harness()
    h.create("/app")
    set_quota(h, "/app", b"count=10,bytes=-1")
    node = h.tree.get(quota.stats_path("/app"))
    assert node is not None
    before = (node.mzxid, node.version)
    h.create("/app/x", b"12345")
    assert (node.mzxid, node.version) == before
    assert node.stat()[8] == len(b"count=2,bytes=5")  # dataLength follows the data


def test_deleting_the_limits_node_ends_the_quota() -> None:
    h = Harness()
    h.create("/app")
    set_quota(h, "/app", b"count=10,bytes=-1")
    h.delete(quota.limits_path("/app"))
    h.create("/app/x", b"123")
    assert stats(h, "/app") == b"count=1,bytes=0"
    assert h.tree.quota_roots == set()


def test_no_quota_under_zookeeper() -> None:
    h = Harness()
    set_quota(h, "/zookeeper", b"count=1,bytes=-1")
    assert h.tree.quota_roots == set()


def test_snapshot_reload_finds_the_roots_and_keeps_the_digest() -> None:
    h = Harness()
    h.create("/app", b"x")
    set_quota(h, "/app", b"count=10,bytes=-1")
    h.create("/app/y", b"yy")
    loaded = DataTree.from_records(h.tree.records())
    assert loaded.quota_roots == {"/app"}
    assert loaded.digest == h.tree.digest
    assert loaded.content_hash() == h.tree.content_hash()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["create", "delete", "set", "multi"]),
                          st.sampled_from(["/q/a", "/q/b", "/q/a/c", "/r"]),
                          st.binary(max_size=6)), max_size=40))  # fmt: skip
def test_usage_and_digest_follow_any_writes(ops: list[tuple[str, str, bytes]]) -> None:
    """After any writes, the stats node says what the subtree holds, and the incrementally
    kept digest equals the one computed from scratch."""
    h = Harness()
    h.create("/q", b"root")
    set_quota(h, "/q", b"count=5,bytes=20")
    for kind, path, data in ops:
        try:
            _write(h, kind, path, data)
        except ZabbyError:
            pass
        assert stats(h, "/q") == quota.usage_text(*quota.measure(h.tree, "/q"))
        check_digest(h.tree)


def _write(h: Harness, kind: str, path: str, data: bytes) -> None:
    if kind == "create":
        h.create(path, data)
    elif kind == "delete":
        h.delete(path)
    elif kind == "set":
        h.set_data(path, data)
    else:
        h.multi([(OpCode.CREATE, path, data, OPEN, 0, None), (OpCode.SET_DATA, "/q", data, -1)])


# ----------------------------------------------------------------- prep enforces
def enforcing(warnings: list[str] | None = None, enforce: bool = True) -> Harness:
    sink: list[str] = warnings if warnings is not None else []
    return Harness(PrepLimits(enforce_quota=enforce, quota_warning=sink.append))


def test_hard_count_limit_refuses_with_quotaexceeded_naming_the_root() -> None:
    h = enforcing()
    h.create("/app")
    set_quota(h, "/app", b"count=-1,bytes=-1=;byteHardLimit=-1;countHardLimit=2")
    h.create("/app/a")
    with pytest.raises(ZabbyError) as raised:
        h.create("/app/b")
    assert raised.value.code == Err.QUOTAEXCEEDED
    assert "/app" in str(raised.value)


def test_hard_byte_limit_counts_setdata_growth_only() -> None:
    h = enforcing()
    h.create("/app", b"12345")
    set_quota(h, "/app", b"count=-1,bytes=-1=;byteHardLimit=8;countHardLimit=-1")
    h.set_data("/app", b"12345678")
    with pytest.raises(ZabbyError):
        h.set_data("/app", b"123456789")
    h.set_data("/app", b"1")  # shrinking is always allowed


def test_soft_limit_and_enforcement_off_warn_but_let_the_write_through() -> None:
    warnings: list[str] = []
    h = enforcing(warnings)
    h.create("/app")
    set_quota(h, "/app", b"count=1,bytes=-1")
    h.create("/app/a")
    assert warnings == ["Quota exceeded: /app [current count=2, softCountLimit=1]"]
    off_warnings: list[str] = []
    off = enforcing(off_warnings, enforce=False)
    off.create("/app")
    set_quota(off, "/app", b"count=-1,bytes=-1=;byteHardLimit=-1;countHardLimit=1")
    off.create("/app/a")
    assert off_warnings == ["Quota exceeded: /app [current count=2, hardCountLimit=1]"]


def test_writes_in_flight_count_against_the_limit() -> None:
    """A pipelined burst is prepared before any of it applies: the ledger still stops it."""
    h = enforcing()
    h.create("/app")
    set_quota(h, "/app", b"count=-1,bytes=-1=;byteHardLimit=-1;countHardLimit=3")
    txns = [h.prepare(OpCode.CREATE, (f"/app/{name}", b"", OPEN, 0, None)) for name in "ab"]
    with pytest.raises(ZabbyError):
        h.prepare(OpCode.CREATE, ("/app/c", b"", OPEN, 0, None))
    for txn in txns:
        h.apply(txn)
    assert stats(h, "/app") == b"count=3,bytes=0"
    assert h.prep.quota_ledger.in_flight("/app") == (0, 0)


def test_a_failed_multi_gives_back_what_it_took() -> None:
    h = enforcing()
    h.create("/app")
    set_quota(h, "/app", b"count=-1,bytes=-1=;byteHardLimit=-1;countHardLimit=3")
    result: Any
    result, _ = h.multi([(OpCode.CREATE, "/app/a", b"", OPEN, 0, None), (OpCode.CREATE, "/app/b", b"", OPEN, 0, None),
                         (OpCode.CREATE, "/app/c", b"", OPEN, 0, None)])  # fmt: skip
    assert [code for _, code, _ in result] == [Err.OK, Err.OK, Err.QUOTAEXCEEDED]  # /app itself counts
    assert h.prep.quota_ledger.in_flight("/app") == (0, 0)
    h.create("/app/a")
    h.create("/app/b")
