"""The tree cache's sans-I/O mirror (``recipes/_mirror.py``) against a model server, no network.

``Model`` is a server's history of a small subtree: the state after every txn (a txn may be
a multi of several changes) and the watch events each txn fires.  ``Harness`` performs the
mirror's effects the way the client does, with hypothesis choosing every timing: how far the
server has got when a read, a watch or a round trip is answered (its events up to there are
delivered before the reply, as the server sends them), when the delivered callbacks run,
when the mirror drains, when the session is suspended or lost, when a watch's history is
lost.  Whatever the interleaving, the mirror never moves a node backwards, what it claims to
reflect (``zxid``) holds at every move, the listeners' events replay to the mirror, and it
ends equal to the final tree.
"""

from __future__ import annotations

import base64
from collections import deque
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zabby.client.recipes._mirror import (
    AddWatch, Fault, Flow, Moved, NodeData, Notify, QueueBehind, Read, Reached, RoundTrip, TreeEvent, TreeMirror, _newer, decode_state,
)  # fmt: skip
from zabby.client.states import EventType, KazooState, KeeperState, WatchedEvent, ZnodeStat
from zabby.errors import BadArgumentsError, ConnectionLoss, HistoryCompactedError, NoNodeError

ROOT = "/r"
FIRST_ZXID = 10
Tree = dict[str, NodeData]


def _stat(czxid: int, data: bytes) -> ZnodeStat:
    return ZnodeStat(czxid, czxid, 0, 0, 0, 0, 0, 0, len(data), 0, czxid)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _children(tree: Tree, path: str) -> frozenset[str]:
    return frozenset(p.rsplit("/", 1)[1] for p in tree if p != path and _parent(p) == path)


class Model:
    """A server's history of the subtree at ROOT: ``states[zxid]`` and ``events[zxid]``."""

    def __init__(self) -> None:
        self.last = FIRST_ZXID
        tree: Tree = {ROOT: NodeData(ROOT, b"", _stat(FIRST_ZXID, b""))}
        self.states: dict[int, Tree] = {FIRST_ZXID: tree}
        self.events: dict[int, list[WatchedEvent]] = {FIRST_ZXID: []}

    def commit(self, changes: list[tuple[str, str]]) -> None:
        """One txn of ``changes`` (("create" | "set" | "delete", path)); ones that do not
        apply at their turn are skipped, as a model need not fail."""
        zxid = self.last + 1
        tree = dict(self.states[self.last])
        events: list[WatchedEvent] = []
        for kind, path in changes:
            done = self._apply(tree, zxid, kind, path)
            if done is not None:
                events.append(WatchedEvent(done, KeeperState.CONNECTED, path, zxid))
        if events:
            self.last = zxid
            self.states[zxid], self.events[zxid] = tree, events

    def _apply(self, tree: Tree, zxid: int, kind: str, path: str) -> EventType | None:
        data = b"%d" % zxid
        if kind == "create" and path not in tree and _parent(path) in tree:
            tree[path] = NodeData(path, data, _stat(zxid, data))
            self._touch_parent(tree, path, zxid, +1)
            return EventType.CREATED
        if kind == "set" and path in tree:
            old = tree[path]
            tree[path] = NodeData(path, data, old.stat._replace(mzxid=zxid, version=old.stat.version + 1, dataLength=len(data)))
            return EventType.CHANGED
        if kind == "delete" and path in tree and path != ROOT and not _children(tree, path):
            del tree[path]
            self._touch_parent(tree, path, zxid, -1)
            return EventType.DELETED
        return None

    @staticmethod
    def _touch_parent(tree: Tree, path: str, zxid: int, delta: int) -> None:
        parent = tree[_parent(path)]
        stat = parent.stat._replace(cversion=parent.stat.cversion + 1, numChildren=parent.stat.numChildren + delta, pzxid=zxid)
        tree[parent.path] = parent._replace(stat=stat)

    def answer(self, zxid: int, ops: list[tuple[str, str]]) -> list[Any]:
        """A multiRead of ``ops`` served at ``zxid``."""
        tree = self.states[max(z for z in self.states if z <= zxid)]
        out: list[Any] = []
        for kind, path in ops:
            node = tree.get(path)
            if node is None:
                out.append(NoNodeError())
            else:
                out.append((node.data, node.stat) if kind == "get" else sorted(_children(tree, path)))
        return out

    def state_at(self, zxid: int) -> Tree:
        return self.states[max(z for z in self.states if z <= zxid)]

    def deleted_between(self, path: str, after: int, upto: int) -> bool:
        return any(e.path == path and e.type == EventType.DELETED for z in range(after + 1, upto + 1) for e in self.events.get(z, ()))


