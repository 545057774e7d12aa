"""Stateful model test: tree + prep + multi against a plain dict model of ZooKeeper semantics.

The model maps path → node (data, version, cversion, owner, children, zxids).  Every request
is checked twice: its prepare outcome (txn or error code) against the model evolving in
*prepare* order, and, once applied, the tree against the model.  The pipeline rule prepares
several requests before applying them (applying some in between), as the server does.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from zabby.errors import Err, InvariantError, ZabbyError
from zabby.opcodes import CONTAINER_OWNER, CreateMode, EventType, OpCode, is_session_owner
from zabby.tree.datatree import DataTree, TreeBuilder, records_digest
from zabby.tree.paths import basename, join, parent_of, sequential_name
from zabby.tree.prep import PROTECTED_PATHS
from zabby.tree.txns import Txn

from .harness import OPEN, Harness

SESSIONS = (0x1001, 0x1002, 0x1003)
NAMES = ("a", "b", "c")
DATAS = (b"", b"x", b"yy", b"\x00\xff")
MODES = (
    CreateMode.PERSISTENT,
    CreateMode.EPHEMERAL,
    CreateMode.PERSISTENT_SEQUENTIAL,
    CreateMode.EPHEMERAL_SEQUENTIAL,
    CreateMode.CONTAINER,
)
CREATED, DELETED, CHANGED, CHILD = (
    EventType.NODE_CREATED,
    EventType.NODE_DELETED,
    EventType.NODE_DATA_CHANGED,
    EventType.NODE_CHILDREN_CHANGED,
)


@dataclass
class MNode:
    data: bytes
    owner: int
    czxid: int
    version: int = 0
    cversion: int = 0
    children: set[str] = field(default_factory=set)
    mzxid: int = 0
    pzxid: int = 0


class Model:
    """ZooKeeper's write semantics over a dict; ``apply_*`` return (error code, result, events)."""

    def __init__(self, tree: DataTree) -> None:
        self.nodes: dict[str, MNode] = {}
        for path, node in tree.nodes.items():  # the initial (system) nodes
            self.nodes[path] = MNode(node.data, node.ephemeral_owner, node.czxid, node.version, node.cversion,
                                     set(node.listing()), node.mzxid, node.pzxid)  # fmt: skip
        self.open_sessions: set[int] = set()

    def clone(self) -> Model:
        return copy.deepcopy(self)

    def user_paths(self) -> list[str]:
        return sorted(p for p in self.nodes if p != "/" and not p.startswith("/zookeeper"))

    # ---------------------------------------------------------------- single ops
    def create(self, path: str, data: bytes, mode: CreateMode, session: int, zxid: int) -> tuple[Err, Any, list]:
        parent_path = parent_of(path)
        parent = self.nodes.get(parent_path)
        if parent is None:
            return Err.NONODE, None, []
        if mode.is_sequential:
            path = sequential_name(path, parent.cversion)
        if path in self.nodes:
            return Err.NODEEXISTS, None, []
        if is_session_owner(parent.owner):
            return Err.NOCHILDRENFOREPHEMERALS, None, []
        owner = session if mode.is_ephemeral else CONTAINER_OWNER if mode == CreateMode.CONTAINER else 0
        self.nodes[path] = MNode(data, owner, zxid, mzxid=zxid, pzxid=zxid)
        parent.children.add(basename(path))
        parent.cversion += 1
        parent.pzxid = zxid
        return Err.OK, path, [(CREATED, path), (CHILD, parent_path)]

    def delete(self, path: str, version: int, zxid: int) -> tuple[Err, Any, list]:
        if path in PROTECTED_PATHS:
            return Err.BADARGUMENTS, None, []
        parent_path = parent_of(path)
        if parent_path not in self.nodes or path not in self.nodes:
            return Err.NONODE, None, []
        node = self.nodes[path]
        if version != -1 and version != node.version:
            return Err.BADVERSION, None, []
        if node.children:
            return Err.NOTEMPTY, None, []
        self._remove(path, zxid)
        return Err.OK, None, [(DELETED, path), (CHILD, parent_path)]

    def _remove(self, path: str, zxid: int) -> None:
        del self.nodes[path]
        parent = self.nodes[parent_of(path)]
        parent.children.discard(basename(path))
        parent.pzxid = zxid

    def set_data(self, path: str, data: bytes, version: int, zxid: int) -> tuple[Err, Any, list]:
        node = self.nodes.get(path)
        if node is None:
            return Err.NONODE, None, []
        if version != -1 and version != node.version:
            return Err.BADVERSION, None, []
        node.data = data
        node.version += 1
        node.mzxid = zxid
        return Err.OK, node.version, [(CHANGED, path)]

    def check(self, path: str, version: int) -> tuple[Err, Any, list]:
        node = self.nodes.get(path)
        if node is None:
            return Err.NONODE, None, []
        if version != -1 and version != node.version:
            return Err.BADVERSION, None, []
        return Err.OK, None, []

    def close(self, session: int, zxid: int) -> tuple[Err, Any, list]:
        events = []
        for path in sorted(p for p, n in self.nodes.items() if n.owner == session):
            self._remove(path, zxid)
            events += [(DELETED, path), (CHILD, parent_of(path))]
        self.open_sessions.discard(session)
        return Err.OK, None, events

    # ---------------------------------------------------------------- dispatch
    def apply(self, request: tuple, session: int, zxid: int) -> tuple[Any, Any, list]:
        kind, *args = request
        if kind == "create":
            return self.create(*args, session, zxid)
        if kind == "delete":
            return self.delete(*args, zxid)
        if kind == "set":
            return self.set_data(*args, zxid)
        if kind == "check":
            return self.check(*args)
        if kind == "close":
            return self.close(session, zxid)
        if kind == "multi":
            scratch = self.clone()
            codes, results, events = [], [], []
            for sub in args[0]:
                code, result, sub_events = scratch.apply(sub, session, zxid)
                codes.append(code)
                results.append(result)
                events += sub_events
                if code != Err.OK:
                    break
            if codes and codes[-1] != Err.OK:
                codes += [Err.RUNTIMEINCONSISTENCY] * (len(args[0]) - len(codes))
                return codes, None, []
            self.__dict__.update(scratch.__dict__)
            return codes, results, events
        raise AssertionError(kind)


