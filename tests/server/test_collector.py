"""FullCollections: what survived a full collection is frozen, so the next one skips it; a
deep collection now and then still finds the cycles that died frozen."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from zabby.server.process import collector
from zabby.server.process.collector import FullCollections


class Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def policy() -> Iterator[tuple[FullCollections, list[float], int]]:
    """A policy with a fake clock, started as a server starts it: its loaded tree frozen
    (here, every object of the test process)."""
    gc.collect()
    gc.freeze()
    now = [0.0]
    full_collections = FullCollections(clock=lambda: now[0])
    gc.callbacks.append(full_collections._on_collection)
    try:
        yield full_collections, now, gc.get_freeze_count()
    finally:
        gc.callbacks.remove(full_collections._on_collection)
        gc.unfreeze()
        gc.collect()


def test_a_full_collection_freezes_its_survivors_and_a_deep_one_comes_in_time(policy: tuple[FullCollections, list[float], int]) -> None:
    full_collections, now, at_start = policy
    cycle = Cycle()
    dead = weakref.ref(cycle)
    full_collections.after_full_collection()
    assert gc.get_freeze_count() <= at_start, "no full collection yet: nothing more to freeze"
    gc.collect()
    full_collections.after_full_collection()
    assert gc.get_freeze_count() > at_start  # the cycle among them
    del cycle
    gc.collect()  # skips the frozen: the dead cycle stays
    full_collections.after_full_collection()
    assert dead() is not None and full_collections.deep_count == 0
    now[0] = collector.DEEP_EVERY_S
    gc.collect()
    full_collections.after_full_collection()  # due: a deep collection, over the frozen too
    assert dead() is None
    assert full_collections.deep_count == 1 and gc.get_freeze_count() > 0
    gc.collect()
    full_collections.after_full_collection()  # the next deep one is an hour away
    assert full_collections.deep_count == 1


def test_a_deep_collection_once_the_frozen_objects_doubled(policy: tuple[FullCollections, list[float], int], monkeypatch: pytest.MonkeyPatch) -> None:
    full_collections, _, at_start = policy
    monkeypatch.setattr(collector, "FROZEN_MIN", 1)
    grown = [Cycle() for _ in range(at_start // 2)]
    gc.collect()
    full_collections.after_full_collection()  # 1.5 times as many: frozen
    assert gc.get_freeze_count() > len(grown) and full_collections.deep_count == 0
    grown += [Cycle() for _ in range(at_start // 2 + 1)]
    gc.collect()
    full_collections.after_full_collection()  # twice as many: a deep collection
    assert full_collections.deep_count == 1 and gc.get_freeze_count() > len(grown)


def test_young_garbage_is_collected_before_a_freeze(policy: tuple[FullCollections, list[float], int]) -> None:
    full_collections, _, _ = policy
    gc.collect()
    cycle = Cycle()  # made after the full collection, dead before the freeze
    dead = weakref.ref(cycle)
    del cycle
    full_collections.after_full_collection()
    assert dead() is None


def test_a_full_collection_does_not_count_the_frozen_objects(policy: tuple[FullCollections, list[float], int], monkeypatch: pytest.MonkeyPatch) -> None:
    """gc.get_freeze_count walks every frozen object (~20 ms at 1M znodes): only a deep
    collection, which walks them anyway, may call it."""
    full_collections, _, _ = policy
    counted: list[int] = []
    count_frozen = gc.get_freeze_count
    monkeypatch.setattr(gc, "get_freeze_count", lambda: counted.append(1) or count_frozen())
    for _ in range(3):
        gc.collect()
        full_collections.after_full_collection()
    assert full_collections.deep_count == 0 and not counted


def test_young_collections_are_spaced_out_while_it_runs_and_restored_after() -> None:
    before = gc.get_threshold()
    seen: list[tuple[int, ...]] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(FullCollections().run)
            await trio.testing.wait_all_tasks_blocked()
            seen.append(gc.get_threshold())
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert seen == [(collector.YOUNG_THRESHOLD, *before[1:])]
    assert gc.get_threshold() == before
