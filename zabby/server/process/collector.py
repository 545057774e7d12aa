"""The cyclic garbage collector of a server process: full collections that skip the tree.

CPython's full collection walks every object of its oldest generation, and starts whenever
the objects promoted into it since the last one reach a quarter of it.  A tree loaded at
start-up or from a SNAP is frozen (``gc.freeze``) and out of that walk, but a tree that grew
from clients' writes is not: at 1M znodes the leader's full collections took 0.3-0.45 s each,
with nothing else running, every few hundred thousand writes (``docs/bench/notes.md``).  The
tree makes no cycles, so walking it finds nothing.

``FullCollections`` freezes what survived each full collection: the next one walks only
what came after it.  Frozen objects that later become cyclic garbage (a closed connection's,
say) are never collected while frozen, so now and then it runs a deep collection over
everything (unfreeze, collect, freeze again): once the frozen objects have doubled since the
last deep one, and ``DEEP_EVERY_S`` after it.  A deep collection costs what every full
collection cost before, that much more rarely.

While it runs, the youngest generation is collected every ``YOUNG_THRESHOLD`` net new
objects rather than CPython's 700.  The requests a busy server has in flight hold thousands
of young objects at any time, so at 700 each young collection walked objects still in use,
and promoted them towards the full collections: pipelined creates on a standalone server ran
1,800 young collections in 12 s (0.46 s of its 10.2 CPU s), against 21 (0.10 s) at 10,000.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import trio

OLDEST_GENERATION = 2
DEEP_EVERY_S = 3600.0
CHECK_EVERY_S = 0.5
YOUNG_THRESHOLD = 10_000
FROZEN_MIN = 100_000  # below this many frozen objects, doubling is no reason for a deep collection


class FullCollections:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._collected = False  # a full collection ended since the last look
        self._deep_at = clock()
        self._frozen_after_deep = gc.get_freeze_count()
        self._frozen_since_deep = 0  # counted as they are frozen: gc.get_freeze_count walks them all
        self.deep_count = 0

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info["generation"] == OLDEST_GENERATION:
            self._collected = True  # acted on outside the collector (see after_full_collection)

    def after_full_collection(self) -> None:
        """Freeze the survivors of a full collection that ended since the last call, or run
        the deep one if it is due; call it from the server's loop, not inside a collection."""
        if not self._collected:
            return
        gc.collect(1)  # the young garbage made since the full collection goes first, not into the freeze
        # what the freeze takes: no more objects than the full collection just walked (counting
        # the frozen ones instead, gc.get_freeze_count, walks millions at 1M znodes: ~20 ms)
        self._frozen_since_deep += sum(len(gc.get_objects(generation)) for generation in range(OLDEST_GENERATION + 1))
        gc.freeze()
        now = self._clock()
        if now - self._deep_at >= DEEP_EVERY_S or self._frozen_since_deep >= max(self._frozen_after_deep, FROZEN_MIN):
            gc.unfreeze()
            gc.collect()
            gc.freeze()
            self._deep_at = now
            self._frozen_after_deep = gc.get_freeze_count()  # after a walk of them all anyway
            self._frozen_since_deep = 0
            self.deep_count += 1
        self._collected = False  # last: the deep collection above notes itself too

    async def run(self) -> None:
        """For as long as the server runs: the callback notes each full collection, this acts."""
        gc.callbacks.append(self._on_collection)
        thresholds = gc.get_threshold()
        gc.set_threshold(YOUNG_THRESHOLD, *thresholds[1:])
        try:
            while True:
                await trio.sleep(CHECK_EVERY_S)
                self.after_full_collection()
        finally:
            gc.set_threshold(*thresholds)
            gc.callbacks.remove(self._on_collection)
