"""The watch history (issue 46): the events of the last txns applied, bounded, started again
with every new tree, replayed for a persistent watch by the same rule and READ filter as the
live triggers, and the engine keeping it from its applies."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.engine.helpers import Driver, create, make_engine
from tests.tree.harness import OPEN, Harness, Session
from zabby.errors import Err, HistoryCompacted
from zabby.opcodes import EventType
from zabby.tree.txns import make_zxid
from zabby.tree.watches import REPLAY_BYTES_PER_EVENT, WatchHistory, WatchManager, sees

BOB_ONLY = ((31, "digest", "bob:hash"),)
CREATED, DELETED, CHANGED, CHILD = (EventType.NODE_CREATED, EventType.NODE_DELETED,
                                    EventType.NODE_DATA_CHANGED, EventType.NODE_CHILDREN_CHANGED)  # fmt: skip
BYTES_MAX = 1 << 20


def recorded(h: Harness, history: WatchHistory) -> None:
    """Every txn the harness applies from now on goes into ``history``, as the engine records them."""
    apply = h.tree.apply

    def apply_and_record(txn, answered=True):  # type: ignore[no-untyped-def]
        result, events = apply(txn, answered)
        if events:
            history.record(txn.zxid, events)
        return result, events

    h.tree.apply = apply_and_record  # type: ignore[method-assign]


def test_replay_is_what_the_watch_would_have_fired_after_the_zxid_in_zxid_order() -> None:
    h = Harness()
    history = WatchHistory(100, h.tree.last_zxid)
    recorded(h, history)
    anyone = Session("anyone")
    h.create("/a")
    start = h.zxid
    h.create("/a/b")
    h.set_data("/a/b", b"1")
    h.create("/other")
    h.multi([(1, "/a/c", b"", OPEN, 0, None), (5, "/a", b"x", -1)])
    h.delete("/a/c")
    assert history.replay(anyone, "/a", True, start, BYTES_MAX) == [
        (start + 1, CREATED, "/a/b"), (start + 2, CHANGED, "/a/b"), (start + 4, CREATED, "/a/c"), (start + 4, CHANGED, "/a"),
        (start + 5, DELETED, "/a/c"),
    ]  # fmt: skip
    # a plain persistent watch: every event on its own path, NodeChildrenChanged too
    assert history.replay(anyone, "/a", False, start, BYTES_MAX) == [
        (start + 1, CHILD, "/a"), (start + 4, CHILD, "/a"), (start + 4, CHANGED, "/a"), (start + 5, CHILD, "/a"),
    ]  # fmt: skip
    assert history.replay(anyone, "/a", True, h.zxid, BYTES_MAX) == []  # nothing after the last txn


def test_the_history_is_bounded_and_names_the_oldest_zxid_it_can_serve() -> None:
    h = Harness()
    history = WatchHistory(3, h.tree.last_zxid)
    recorded(h, history)
    for index in range(6):
        h.create(f"/n{index}")
    assert len(history) == 3 and history.since == 3  # the txns 4, 5 and 6 are kept
    assert [zxid for zxid, _, _ in history.replay(Session("s"), "/", True, 3, BYTES_MAX)] == [4, 5, 6]
    with pytest.raises(HistoryCompacted) as caught:
        history.replay(Session("s"), "/", True, 2, BYTES_MAX)
    assert caught.value.code == Err.HISTORYCOMPACTED and caught.value.oldest_zxid == 3 and caught.value.reply_values == (3,)
    assert "0x2" in str(caught.value) and "0x3" in str(caught.value)


def test_no_history_serves_only_the_present() -> None:
    history = WatchHistory(0, 5)
    history.record(6, [(CREATED, "/x", OPEN)])
    assert history.since == 6 and len(history) == 0
    assert history.replay(Session("s"), "/", True, 6, BYTES_MAX) == []
    with pytest.raises(HistoryCompacted):
        history.replay(Session("s"), "/", True, 5, BYTES_MAX)
    with pytest.raises(ValueError):
        WatchHistory(-1, 0)


def test_a_replay_over_the_reply_limit_is_refused_with_the_oldest_zxid_that_fits() -> None:
    history = WatchHistory(100, 0)
    for zxid in range(1, 11):
        history.record(zxid, [(CHANGED, "/p", OPEN)])
    per_event = REPLAY_BYTES_PER_EVENT + len("/p")
    assert len(history.replay(Session("s"), "/p", False, 6, 4 * per_event)) == 4
    with pytest.raises(HistoryCompacted) as caught:
        history.replay(Session("s"), "/p", False, 5, 4 * per_event)  # five events do not fit
    assert caught.value.oldest_zxid == 6 and "reply limit" in str(caught.value)


def test_a_replay_holds_back_what_the_session_may_not_read() -> None:
    h = Harness()
    history = WatchHistory(100, h.tree.last_zxid)
    recorded(h, history)
    h.create("/p")
    start = h.zxid
    h.create("/p/secret", acl=BOB_ONLY)
    h.create("/p/open")
    stranger, bob = Session("stranger"), Session("bob", auth_ids=[("digest", "bob:hash")])
    assert [path for _, _, path in history.replay(stranger, "/p", True, start, BYTES_MAX)] == ["/p/open"]
    assert [path for _, _, path in history.replay(bob, "/p", True, start, BYTES_MAX)] == ["/p/secret", "/p/open"]
    assert [path for _, _, path in history.replay(Session("root", superuser=True), "/p", True, start, BYTES_MAX)] == ["/p/secret", "/p/open"]


paths = st.sampled_from(["/", "/a", "/a/b", "/a/b/c", "/ab", "/b"])
event_types = st.sampled_from([CREATED, DELETED, CHANGED, CHILD])


@given(watches=st.lists(st.tuples(paths, st.booleans()), min_size=1, max_size=4), events=st.lists(st.tuples(event_types, paths), max_size=8))
def test_history_and_live_triggers_match_by_one_rule(watches: list[tuple[str, bool]], events: list[tuple[int, str]]) -> None:
    """For persistent watches, ``WatchManager.trigger`` delivers an event to a session exactly
    when one of its watches ``sees`` it (the rule the history replays by)."""
    manager = WatchManager()
    session = Session("s")
    for path, recursive in watches:
        manager.add_persistent(path, session, recursive)
    for event_type, path in events:
        delivered = manager.trigger([(event_type, path, OPEN)])
        expected = any(sees(watch_path, recursive, event_type, path) for watch_path, recursive in watches)
        assert delivered == ([(session, event_type, path)] if expected else [])


def test_the_engine_records_its_applies_and_starts_again_with_a_new_tree() -> None:
    engine = make_engine([create(1), create(2)], servers=1, watch_history_txns=10)
    assert engine.history.since == make_zxid(1, 2) and len(engine.history) == 0
    engine._apply([create(3), create(4)])
    assert [zxid for zxid, _, _ in engine.history.replay(Session("s"), "/", True, make_zxid(1, 2), BYTES_MAX)] == [
        make_zxid(1, 3), make_zxid(1, 4),
    ]  # fmt: skip
    driver = Driver(engine, [create(1), create(2), create(3), create(4), create(5)])
    driver.run_work(engine._restart_core(snapshot_wanted=False))  # the tree reloaded from disk
    assert engine.history.since == make_zxid(1, 5) and len(engine.history) == 0
    driver.run_work(engine._replace_tree(engine.tree.__class__()))  # a SNAP's empty tree
    assert engine.history.since == 0


@given(txns=st.lists(st.lists(st.tuples(event_types, paths), min_size=1, max_size=4), max_size=30),
       watch=st.tuples(paths, st.booleans()), since=st.integers(0, 30), txns_max=st.integers(1, 40), bytes_max=st.integers(0, 6000))  # fmt: skip
def test_a_replay_is_the_kept_events_that_the_watch_sees(txns: list[list[tuple[int, str]]], watch: tuple[str, bool], since: int,
                                                        txns_max: int, bytes_max: int) -> None:  # fmt: skip
    """The indexes give what a scan of every kept event by the rule (``sees``) gives; the
    history keeps the newest txns that fit both bounds."""
    history = WatchHistory(txns_max, 0, bytes_max)
    for zxid, events in enumerate(txns, start=1):
        history.record(zxid, [(event_type, path, OPEN) for event_type, path in events])
    assert len(history) <= txns_max and history.bytes <= bytes_max
    kept = [(zxid, event_type, path) for zxid, events in enumerate(txns, start=1) if zxid > history.since for event_type, path in events]
    assert len(history) == len({zxid for zxid, _, _ in kept})
    watch_path, recursive = watch
    if since < history.since:
        with pytest.raises(HistoryCompacted):
            history.replay(Session("s"), watch_path, recursive, since, BYTES_MAX)
    else:
        expected = [(zxid, event_type, path) for zxid, event_type, path in kept if zxid > since and sees(watch_path, recursive, event_type, path)]
        assert history.replay(Session("s"), watch_path, recursive, since, BYTES_MAX) == expected


resume = st.none() | st.tuples(paths, st.booleans(), st.integers(0, 14))  # a watch path, recursive, how many zxids back


@given(txns=st.lists(st.tuples(st.lists(st.tuples(event_types, paths), min_size=1, max_size=3), resume), min_size=1, max_size=60),
       txns_max=st.integers(1, 12), backlog=st.integers(1, 100))  # fmt: skip
def test_resumes_between_records_see_what_a_scan_sees(txns: list[tuple[list[tuple[int, str]], tuple[str, bool, int] | None]],
                                                      txns_max: int, backlog: int) -> None:  # fmt: skip
    """The index is brought up to date by the resumes, from where the last one left it, while
    txns are recorded and forgotten between them (and the list of txns is cut): each resume
    gives what a scan of the kept events gives, and the index keeps no forgotten txn for long."""
    history = WatchHistory(txns_max, 0)
    patch = pytest.MonkeyPatch()
    patch.setattr("zabby.tree.watches._COMPACT_AT", 2)  # cut the list often
    patch.setattr("zabby.tree.watches.INDEX_BACKLOG_MAX", backlog)  # index in bulk between resumes too
    try:
        for zxid, (events, resumed) in enumerate(txns, start=1):
            history.record(zxid, [(event_type, path, OPEN) for event_type, path in events])
            if resumed is None:
                continue
            watch_path, recursive, back = resumed
            since = max(0, zxid - back)
            if since < history.since:
                with pytest.raises(HistoryCompacted):
                    history.replay(Session("s"), watch_path, recursive, since, BYTES_MAX)
                continue
            kept = [(z, t, p) for z, (evs, _) in enumerate(txns[:zxid], start=1) if z > since for t, p in evs]
            expected = [(z, t, p) for z, t, p in kept if sees(watch_path, recursive, t, p)]
            assert history.replay(Session("s"), watch_path, recursive, since, BYTES_MAX) == expected
            if watch_path == "/" and recursive:
                continue  # read every txn kept without the index: nothing pruned it, and it holds no more than it did
            first = history._base + history._head  # the oldest kept txn's sequence number
            forgotten_in_index = sum(1 for seqs in history._by_top.values() for seq in seqs if seq < first)
            assert forgotten_in_index <= 3 * len(history._by_top)  # pruned once as many were forgotten as it has names
    finally:
        patch.undo()


def test_the_history_is_bounded_in_bytes_and_a_resume_reads_only_its_own_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """200 multis of 5,000 setData held 295 MB of history (bounded in txns only); a resume of
    a quiet path scanned all of it: 0.22 s per 26-byte request against 500,000 events."""
    history = WatchHistory(100_000, 0, bytes_max=2 * 2**20)
    for zxid in range(1, 401):
        history.record(zxid, [(CHANGED, f"/busy/n{n}", OPEN) for n in range(100)])
    history.record(401, [(CHANGED, "/quiet/x", OPEN)])
    assert history.bytes <= 2 * 2**20 and history.since > 0  # the oldest txns went to stay within it
    read_checks: list[object] = []
    monkeypatch.setattr("zabby.tree.watches._may_read", lambda watcher, acl: read_checks.append(acl) or True)
    assert history.replay(Session("s"), "/quiet", True, history.since, BYTES_MAX) == [(401, CHANGED, "/quiet/x")]
    assert history.replay(Session("s"), "/elsewhere", True, history.since, BYTES_MAX) == []
    assert len(read_checks) == 1  # the /busy events were never looked at


def test_a_multis_events_are_recorded_in_time_linear_in_their_number() -> None:
    """A multi of 5,000 setData recorded its events by tuple concatenation, each copying the
    tuple so far: 0.33 s of a stopped server per txn (the adversary's history-flood found it)."""
    history = WatchHistory(10, 0)
    events = [(EventType.NODE_DATA_CHANGED, f"/amp-history/n{n % 50}", OPEN) for n in range(5_000)]
    started = time.perf_counter()
    for zxid in range(1, 4):
        history.record(zxid, events)
    assert time.perf_counter() - started < 0.15  # 1 ms here; three records took 1 s before
    assert history.replay(Session("s"), "/amp-history/n7", False, 2, BYTES_MAX) == [(3, EventType.NODE_DATA_CHANGED, "/amp-history/n7")] * 100