def _content(tree: Tree) -> dict[str, tuple[bytes, int, int]]:
    return {p: (n.data, n.stat.czxid, n.stat.mzxid) for p, n in tree.items()}


NAMES = ("a", "b", "c")
PATHS = [ROOT] + [f"{ROOT}/{x}" for x in NAMES] + [f"{ROOT}/{x}/{y}" for x in NAMES for y in NAMES[:2]]


@st.composite
def histories(draw: st.DrawFn) -> Model:
    model = Model()
    for _ in range(draw(st.integers(1, 30))):
        size = draw(st.sampled_from([1, 1, 1, 2, 3]))  # now and then a multi
        model.commit([(draw(st.sampled_from(["create", "create", "set", "delete"])), draw(st.sampled_from(PATHS))) for _ in range(size)])
    return model


class Harness:
    """Performs the mirror's effects as the client would, hypothesis choosing the timings."""

    def __init__(self, model: Model, data: st.DataObject, mirror: TreeMirror, *, oldest_history: int = 0, start: int = FIRST_ZXID) -> None:
        self.model = model
        self.data = data
        self.mirror = mirror
        self.oldest_history = oldest_history  # a resume from before this is refused
        self.served = start  # how far the server has got, as this client has seen it
        self.watching = False  # the server has the watch (events are sent)
        self.session = "connected"  # or "suspend", "lose": disconnected, the same session or a new one next
        self.delivered: deque[tuple[str, Any]] = deque()  # the client's callback queue
        self.told: Tree = {}  # the mirror as the listeners' events tell it
        self.events: list[TreeEvent] = []
        self.seen = mirror.snapshot()
        self.check_moves = True

    # -- the server and the client --------------------------------------------------------
    def advance(self, upto: int | None = None) -> int:
        """The server applies more txns (to ``upto``, or as far as hypothesis says), sending
        their events if it has the watch."""
        target = upto if upto is not None else self.data.draw(st.integers(self.served, self.model.last), label="served")
        for zxid in range(self.served + 1, target + 1):
            if self.watching:
                self.delivered.extend(("event", e) for e in self.model.events.get(zxid, ()))
        self.served = max(self.served, target)
        return self.served

    def request(self) -> int:
        """A request is answered: the client reconnects first if it must (CONNECTED is told
        before any reply on the new connection), then the server answers at some zxid."""
        if self.session != "connected":
            self.reconnect()
        return self.advance()

    def reconnect(self) -> None:
        self.session = "connected"
        self.delivered.append(("item", KazooState.CONNECTED))

    def dispatch(self, count: int) -> None:
        """The client runs ``count`` delivered callbacks."""
        for _ in range(min(count, len(self.delivered))):
            kind, item = self.delivered.popleft()
            if kind == "event" and not self.mirror.wants(item):
                continue
            self.mirror.enqueue(item)

    def run(self, flow: Flow[Any]) -> Any:
        reply: Any = None
        error: Exception | None = None
        while True:
            try:
                effect = flow.send(reply) if error is None else flow.throw(error)
            except StopIteration as stop:
                return stop.value
            reply, error = None, None
            try:
                reply = self.perform(effect)
            except AssertionError:
                raise  # a check failed: not the mirror's to handle
            except Exception as exc:
                error = exc
            self.check_never_backwards()

    def perform(self, effect: Any) -> Any:
        match effect:
            case Read(ops):
                return self.model.answer(self.request(), ops)
            case AddWatch(None):
                live = self.request()
                self.watching = True
                return live
            case AddWatch(since):
                if since < self.oldest_history:
                    raise HistoryCompactedError(oldest_zxid=self.oldest_history)
                if since > self.model.last:
                    raise BadArgumentsError("a zxid ahead of the ensemble")
                live = self.request()
                for zxid in range(since + 1, live + 1):  # the history, right after the reply
                    self.delivered.extend(("event", e) for e in self.model.events.get(zxid, ()))
                self.watching = True
                return live
            case RoundTrip():
                return self.request()
            case QueueBehind(item):
                self.delivered.append(("item", item))
            case Notify(event):
                self.tell(event)
            case Moved() if self.check_moves:
                self.check_reflects(self.mirror.zxid)
            case Fault(error):
                raise AssertionError(f"the mirror reported a fault: {error!r}")
        return None

    def cut_mid_txn(self, count: int) -> None:
        """The connection dropped while the last txn's events were on their way: the client
        never got the last ``count`` of them (a multi's events may be cut)."""
        for _ in range(count):
            if not self.delivered or self.delivered[-1][0] != "event" or self.delivered[-1][1].zxid != self.served:
                return
            self.delivered.pop()

    # -- the checks -----------------------------------------------------------------------
    def tell(self, event: TreeEvent) -> None:
        self.events.append(event)
        node = event.event_data
        if event.event_type == TreeEvent.NODE_ADDED:
            assert node is not None and node.path not in self.told
            self.told[node.path] = node
        elif event.event_type == TreeEvent.NODE_UPDATED:
            assert node is not None and node.path in self.told and _newer(self.told[node.path], node)
            self.told[node.path] = node
        elif event.event_type == TreeEvent.NODE_REMOVED:
            assert node is not None and _content({"": self.told.pop(node.path)}) == _content({"": node})

    def check_never_backwards(self) -> None:
        now = self.mirror.snapshot()
        for path, node in now.items():
            old = self.seen.get(path)
            assert old is None or old == node or _newer(old, node), f"{path} went back from {old} to {node}"
        self.seen = now

    def check_reflects(self, zxid: int) -> None:
        """At ``zxid`` the mirror shows every change up to it: each node of the tree then is
        there at least as new (unless a later delete it has not heard yet took it), and
        nothing there was created later than ``zxid`` unless it still exists."""
        mirror, then = self.mirror.snapshot(), self.model.state_at(zxid)
        for path, node in then.items():
            have = mirror.get(path)
            if have is None:
                assert self.model.deleted_between(path, zxid, self.served), f"{path} missing at 0x{zxid:x}"
            else:
                assert (have.stat.czxid, have.stat.mzxid) >= (node.stat.czxid, node.stat.mzxid), f"{path} behind at 0x{zxid:x}"
        for path, node in mirror.items():
            assert path in then or node.stat.czxid > zxid, f"{path} should be gone at 0x{zxid:x}"

    # -- a whole run ----------------------------------------------------------------------
    def play(self) -> None:
        """Random steps while there is history to play, then deliver and apply the rest."""
        self.run(self.mirror.load())
        for _ in range(self.data.draw(st.integers(0, 60), label="steps")):
            step = self.data.draw(st.sampled_from(["advance", "dispatch", "dispatch", "drain", "drain", "suspend", "lose", "reconnect", "history lost"]))
            if step == "advance":
                self.advance()
            elif step == "dispatch":
                self.dispatch(self.data.draw(st.integers(1, 8)))
            elif step == "drain":
                self.run(self.mirror.drain())
            elif step in ("suspend", "lose") and self.session == "connected":
                self.session = step
                if step == "lose":
                    self.cut_mid_txn(self.data.draw(st.integers(0, 2), label="events cut"))
                self.delivered.append(("item", KazooState.SUSPENDED if step == "suspend" else KazooState.LOST))
                self.watching = self.watching and step == "suspend"  # a new session has no watches
            elif step == "reconnect" and self.session != "connected":
                self.reconnect()
            elif step == "history lost" and self.watching and self.session == "connected":
                live = self.data.draw(st.integers(self.served, self.model.last))
                self.served = live  # the events up to here are never sent
                self.delivered.append(("event", WatchedEvent(EventType.HISTORY_LOST, KeeperState.CONNECTED, ROOT, live)))
        if self.session != "connected":
            self.reconnect()
        for _ in range(1000):
            self.advance(self.model.last)
            self.dispatch(len(self.delivered))
            if not self.mirror.has_pending:
                break
            self.run(self.mirror.drain())
        assert not self.delivered and not self.mirror.has_pending

    def check_final(self) -> None:
        final = self.model.states[self.model.last]
        assert self.mirror.snapshot() == final
        assert _content(self.told) == _content(final)  # the listeners heard every change (a parent's child counts are not one)
        assert self.mirror.zxid == self.model.last
        for path in final:
            assert self.mirror.get_children(path) == _children(final, path)
        assert [e.event_type for e in self.events].count(TreeEvent.INITIALIZED) == 1


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=histories(), data=st.data())
def test_any_interleaving_ends_equal_to_the_tree_never_going_back(model: Model, data: st.DataObject) -> None:
    harness = Harness(model, data, TreeMirror(ROOT))
    harness.play()
    harness.check_final()
    assert harness.mirror.full_reads >= 1


