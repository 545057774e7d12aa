"""Read-only mode (ZooKeeper's ``readonlymode.enabled``) in the engine: a server looking for a
leader for long enough serves reads to read-only sessions, refuses writes and syncs with
NOTREADONLY, and closes those sessions' connections once it joins a quorum again."""

from __future__ import annotations

import pytest

from tests.engine.helpers import Driver, create, make_engine
from zabby.core.ready import SoftState
from zabby.core.types import ServerState, ZabPhase
from zabby.engine import CloseClients, Engine
from zabby.errors import Err, ZabbyError
from zabby.opcodes import OpCode
from zabby.tree.prep import Caller


class Sink:
    session_id = 0

    def send_events(self, zxid: int, events: list[tuple[int, str]]) -> None:
        pass

    def close_after_flush(self) -> None:
        pass


def test_off_by_default_and_only_after_looking_for_a_while() -> None:
    assert not make_engine().read_only
    engine = make_engine(read_only_enabled=True)
    assert not engine.read_only and engine.state == "looking"
    engine.clock.now_ms += 1999  # type: ignore[attr-defined]
    assert not engine.read_only
    engine.clock.now_ms += 1  # type: ignore[attr-defined]
    assert engine.read_only and engine.state == "read-only"


def read_only_engine() -> tuple:
    engine = make_engine([create(1)], read_only_enabled=True)
    Driver(engine).run()
    engine.clock.now_ms += 2000  # type: ignore[attr-defined]
    return engine, Driver(engine)


def assert_writes_and_syncs_refused(engine: Engine, code: Err) -> None:
    with pytest.raises(ZabbyError) as refused:
        engine.submit(int(OpCode.CREATE), ("/x", b"", [], 0, None), Caller(0, []), 1, lambda txn, result: None)
    assert refused.value.code == code
    with pytest.raises(ZabbyError) as refused:
        engine.client_sync(0, 2, lambda: None)
    assert refused.value.code == code


def test_writes_and_syncs_answer_not_read_only() -> None:
    engine, _ = read_only_engine()
    assert_writes_and_syncs_refused(engine, Err.NOTREADONLY)


def test_local_sessions_live_with_their_connection_and_go_when_a_leader_is_found() -> None:
    engine, driver = read_only_engine()
    session_id, password = engine.create_local_session(4000)
    assert engine.check_session(session_id, password) == 4000
    assert session_id not in engine.tree.sessions  # never replicated
    sink = Sink()
    sink.session_id = session_id
    engine.attach(session_id, sink)
    following = SoftState(ServerState.FOLLOWING, ZabPhase.SYNCHRONIZATION, 2, 1, False)
    assert driver.run_work(engine._change_state(following)) == [CloseClients()]
    assert not engine.read_only and engine.check_session(session_id, password) is None


def test_no_local_session_unless_read_only() -> None:
    with pytest.raises(ZabbyError):
        make_engine(read_only_enabled=True).create_local_session(4000)


def test_a_learner_whose_core_left_its_leader_refuses_writes_until_the_shell_catches_up() -> None:
    """Jepsen reconfig run (seed 14201): a reconfig committed that took the leader out; the
    follower's core went looking in the Ready being carried out while the shell still showed
    it serving, and a client write in that window hit ``forward`` with no leader to forward to
    (InvariantError: only a learner forwards requests).  It is a lost connection instead."""
    engine = make_engine([create(1)])
    Driver(engine).run()
    assert engine.peer.learner is None  # the core is looking...
    engine.soft = SoftState(ServerState.FOLLOWING, ZabPhase.BROADCAST, 2, 1, True)  # ...the shell not yet
    assert_writes_and_syncs_refused(engine, Err.CONNECTIONLOSS)
