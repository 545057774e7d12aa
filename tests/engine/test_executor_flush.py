"""The shell's part of a write's answer: ``FlushClients`` writes the answers where the engine asks,
and an inline fsync's time reaches the stats after them but the next Append's choice at once."""

from __future__ import annotations

from typing import Any

import pytest

from zabby.engine import FLUSH_CLIENTS, Append
from zabby.shell.executor import EffectExecutor


class FakeIO:
    watches_effects = False

    def __init__(self, log: list[Any], flush_error: Exception | None = None) -> None:
        self.log = log
        self.now_s = 0.0
        self.flush_error = flush_error

    def perf_s(self) -> float:
        return self.now_s

    def flush(self) -> None:
        self.log.append("flush")
        if self.flush_error is not None:
            raise self.flush_error

    def settled(self, wake: bool) -> None:
        pass

    def failed(self, exc: Exception) -> None:
        self.log.append(("failed", exc))

    def want_sync(self) -> None:
        self.log.append("background sync")


class FakeStorage:
    space_low = False

    def __init__(self, io: FakeIO, sync_times_s: list[float]) -> None:
        self.io = io
        self.sync_times_s = sync_times_s

    def append(self, txns: Any) -> None:
        self.io.log.append("append")

    def sync(self) -> None:
        self.io.now_s += self.sync_times_s.pop(0)
        self.io.log.append("inline sync")


class FakeStats:
    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def record_fsync(self, seconds: float) -> None:
        self.log.append(("fsync recorded", round(seconds, 3)))


class ScriptedEngine:
    """Hands out the effects given, one at a time, and records what each answered."""

    def __init__(self, effects: list[Any], log: list[Any]) -> None:
        self.effects = effects
        self.stats = FakeStats(log)
        self.outstanding = 0
        self.answers: list[Any] = []

    def next_effect(self, result: Any, error: BaseException | None) -> Any:
        if result is not None or error is not None:
            self.answers.append(error or result)
        return self.effects.pop(0) if self.effects else None

    def has_work(self) -> bool:
        return False


def _executor(effects: list[Any], sync_times_s: list[float], flush_error: Exception | None = None) -> tuple[EffectExecutor, ScriptedEngine, list[Any]]:
    log: list[Any] = []
    io = FakeIO(log, flush_error)
    executor = EffectExecutor(FakeStorage(io, sync_times_s), io, ensemble=True)  # type: ignore[arg-type]
    engine = ScriptedEngine(effects, log)
    executor.drive(engine)  # type: ignore[arg-type]
    return executor, engine, log


def test_answers_leave_where_the_engine_asks_and_the_fsync_is_recorded_after_them() -> None:
    executor, _, log = _executor([Append([1], True), FLUSH_CLIENTS], [0.001])
    executor.run_effects()
    assert log == ["append", "inline sync", "flush", "flush", ("fsync recorded", 0.001)]


def test_a_slow_inline_fsync_sends_the_next_append_of_the_same_loop_to_the_background() -> None:
    # its time counts for the next Append's choice at once, though the stats have it only after the answers left
    executor, _, log = _executor([Append([1], True), FLUSH_CLIENTS, Append([2], True)], [0.5])
    executor.run_effects()
    assert log == ["append", "inline sync", "flush", "append", "background sync", "flush", ("fsync recorded", 0.5)]


def test_each_inline_fsync_is_recorded_once() -> None:
    executor, _, log = _executor([Append([1], True), Append([2], True), FLUSH_CLIENTS], [0.001, 0.002])
    executor.run_effects()
    assert [entry for entry in log if isinstance(entry, tuple)] == [("fsync recorded", 0.001), ("fsync recorded", 0.002)]


def test_a_flush_that_raises_is_the_callers_not_the_engines() -> None:
    # as the flush that ends the loop: the engine does not take it for its effect's failure (and restart)
    executor, engine, log = _executor([FLUSH_CLIENTS, Append([1], False)], [], flush_error=RuntimeError("a broken flush"))
    with pytest.raises(RuntimeError, match="a broken flush"):
        executor.run_effects()
    assert not any(isinstance(entry, tuple) and entry[0] == "failed" for entry in log)
    assert engine.answers == []