def saved_at(model: Model, zxid: int) -> dict[str, Any]:
    nodes = model.state_at(zxid)
    return {"format": 1, "root": ROOT, "zxid": zxid, "nodes": {p: [base64.b64encode(n.data).decode(), list(n.stat)] for p, n in nodes.items()}}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=histories(), data=st.data())
def test_a_saved_mirror_resumes_from_its_zxid_or_reloads_when_the_history_is_gone(model: Model, data: st.DataObject) -> None:
    saved = data.draw(st.integers(FIRST_ZXID, model.last), label="saved at")
    compacted = data.draw(st.booleans(), label="history compacted")
    harness = Harness(model, data, TreeMirror(ROOT, saved_state=saved_at(model, saved)),
                      oldest_history=saved + 1 if compacted else 0, start=saved)  # fmt: skip
    harness.play()
    harness.check_final()
    assert harness.mirror.full_reads >= (1 if compacted else 0)
    if not compacted:
        assert harness.events[len(model.state_at(saved))] == (TreeEvent.INITIALIZED, None) or harness.mirror.full_reads > 0 or model.last > saved


def test_a_saved_mirror_ahead_of_the_ensemble_is_dropped_and_reloaded() -> None:
    model = Model()
    model.commit([("create", ROOT + "/a")])
    ghost = saved_at(model, model.last)
    ghost["zxid"] = 1 << 40
    ghost["nodes"][ROOT + "/ghost"] = ["", list(_stat(1 << 40, b""))]

    class Fixed:
        def draw(self, strategy: Any, label: str = "") -> int:
            return model.last

    harness = Harness(model, Fixed(), TreeMirror(ROOT, saved_state=ghost))  # type: ignore[arg-type]
    harness.check_moves = False  # the ghost mirror claims a zxid of another history
    harness.run(harness.mirror.load())
    assert harness.mirror.snapshot() == model.states[model.last] and harness.mirror.full_reads == 1
    assert (TreeEvent.NODE_REMOVED, ROOT + "/ghost") in {(e.event_type, e.event_data.path) for e in harness.events if e.event_data}


