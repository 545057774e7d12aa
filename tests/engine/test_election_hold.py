"""A server that stops serving holds its idle clients for ``electionClientHoldMs`` (see
``Engine._stop_serving``): an election that gives it a leader again sooner passes them by; a
longer one, or a tree replaced under them, closes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.engine.helpers import Driver, create, make_engine
from zabby.config import ConfigError, from_dict
from zabby.core.messages import Revalidate
from zabby.core.ready import SoftState
from zabby.core.types import ServerState, ZabPhase
from zabby.engine import ClientsKept, CloseClients, Engine

SERVING = SoftState(ServerState.FOLLOWING, ZabPhase.BROADCAST, 2, 1, True)
LOOKING = SoftState(ServerState.LOOKING, ZabPhase.ELECTION, None, 1, False)
SYNCING = SoftState(ServerState.FOLLOWING, ZabPhase.SYNCHRONIZATION, 3, 2, False)
SERVING_AGAIN = SoftState(ServerState.FOLLOWING, ZabPhase.BROADCAST, 3, 2, True)


class Sink:
    def __init__(self, session_id: int) -> None:
        self.session_id = session_id

    def send_events(self, zxid: int, events: list[tuple[int, str]]) -> None:
        pass

    def close_after_flush(self) -> None:
        pass


def serving_follower(**settings: Any) -> tuple[Engine, Driver]:
    engine = make_engine([create(1)], **settings)
    driver = Driver(engine)
    engine._set_soft(SERVING)
    engine.attach(0x42, Sink(0x42))
    return engine, driver


def closes(driver: Driver, work: object) -> list[CloseClients]:
    return [effect for effect in driver.run_work(work) if isinstance(effect, CloseClients)]  # type: ignore[arg-type]


def test_an_election_shorter_than_the_hold_closes_only_the_busy_clients() -> None:
    engine, driver = serving_follower(election_client_hold_ms=1500)
    assert closes(driver, engine._change_state(LOOKING)) == [CloseClients(ClientsKept.IDLE)]
    engine.clock.now_ms += 600  # type: ignore[attr-defined]
    assert closes(driver, engine._tick()) == []
    assert closes(driver, engine._change_state(SYNCING)) == [CloseClients(ClientsKept.HELD)]  # read-only sessions, none held
    engine.clock.now_ms += 600  # type: ignore[attr-defined]
    assert closes(driver, engine._change_state(SERVING_AGAIN)) == []
    engine.clock.now_ms += 5000  # type: ignore[attr-defined]
    assert closes(driver, engine._tick()) == []  # served again: nothing is held any more


def test_held_clients_are_closed_when_the_hold_runs_out() -> None:
    engine, driver = serving_follower(election_client_hold_ms=1500)
    driver.run_work(engine._change_state(LOOKING))
    engine.clock.now_ms += 1499  # type: ignore[attr-defined]
    assert closes(driver, engine._tick()) == []
    engine.clock.now_ms += 1  # type: ignore[attr-defined]
    assert closes(driver, engine._tick()) == [CloseClients(ClientsKept.UNHELD)]  # a read-only session made meanwhile stays
    engine.clock.now_ms += 5000  # type: ignore[attr-defined]
    assert closes(driver, engine._tick()) == []


def test_a_tree_replaced_under_held_clients_closes_them() -> None:
    """Their watches and what they read are of the old tree (a SNAP, a reload after a TRUNC)."""
    engine, driver = serving_follower(election_client_hold_ms=1500)
    driver.run_work(engine._change_state(LOOKING))
    assert closes(driver, engine._replace_tree(engine.tree)) == [CloseClients()]
    assert engine._clients_held_since_ms is None


def test_the_hold_counts_from_when_the_leader_was_last_heard() -> None:
    """A follower cut off from a leader that lives on notices after syncLimit: that leader
    heard none of its sessions' touches since, so the hold began then."""
    engine, driver = serving_follower(election_client_hold_ms=1500)
    engine.peer.leader_silent_ticks = 1500 // engine.core_tick_ms
    assert closes(driver, engine._change_state(LOOKING)) == [CloseClients()]
    engine, driver = serving_follower(election_client_hold_ms=1500)
    engine.peer.leader_silent_ticks = 1000 // engine.core_tick_ms
    assert closes(driver, engine._change_state(LOOKING)) == [CloseClients(ClientsKept.IDLE)]
    engine.clock.now_ms += 499  # type: ignore[attr-defined]
    assert closes(driver, engine._tick()) == []
    engine.clock.now_ms += 1  # type: ignore[attr-defined]
    assert closes(driver, engine._tick()) == [CloseClients(ClientsKept.UNHELD)]


def test_a_server_that_serves_again_but_not_clients_closes_the_held_ones() -> None:
    """Elected leader with leaderServes=no: its clients would not be taken now."""
    engine, driver = serving_follower(election_client_hold_ms=1500, leader_serves=False)
    driver.run_work(engine._change_state(LOOKING))
    leading = SoftState(ServerState.LEADING, ZabPhase.BROADCAST, 1, 2, True)
    assert closes(driver, engine._change_state(leading)) == [CloseClients()]
    assert engine._clients_held_since_ms is None


def test_under_zookeepers_protocol_a_learner_serving_again_revalidates_its_held_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ZooKeeper leader answers a session's writes only from the learner link it last heard
    the session on (SESSIONMOVED otherwise): serving again, the learner sends the REVALIDATE
    a reconnect would have sent, ahead of the session's next write."""
    engine, driver = serving_follower(election_client_hold_ms=1500, quorum_protocol="zookeeper")
    engine.tree.sessions[0x42] = (4000, b"password")
    driver.run_work(engine._change_state(LOOKING))
    forwarded: list[object] = []
    monkeypatch.setattr(type(engine.peer), "learner", property(lambda peer: object()))
    monkeypatch.setattr(engine.peer, "forward", forwarded.append)
    assert closes(driver, engine._change_state(SERVING_AGAIN)) == []
    assert forwarded == [Revalidate(session_id=0x42, timeout_ms=4000)]


def test_no_hold_closes_every_client_as_zookeeper_does() -> None:
    engine, driver = serving_follower(election_client_hold_ms=0)
    assert closes(driver, engine._change_state(LOOKING)) == [CloseClients()]


def test_a_restart_of_the_core_holds_nobody() -> None:
    engine, driver = serving_follower(election_client_hold_ms=1500)
    assert closes(driver, engine._stop_serving(hold=False)) == [CloseClients()]
    assert engine._clients_held_since_ms is None


def config(tmp_path: Path, **raw: str) -> dict[str, str]:
    (tmp_path / "myid").write_text("1")
    return {"dataDir": str(tmp_path), "clientPort": "2181", "server.1": "127.0.0.1:2888:3888", "server.2": "127.0.0.1:2889:3889", **raw}


def test_the_hold_defaults_to_a_tick_and_is_at_most_half_the_shortest_session(tmp_path: Path) -> None:
    assert from_dict(config(tmp_path)).election_client_hold_ms == 2000
    assert from_dict(config(tmp_path, tickTime="200")).election_client_hold_ms == 200
    assert from_dict(config(tmp_path, tickTime="2000", minSessionTimeout="1000")).election_client_hold_ms == 500
    assert from_dict(config(tmp_path, electionClientHoldMs="0")).election_client_hold_ms == 0
    with pytest.raises(ConfigError, match="more than half of minSessionTimeout"):
        from_dict(config(tmp_path, electionClientHoldMs="2001"))
    with pytest.raises(ConfigError, match="at least 0"):
        from_dict(config(tmp_path, electionClientHoldMs="-1"))
