"""Watch delivery: each event goes only to watchers that may READ the node it is about (the
fix of CVE-2024-23944 that ZooKeeper 3.8.4 and Debian's 3.8.0 carry), and a one-shot watch
whose event is held back is used up all the same, as ZooKeeper removes it before the check."""

from __future__ import annotations


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tree.harness import OPEN, Harness, Session
from zabby.opcodes import EventType, OpCode
from zabby.tree import acl as acls
from zabby.tree.txns import Txn
from zabby.tree.paths import ancestors
from zabby.tree.watches import WatchManager

BOB = ("digest", "bob:hash")
BOB_ONLY = ((31, "digest", "bob:hash"),)
CREATED, DELETED, CHANGED, CHILD = (EventType.NODE_CREATED, EventType.NODE_DELETED,
                                    EventType.NODE_DATA_CHANGED, EventType.NODE_CHILDREN_CHANGED)  # fmt: skip




@pytest.fixture
def h() -> Harness:
    return Harness()


def test_events_carry_the_acl_of_the_node_they_are_about(h: Harness) -> None:
    h.create("/p", acl=OPEN)
    h.create("/p/secret", acl=BOB_ONLY)
    assert h.last_acls == [BOB_ONLY, OPEN]  # NodeCreated: the new node's; NodeChildrenChanged: the parent's
    h.set_data("/p/secret", b"x", caller=h.caller(1, [BOB]))
    assert h.last_acls == [BOB_ONLY]
    h.delete("/p/secret")
    assert h.last_acls == [BOB_ONLY, OPEN]


def test_a_recursive_watch_hears_only_of_nodes_its_session_may_read() -> None:
    watches = WatchManager()
    anyone, bob, root = Session("anyone"), Session("bob", [BOB]), Session("root", [], superuser=True)
    for session in (anyone, bob, root):
        watches.add_persistent("/p", session, recursive=True)
    delivered = watches.trigger([(CREATED, "/p/secret", BOB_ONLY), (CHILD, "/p", OPEN)])
    assert sorted((w.name, t, p) for w, t, p in delivered) == [("bob", CREATED, "/p/secret"), ("root", CREATED, "/p/secret")]
    delivered = watches.trigger([(CREATED, "/p/open", OPEN)])
    assert sorted(w.name for w, _, _ in delivered) == ["anyone", "bob", "root"]


def test_a_one_shot_watch_held_back_by_the_acl_is_used_up() -> None:
    watches = WatchManager()
    anyone = Session("anyone")
    watches.add_data("/n", anyone)
    watches.add_child("/n", anyone)
    assert watches.trigger([(CHANGED, "/n", BOB_ONLY)]) == []  # the node's ACL changed after the watch was set
    assert watches.trigger([(CHANGED, "/n", OPEN)]) == []  # ... and the data watch is gone
    assert watches.trigger([(CHILD, "/n", OPEN)]) == [(anyone, CHILD, "/n")]


def test_an_empty_acl_hides_nothing() -> None:
    watches = WatchManager()
    anyone = Session("anyone")
    watches.add_data("/n", anyone)
    assert watches.trigger([(DELETED, "/n", ())]) == [(anyone, DELETED, "/n")]


def test_a_committed_reconfig_reaches_the_watchers_of_zookeeper_config(h: Harness) -> None:
    """The RECONFIG txn's event carries /zookeeper/config's ACL like every other event: without
    it, applying a reconfig on a server where any watch was set failed the core (found by the
    kazoo reconfig test: the server restarted its core, the client saw ConnectionLoss)."""
    watches = WatchManager()
    anyone = Session("anyone")
    watches.add_data("/zookeeper/config", anyone)
    text = "server.1=127.0.0.1:2888:3888:participant;0.0.0.0:2181\nversion=100000001\n"
    h.zxid = 0x100000001
    _, events = h.apply(Txn(h.zxid, 1, 1, h.now, OpCode.RECONFIG, (text,)))
    assert events == [(CHANGED, "/zookeeper/config")] and h.last_acls == [acls.READ_ACL_UNSAFE]
    assert watches.trigger(h.tree.apply(Txn(h.zxid + 1, 1, 2, h.now, OpCode.RECONFIG, (text,)))[1]) == [(anyone, CHANGED, "/zookeeper/config")]


class _Untouchable(dict):  # type: ignore[type-arg]
    """A table that fails any walk over it: a watcher's removal must not walk the others'."""

    def items(self):  # type: ignore[no-untyped-def]
        raise AssertionError("walked the whole table")

    __iter__ = items  # type: ignore[assignment]