def test_reads_too_big_for_one_reply_are_halved() -> None:
    """A multiRead refused as too big (BadArgumentsError) is sent again in halves."""
    mirror = TreeMirror(ROOT)
    flow = mirror._multi_read([("get", f"{ROOT}/{i}") for i in range(4)])
    asked = [len(next(flow).ops)]
    asked.append(len(flow.throw(BadArgumentsError("too big")).ops))
    asked.append(len(flow.send([NoNodeError()] * 2).ops))
    with pytest.raises(StopIteration) as stop:
        flow.send([NoNodeError()] * 2)
    assert asked == [4, 2, 2] and stop.value.value == [None] * 4


def test_a_batch_reads_only_what_its_events_need() -> None:
    """A created or changed node is read unless the mirror already shows its change; a
    created or deleted node's parent too, unless its pzxid shows it; a node the batch ends by
    deleting is not read."""
    mirror = TreeMirror(ROOT)
    list(mirror.apply_full_read({ROOT: NodeData(ROOT, b"", _stat(5, b"")), ROOT + "/a": NodeData(ROOT + "/a", b"", _stat(7, b""))}))

    def event(kind: EventType, path: str, zxid: int) -> WatchedEvent:
        return WatchedEvent(kind, KeeperState.CONNECTED, path, zxid)

    assert mirror.paths_to_read([event(EventType.CHANGED, ROOT + "/a", 7)]) == []  # already shown
    assert mirror.paths_to_read([event(EventType.CHANGED, ROOT + "/a", 8)]) == [ROOT + "/a"]
    assert mirror.paths_to_read([event(EventType.CREATED, ROOT + "/b", 9)]) == [ROOT + "/b", ROOT]
    assert mirror.paths_to_read([event(EventType.CREATED, ROOT + "/b", 9), event(EventType.DELETED, ROOT + "/b", 10)]) == [ROOT]


