"""The client port's memory budget and the rate-limited log, as units (the real thing against a
real server: tests/server/test_hostile_clients.py)."""

from __future__ import annotations

import logging

import pytest

from zabby.server.clients.budget import ClientMemory
from zabby.server.process.ratelog import RateLimitedLog, RateLimitedLogs

MiB = 2**20


class Holder:
    def __init__(self, memory: ClientMemory, name: str) -> None:
        self.memory, self.name = memory, name
        self.held_bytes = 0
        self.closed: str | None = None

    def hold(self, delta: int) -> None:
        self.held_bytes += delta
        self.memory.charge(self, delta)
        if delta > 0 and self.held_bytes > self.memory.connection_bytes_max and self.closed is None:
            self.memory.over_connection_limit(self)

    def close_for_memory(self, reason: str) -> None:
        self.closed = reason
        self.hold(-self.held_bytes)


def test_over_the_budget_the_largest_holders_over_their_share_are_closed() -> None:
    memory = ClientMemory(budget_bytes=10 * MiB, connection_bytes_max=8 * MiB, frame_bytes_max=MiB)
    small, medium, large = Holder(memory, "small"), Holder(memory, "medium"), Holder(memory, "large")
    small.hold(MiB)
    medium.hold(3 * MiB)
    large.hold(6 * MiB)  # 10 MiB: at the budget, nobody closed
    assert memory.used_bytes == 10 * MiB and memory.closed_count == 0
    medium.hold(MiB)  # over: the largest over its share (10/3 MiB) goes, and that is enough
    assert large.closed is not None and "clientMemoryBudget" in large.closed
    assert small.closed is None and medium.closed is None
    assert memory.used_bytes == 5 * MiB and memory.peak_bytes == 11 * MiB and memory.closed_count == 1


def test_one_connection_over_its_limit_is_closed_alone() -> None:
    memory = ClientMemory(budget_bytes=100 * MiB, connection_bytes_max=8 * MiB, frame_bytes_max=MiB)
    quiet, greedy = Holder(memory, "quiet"), Holder(memory, "greedy")
    quiet.hold(MiB)
    greedy.hold(9 * MiB)
    assert greedy.closed is not None and "clientConnectionMemoryMax" in greedy.closed
    assert quiet.closed is None and memory.used_bytes == MiB
    memory.release(quiet)
    assert memory.used_bytes == 0


def test_pause_leaves_room_for_a_request_and_its_reply() -> None:
    memory = ClientMemory(budget_bytes=256 * MiB, connection_bytes_max=32 * MiB, frame_bytes_max=MiB + 1024)
    assert memory.pause_bytes == 4 * MiB and memory.resume_bytes == 2 * MiB
    big_frames = ClientMemory(budget_bytes=256 * MiB, connection_bytes_max=32 * MiB, frame_bytes_max=8 * MiB)
    assert big_frames.pause_bytes == 16 * MiB


def test_a_flood_of_one_message_is_two_lines(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("zabby.server.process.ratelog.time.monotonic", lambda: now[0])
    logs = RateLimitedLogs(logging.getLogger("test.flood"), 1.0)
    with caplog.at_level(logging.WARNING, logger="test.flood"):
        for i in range(1000):
            logs.warning("per-ip", f"refused {i}")
        logs.warning("memory", "closed one")  # another kind is not held back by the flood
        logs.flush()  # within the interval: nothing yet
        now[0] += 1.5
        logs.flush()
        logs.flush()  # said once
    assert [r.getMessage() for r in caplog.records] == [
        "refused 0", "closed one", "999 more like this in the last 1 s, the last: refused 999",
    ]  # fmt: skip


def test_the_count_rides_on_the_next_message_after_the_interval(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("zabby.server.process.ratelog.time.monotonic", lambda: now[0])
    log = RateLimitedLog(logging.getLogger("test.ride"), 1.0)
    with caplog.at_level(logging.WARNING, logger="test.ride"):
        log.warning("a")
        log.warning("b")
        now[0] += 2
        log.warning("c")
    assert [r.getMessage() for r in caplog.records] == ["a", "c (1 more like it in the last 1 s)"]
