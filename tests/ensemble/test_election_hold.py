"""Clients held through an election (``electionClientHoldMs``, ``Engine._stop_serving``), with
real server processes and kazoo: a follower whose leader dies keeps its idle clients connected
while the ensemble elects, so they see no disconnection (a Curator LeaderLatch keeps its
leadership, a watch set before fires after); one cut off for longer than the hold closes them,
and a write while held closes its connection at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss
from kazoo.protocol.states import WatchedEvent

from zabby.testing import Ensemble, wait_until

TICK_MS = 500


class Watched:
    """A kazoo client on one server, with every state change it went through once started, timed."""

    def __init__(self, hosts: str) -> None:
        self.client = KazooClient(hosts=hosts, timeout=20.0)
        self.states: list[tuple[float, str]] = []
        self.client.add_listener(lambda state: self.states.append((time.monotonic(), state)))
        self.client.start(timeout=20)
        self.states.clear()  # from now: the first CONNECTED is the start's

    def lost_at(self) -> float | None:
        return next((at for at, state in self.states if state != KazooState.CONNECTED), None)

    def stop(self) -> None:
        self.client.stop()
        self.client.close()


def ensemble_holding(tmp_path: Path, hold_ms: int) -> Ensemble:
    group = Ensemble(tmp_path, 3, tickTime=TICK_MS, minSessionTimeout=2 * hold_ms, maxSessionTimeout=40_000, electionClientHoldMs=hold_ms)
    group.start()
    return group


@pytest.fixture
def holding(tmp_path: Path) -> Iterator[Ensemble]:
    group = ensemble_holding(tmp_path, 5_000)
    try:
        yield group
    finally:
        group.kill_all()


def test_an_idle_client_of_a_follower_sees_no_disconnection_when_the_leader_dies(holding: Ensemble) -> None:
    leader = holding.wait_leader(everyone=True)
    follower = min(sid for sid in holding.servers if sid != leader)
    held = Watched(holding.servers[follower].hosts)
    try:
        held.client.create("/held", b"0")
        events: list[WatchedEvent] = []
        fired = threading.Event()
        held.client.get("/held", watch=lambda event: (events.append(event), fired.set()))
        holding.servers[leader].kill()
        new_leader = holding.wait_leader(excluding=leader)
        wait_until(lambda: holding.servers[follower].mode() in ("leader", "follower"), 30, f"server {follower} serving again")
        writer = KazooClient(hosts=holding.servers[new_leader].hosts, timeout=20.0)
        writer.start(timeout=20)
        try:
            writer.set("/held", b"1")
        finally:
            writer.stop()
            writer.close()
        assert fired.wait(20), "the watch set before the election did not fire after it"
        assert [(event.type, event.path) for event in events] == [("CHANGED", "/held")]
        held.client.set("/held", b"2")  # the held session writes through the new leader
        assert held.client.get("/held")[0] == b"2"
        assert held.states == [], f"the held client went through {held.states}"
    finally:
        held.stop()


def test_a_follower_cut_off_longer_than_the_hold_closes_its_clients_and_a_write_closes_at_once(tmp_path: Path) -> None:
    hold_ms = 4_000
    group = ensemble_holding(tmp_path, hold_ms)
    idle = reader = None
    try:
        leader = group.wait_leader(everyone=True)
        follower = min(sid for sid in group.servers if sid != leader)
        idle, reader = Watched(group.servers[follower].hosts), Watched(group.servers[follower].hosts)
        reader.client.create("/x", b"before")
        killed = time.monotonic()
        for sid in group.servers:
            if sid != follower:
                group.servers[sid].kill()
        wait_until(lambda: group.servers[follower].mode() == "not serving", 10, f"server {follower} not serving")
        assert reader.client.get("/x")[0] == b"before"  # held: reads are answered from this server's tree
        assert reader.lost_at() is None
        with pytest.raises(ConnectionLoss):
            reader.client.create("/y", b"no quorum")  # a write closes the connection: the client goes elsewhere
        wait_until(lambda: idle.lost_at() is not None, hold_ms / 1000 + 20, "the idle client disconnected")
        lost_after_s = idle.lost_at() - killed  # type: ignore[operator]
        assert lost_after_s >= hold_ms / 1000 - 0.5, f"the idle client was disconnected {lost_after_s:.2f} s after its quorum went"
        assert reader.lost_at() < idle.lost_at()  # type: ignore[operator]
    finally:
        for client in (idle, reader):
            if client is not None:
                client.stop()
        group.kill_all()