def test_a_full_read_reports_the_difference_only() -> None:
    mirror = TreeMirror(ROOT)
    first = {ROOT: NodeData(ROOT, b"", _stat(5, b"")), ROOT + "/a": NodeData(ROOT + "/a", b"x", _stat(6, b"x")),
             ROOT + "/b": NodeData(ROOT + "/b", b"", _stat(7, b""))}  # fmt: skip
    assert [e.event.event_type for e in mirror.apply_full_read(first)] == [TreeEvent.NODE_ADDED] * 3  # type: ignore[union-attr]
    changed = dict(first)
    del changed[ROOT + "/b"]
    changed[ROOT + "/a"] = NodeData(ROOT + "/a", b"y", first[ROOT + "/a"].stat._replace(mzxid=8))
    told = [(e.event.event_type, e.event.event_data.path) for e in mirror.apply_full_read(changed)]  # type: ignore[union-attr]
    assert told == [(TreeEvent.NODE_REMOVED, ROOT + "/b"), (TreeEvent.NODE_UPDATED, ROOT + "/a")]
    stale = dict(changed)
    stale[ROOT + "/a"] = first[ROOT + "/a"]  # an older read never moves a node back
    assert list(mirror.apply_full_read(stale)) == [] and mirror.get_data(ROOT + "/a").data == b"y"
    assert mirror.get_children(ROOT) == frozenset({"a"})


def test_save_state_round_trips() -> None:
    model = Model()
    model.commit([("create", ROOT + "/a"), ("create", ROOT + "/a/b")])
    mirror = TreeMirror(ROOT)
    list(mirror.apply_full_read(model.states[model.last]))
    list(mirror._set_zxid(model.last))
    zxid, nodes = decode_state(ROOT, mirror.save_state())
    assert zxid == model.last and nodes == model.states[model.last]
    with pytest.raises(ValueError, match="unusable saved state"):
        decode_state("/other", mirror.save_state())


def test_a_mark_reached_moves_the_zxid_once_and_initializes_a_resume() -> None:
    mirror = TreeMirror(ROOT)
    mirror.enqueue(Reached(20, 0, initializes=True))
    mirror.enqueue(Reached(15, 0))
    mirror.enqueue(Reached(30, -1))  # of an earlier watch: void
    effects = list(mirror.drain())
    assert effects == [Moved(), Notify(TreeEvent(TreeEvent.INITIALIZED, None))] and mirror.zxid == 20 and mirror.is_initialized


def test_a_new_sessions_watch_that_failed_is_added_at_the_next_reconnect() -> None:
    """A re-watch after a new session that fails (a retry deadline passed) is reported, and
    tried again when the connection comes back: the cache never stays deaf in a live session."""
    mirror = TreeMirror(ROOT)
    load = mirror.load()
    assert next(load) == AddWatch(None)
    assert isinstance(load.send(FIRST_ZXID), Read)
    effects = [load.send([(b"", _stat(FIRST_ZXID, b"")), []])]
    effects += list(load)
    assert mirror.is_initialized and mirror._watching

    def drain_with(states: list[KazooState], fail: bool) -> list[Any]:
        for state in states:
            mirror.enqueue(state)
        flow, seen, reply = mirror.drain(), [], None
        try:
            effect = next(flow)
            while True:
                seen.append(effect)
                if isinstance(effect, AddWatch) and fail:
                    effect = flow.throw(ConnectionLoss())
                else:
                    effect = flow.send(FIRST_ZXID if isinstance(effect, (AddWatch, RoundTrip)) else reply)
        except StopIteration:
            return seen

    failed = drain_with([KazooState.LOST, KazooState.CONNECTED], fail=True)
    assert [type(e) for e in failed if isinstance(e, (AddWatch, Fault))] == [AddWatch, Fault]
    again = drain_with([KazooState.SUSPENDED, KazooState.CONNECTED], fail=False)
    assert [e for e in again if isinstance(e, AddWatch)] == [AddWatch(FIRST_ZXID - 1)]
    assert any(isinstance(e, QueueBehind) for e in again)  # the fence after its history
    quiet = drain_with([KazooState.SUSPENDED, KazooState.CONNECTED], fail=False)
    assert not [e for e in quiet if isinstance(e, AddWatch)]  # owed no more: the session's watch stands