def to_prepare(request: tuple, op_choice: int) -> tuple[int, tuple]:
    """The (op, args) a server would hand to ``Preparer.prepare``."""
    kind, *args = request
    if kind == "create":
        path, data, mode = args
        if mode == CreateMode.CONTAINER:
            op = OpCode.CREATE_CONTAINER
        else:
            op = (OpCode.CREATE, OpCode.CREATE2)[op_choice % 2]
        return op, (path, data, OPEN, int(mode), (None, -1)[op_choice % 2])
    if kind == "delete":
        return OpCode.DELETE, tuple(args)
    if kind == "set":
        return OpCode.SET_DATA, tuple(args)
    if kind == "check":
        return OpCode.CHECK, tuple(args)
    if kind == "multi":
        return OpCode.MULTI, ([(op, *op_args) for op, op_args in (to_prepare(sub, op_choice) for sub in args[0])],)
    raise AssertionError(kind)


class TreeMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.h = Harness()
        self.model = Model(self.h.tree)  # evolves in prepare order
        self.queue: list[tuple[Txn, Any]] = []  # prepared, not yet applied: (txn, expected)
        for session in SESSIONS[:2]:
            self.h.open_session(session, 4000, b"pw")
            self.model.open_sessions.add(session)

    # ---------------------------------------------------------------- generation
    def _session(self, data: st.DataObject, model: Model) -> int:
        if model.open_sessions and data.draw(st.integers(0, 3)):
            return data.draw(st.sampled_from(sorted(model.open_sessions)))
        return data.draw(st.sampled_from(SESSIONS))

    def _target(self, data: st.DataObject, model: Model, *, missing_ok: bool = True) -> str:
        paths = model.user_paths()
        if not paths or (missing_ok and data.draw(st.integers(0, 9)) == 0):
            base = data.draw(st.sampled_from(["/"] + paths))
            return join(base, data.draw(st.sampled_from(["nope", *NAMES])))
        return data.draw(st.sampled_from(paths))

    def _version(self, data: st.DataObject, model: Model, path: str) -> int:
        node = model.nodes.get(path)
        current = node.version if node else 0
        return data.draw(st.sampled_from([-1, current, current, current + 1, 0]))

    def _gen_create(self, data: st.DataObject, model: Model, session: int) -> tuple:
        parents = ["/"] + model.user_paths()
        if data.draw(st.integers(0, 7)) == 0:
            parent = join(data.draw(st.sampled_from(parents)), "missing")
        else:
            parent = data.draw(st.sampled_from(parents))
        modes = [m for m in MODES + MODES[1:2] + MODES[3:4] if not m.is_ephemeral or session in model.open_sessions]
        mode = data.draw(st.sampled_from(modes))
        if mode.is_sequential:
            name = data.draw(st.sampled_from(["s-", ""]))
            path = join(parent, name) if name else (parent if parent == "/" else parent + "/")
        else:
            path = join(parent, data.draw(st.sampled_from(NAMES)))
        return ("create", path, data.draw(st.sampled_from(DATAS)), mode)

    def _gen_op(self, data: st.DataObject, model: Model, session: int, kinds: tuple[str, ...]) -> tuple:
        kind = data.draw(st.sampled_from(kinds))
        if kind == "create":
            return self._gen_create(data, model, session)
        if kind == "delete":
            if data.draw(st.integers(0, 19)) == 0:
                return ("delete", data.draw(st.sampled_from(sorted(PROTECTED_PATHS))), -1)
            leaves = [p for p in model.user_paths() if not model.nodes[p].children]
            if leaves and data.draw(st.booleans()):  # leaves, so deletes succeed and empty their parents
                path = data.draw(st.sampled_from(leaves))
            else:
                path = self._target(data, model)
            return ("delete", path, self._version(data, model, path))
        if kind == "set":
            path = "/" if data.draw(st.integers(0, 19)) == 0 else self._target(data, model)
            return ("set", path, data.draw(st.sampled_from(DATAS)), self._version(data, model, path))
        if kind == "check":
            path = self._target(data, model)
            return ("check", path, self._version(data, model, path))
        if kind == "multi":
            scratch = model.clone()  # sub-ops see their predecessors, so chains like /a then /a/b occur
            subs = []
            for _ in range(data.draw(st.integers(1, 4))):
                sub = self._gen_op(data, scratch, session, ("create", "create", "delete", "set", "check"))
                scratch.apply(sub, session, 0)
                subs.append(sub)
            return ("multi", subs)
        if kind == "close":
            return ("close",)
        raise AssertionError(kind)

    # ---------------------------------------------------------------- execution
    def _prepare(self, data: st.DataObject, request: tuple, session: int) -> None:
        """Prepare one request, check the outcome against the model, queue the txn."""
        zxid = self.h.zxid + 1
        if request[0] == "close":
            txn = self.h.prepare_close(session)
            expected = self.model.apply(request, session, zxid)
            self.queue.append((txn, (request, expected)))
            return
        op, args = to_prepare(request, data.draw(st.integers(0, 1)))
        expected = self.model.apply(request, session, zxid)
        code = expected[0]
        event(f"{request[0]} -> {'/'.join(Err(c).name for c in code) if isinstance(code, list) else Err(code).name}")
        if self.queue:
            event(f"prepared with {len(self.queue)} txns in flight")
        try:
            txn = self.h.prepare(op, args, self.h.caller(session))
        except ZabbyError as exc:
            assert request[0] != "multi", f"multi must not raise: {exc!r}"
            assert exc.code == code, (request, exc.code, code)
            return
        if request[0] == "multi":
            assert txn.zxid == zxid
        else:
            assert code == Err.OK, (request, "prepared, but the model says", code)
            if request[0] == "create":
                assert txn.body[0] == expected[1], (txn.body[0], expected[1])
        self.queue.append((txn, (request, expected)))

    def _apply_next(self) -> None:
        txn, (request, (code, result, events)) = self.queue.pop(0)
        got, got_events = self.h.apply(txn)
        kind = request[0]
        if kind == "close":
            assert sorted(got_events) == sorted(events)
            return
        if kind == "multi":
            assert [entry[1] for entry in got] == [int(c) for c in code], (request, got, code)
            if all(c == Err.OK for c in code):
                for (sub_type, _, sub_result), sub, expected_result in zip(got, request[1], result):
                    if sub[0] == "create":
                        assert sub_result[0] == expected_result
                    elif sub[0] == "set":
                        assert sub_result[4] == expected_result
            else:
                assert all(sub_type == OpCode.ERROR for sub_type, _, _ in got)
        elif kind == "create":
            assert got[0] == result
        elif kind == "set":
            assert got[4] == result
        assert got_events == events, (request, got_events, events)

    def _drain(self) -> None:
        while self.queue:
            self._apply_next()

    def _one(self, data: st.DataObject, kinds: tuple[str, ...]) -> None:
        session = self._session(data, self.model)
        self._prepare(data, self._gen_op(data, self.model, session, kinds), session)
        self._drain()

    # ---------------------------------------------------------------- rules
    @rule(data=st.data())
    def create(self, data: st.DataObject) -> None:
        self._one(data, ("create",))

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        self._one(data, ("delete",))

    @rule(data=st.data())
    def set_data(self, data: st.DataObject) -> None:
        self._one(data, ("set",))

    @rule(data=st.data())
    def multi(self, data: st.DataObject) -> None:
        self._one(data, ("multi",))

    @rule(data=st.data())
    def check_alone_is_not_a_write(self, data: st.DataObject) -> None:
        """CHECK is only valid inside multi as a request; prep still validates it alone."""
        session = self._session(data, self.model)
        path = self._target(data, self.model)
        self._prepare(data, ("multi", [("check", path, self._version(data, self.model, path))]), session)
        self._drain()

    @precondition(lambda self: len(self.model.open_sessions) < len(SESSIONS))
    @rule(data=st.data())
    def open_session(self, data: st.DataObject) -> None:
        session = data.draw(st.sampled_from(sorted(set(SESSIONS) - self.model.open_sessions)))
        assert self.h.open_session(session, 4000, b"pw") == session
        self.model.open_sessions.add(session)

    @precondition(lambda self: bool(self.model.open_sessions))
    @rule(data=st.data())
    def close_session(self, data: st.DataObject) -> None:
        session = data.draw(st.sampled_from(sorted(self.model.open_sessions)))
        self._prepare(data, ("close",), session)
        self._drain()

    @rule(data=st.data(), k=st.integers(2, 6))
    def pipeline(self, data: st.DataObject, k: int) -> None:
        """Prepare k requests before applying them (sometimes applying a few in between)."""
        for _ in range(k):
            session = self._session(data, self.model)
            kinds = ("create", "create", "delete", "set", "multi") + (("close",) if session in self.model.open_sessions else ())
            self._prepare(data, self._gen_op(data, self.model, session, kinds), session)
            if self.queue and data.draw(st.integers(0, 3)) == 0:
                for _ in range(data.draw(st.integers(1, len(self.queue)))):
                    self._apply_next()
        self._drain()

    # ---------------------------------------------------------------- invariants
    @invariant()
    def tree_matches_model(self) -> None:
        if not hasattr(self, "h"):
            return
        assert not self.queue
        tree, model = self.h.tree, self.model
        assert self.h.prep.pending == {}
        assert set(tree.nodes) == set(model.nodes)
        for path, expected in model.nodes.items():
            node = tree.nodes[path]
            st_ = node.stat()
            assert node.data == expected.data, path
            assert node.version == expected.version, path
            assert node.cversion == expected.cversion, path
            assert node.ephemeral_owner == expected.owner, path
            assert set(node.listing()) == expected.children, path
            assert node.listing() == sorted(expected.children), path  # cached: must follow changes
            assert list(node.children) == sorted(join(path, name) for name in expected.children), path
            assert st_[9] == len(expected.children), path
            assert (node.czxid, node.mzxid, node.pzxid) == (expected.czxid, expected.mzxid, expected.pzxid), path
        assert set(tree.sessions) == model.open_sessions

    @invariant()
    def tree_is_consistent(self) -> None:
        if not hasattr(self, "h"):
            return
        tree = self.h.tree
        for path, node in tree.nodes.items():
            for child in node.children:  # the children are their full paths, sorted
                assert child in tree.nodes and parent_of(child) == path
            if path != "/":
                assert path in tree.nodes[parent_of(path)].children
        ephemerals: dict[int, set[str]] = {}
        for path, node in tree.nodes.items():
            if is_session_owner(node.ephemeral_owner):
                ephemerals.setdefault(node.ephemeral_owner, set()).add(path)
                assert not node.children
        assert tree.ephemerals == ephemerals
        assert tree.containers == {p for p, n in tree.nodes.items() if n.ephemeral_owner == CONTAINER_OWNER}
        assert tree.data_size == sum(len(p) + len(n.data) for p, n in tree.nodes.items())
        assert tree.digest == tree.compute_digest()  # kept incrementally: must follow every change

    @invariant()
    def snapshot_round_trips(self) -> None:
        if not hasattr(self, "h"):
            return
        records = list(self.h.tree.records())
        builder = TreeBuilder()
        for start in range(0, len(records), 3):  # in chunks, as a SNAP stream arrives
            builder.add(records[start : start + 3])
        restored = builder.finish()
        assert {path: node.listing() for path, node in restored.nodes.items()} == {
            path: node.listing() for path, node in self.h.tree.nodes.items()}  # fmt: skip
        assert restored.content_hash() == self.h.tree.content_hash()
        assert restored.data_size == self.h.tree.data_size
        assert restored.ephemerals == self.h.tree.ephemerals
        assert restored.last_zxid == self.h.tree.last_zxid
        assert restored.digest == self.h.tree.digest  # the same content, the same digest
        # the digest computed apart from the build (a SNAP's or a restart's digest child)
        assert records_digest(iter(records)) == self.h.tree.digest
        without = TreeBuilder(digest=False)
        without.add(records)
        tree = without.finish()
        assert tree.digest_at(tree.last_zxid) is None  # no digest to compare until it comes
        tree.adopt_digest(records_digest(records))
        assert tree.digest == tree.compute_digest() == self.h.tree.digest
        assert tree.digest_at(tree.last_zxid) == self.h.tree.digest
        unhelped = TreeBuilder(digest=False)  # where the digest could not be computed apart
        unhelped.add(records)
        tree = unhelped.finish()
        tree.adopt_digest(None)
        assert tree.digest == tree.digest_at(tree.last_zxid) == self.h.tree.digest


TreeMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_tree_model = TreeMachine.TestCase


def test_records_digest_refuses_records_the_header_does_not_count() -> None:
    tree = DataTree()
    tree.add_session(0x1234, 30_000, b"p" * 16)
    records = list(tree.records())
    assert records_digest(records) == tree.compute_digest()
    with pytest.raises(InvariantError, match="1 znodes fewer"):
        records_digest(records[:-1])
    with pytest.raises(InvariantError, match="1 znodes more"):
        records_digest([*records, records[-1]])


def test_a_tree_adopts_a_digest_once() -> None:
    builder = TreeBuilder(digest=False)
    builder.add(DataTree().records())
    tree = builder.finish()
    tree.adopt_digest(DataTree().digest)
    with pytest.raises(InvariantError, match="has its digest"):
        tree.adopt_digest(0)