def test_forgetting_a_watcher_touches_only_its_own_watches() -> None:
    """A session with 100,000 watches made every other session's close walk all of them."""
    watches = WatchManager()
    hoarder, other = Session("hoarder"), Session("other")
    for i in range(1000):
        watches.add_data(f"/hoard/{i}", hoarder)
    watches.add_child("/mine", other)
    watches.add_persistent("/tree", other, recursive=True)
    for name in ("data", "child", "persistent", "recursive"):
        table = _Untouchable(getattr(watches, name))
        setattr(watches, name, table)
    watches._numbered = (watches.data, watches.child, watches.persistent, watches.recursive)
    watches.remove_watcher(other)
    assert "/mine" not in watches.child and "/tree" not in watches.recursive
    assert watches.count() == 1000
    watches.remove_watcher(hoarder)
    assert watches.count() == 0 and not dict(watches.data)


def test_fired_one_shot_watches_leave_their_watchers_index() -> None:
    watches = WatchManager()
    session = Session("s")
    for i in range(100):
        watches.add_data(f"/n{i}", session)
        watches.trigger([(CHANGED, f"/n{i}", OPEN)])
    assert watches.count() == 0 and watches.paths_by_watcher() == {}


def _reference_trigger(manager: WatchManager, events: list[tuple[int, str, tuple[acls.ACL, ...]]]) -> list[tuple[object, int, str]]:
    """The rule, event by event and watcher by watcher, as ``trigger`` was written before runs."""
    out: list[tuple[object, int, str]] = []
    for event_type, path, acl in events:
        watchers: set[object] = set()
        if event_type == CHILD:
            manager._fire(1, manager.child, path, watchers)  # type: ignore[arg-type]
        else:
            manager._fire(0, manager.data, path, watchers)  # type: ignore[arg-type]
            if event_type == DELETED:
                manager._fire(1, manager.child, path, watchers)  # type: ignore[arg-type]
        watchers.update(manager.persistent.get(path, ()))
        for watch_path in (path, *ancestors(path)) if event_type != CHILD else ():
            watchers.update(manager.recursive.get(watch_path, ()))
        out.extend((w, event_type, path) for w in watchers if acls.check(acl, acls.READ, w.auth_ids, w.superuser))  # type: ignore[attr-defined]
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["/", "/a", "/a/b", "/c"]), st.integers(0, 4)), max_size=20),
       st.lists(st.tuples(st.sampled_from([CREATED, DELETED, CHANGED, CHILD]), st.sampled_from(["/a", "/a/b", "/c", "/a/b/d"]),
                          st.sampled_from([OPEN, BOB_ONLY])), max_size=60))  # fmt: skip
def test_runs_deliver_what_the_rule_delivers_event_by_event(watches: list[tuple[int, str, int]],
                                                              events: list[tuple[int, str, tuple[acls.ACL, ...]]]) -> None:  # fmt: skip
    """``runs`` groups the deliveries (the same watchers' events in one list): flattened, they
    are the rule's, event by event, and each watcher's events keep their order."""
    sessions = [Session(f"s{n}", auth_ids=[BOB] if n % 2 else [("ip", "127.0.0.1")]) for n in range(5)]
    managers = (WatchManager(), WatchManager())
    for manager in managers:
        for kind, path, who in watches:
            add = (manager.add_data, manager.add_child, lambda p, w: manager.add_persistent(p, w, False),
                   lambda p, w: manager.add_persistent(p, w, True))[kind]  # fmt: skip
            add(path, sessions[who])
    expected = _reference_trigger(managers[0], events)
    runs = managers[1].runs(events)
    assert sorted(((id(w), t, p) for w, t, p in expected), key=str) == sorted(((id(w), t, p) for readers, heard in runs for t, p in heard for w in readers), key=str)
    for session in sessions:  # each watcher's events in the order they fired
        assert [(t, p) for w, t, p in expected if w is session] == [(t, p) for readers, heard in runs if session in readers for t, p in heard]
    assert all(readers and heard for readers, heard in runs)


def test_a_multi_of_setdata_under_recursive_watches_is_one_run() -> None:
    manager = WatchManager()
    watchers = [Session(f"w{n}") for n in range(50)]
    for watcher in watchers:
        manager.add_persistent("/w", watcher, True)
    runs = manager.runs([(CHANGED, "/w/n", OPEN)] * 5000 + [(CREATED, f"/w/c{n}", OPEN) for n in range(100)])
    assert len(runs) == 1 and set(runs[0][0]) == set(watchers) and len(runs[0][1]) == 5100
