"""A hand-driven engine for unit tests: a fake clock, a freezer that copies the tree's
records (as the simulator's does), and a driver that answers every effect and records it."""

from __future__ import annotations

import random
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

from zabby.config import PeerAddress, ServerConfig
from zabby.core.peer import DurableState
from zabby.engine import Append, Engine, Persist, Recovered, Reload, core_timing
from zabby.engine.effects import CheckSpace, Effect
from zabby.opcodes import OpCode
from zabby.tree.acl import OPEN_ACL_UNSAFE
from zabby.tree.datatree import DataTree
from zabby.tree.txns import Txn, make_zxid


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def wall_ms(self) -> int:
        return self.now_ms

    def monotonic_ms(self) -> int:
        return self.now_ms


class CopyFreezer:
    """Images are copies of the records, taken at the call (what a fork gives the server)."""

    def __init__(self) -> None:
        self.discarded: list[Any] = []

    def image_for_peer(self, tree: DataTree, sid: int) -> tuple[Any, ...]:
        return tuple(tree.records())

    def image_for_disk(self, tree: DataTree) -> tuple[Any, ...]:
        return tuple(tree.records())

    def discard(self, image: Any) -> None:
        self.discarded.append(image)


def create(counter: int, epoch: int = 1) -> Txn:
    return Txn(make_zxid(epoch, counter), 0x77, counter, 1000 + counter, int(OpCode.CREATE),
               (f"/n{counter}", b"v", OPEN_ACL_UNSAFE, 0, counter))  # fmt: skip


def tree_of(txns: list[Txn]) -> DataTree:
    tree = DataTree()
    for txn in txns:
        tree.apply(txn)
    return tree


def make_engine(txns: list[Txn] = (), *, servers: int = 3, sid: int = 1, **settings: Any) -> Engine:  # type: ignore[assignment]
    peers = tuple(PeerAddress(i, "127.0.0.1", 1000 + i, 2000 + i) for i in range(1, servers + 1)) if servers > 1 else ()
    config = ServerConfig(data_dir=Path("/nowhere"), data_log_dir=Path("/nowhere"), tick_ms=200, peers=peers, server_id=sid, **settings)
    core_tick_ms, peer_config = core_timing(config)
    tree = tree_of(list(txns))
    last = tree.last_zxid
    durable = DurableState(accepted_epoch=1, current_epoch=1, last_logged=last, applied=last, history=tuple(txns))
    return Engine(config, peer_config, core_tick_ms, Recovered(tree, durable), clock=FakeClock(),
                  freezer=CopyFreezer(), rng=random.Random(7))  # fmt: skip


class Driver:
    """Carries out effects in memory and records them; ``disk`` is what a Reload finds."""

    def __init__(self, engine: Engine, disk_txns: list[Txn] = ()) -> None:  # type: ignore[assignment]
        self.engine = engine
        self.disk_txns = list(disk_txns)
        self.effects: list[Effect] = []
        self.fail_next: dict[type, BaseException] = {}
        self.syncs_at_once = True  # an Append's sync: done at once (inline), or left to the test's log_synced
        self.on_effect: Callable[[Effect], None] | None = None  # told each effect as it is handed out, before it is carried out

    def answer(self, effect: Effect) -> Any:
        failure = self.fail_next.pop(type(effect), None)
        if failure is not None:
            raise failure
        if isinstance(effect, Reload):
            tree = tree_of(self.disk_txns)
            last = tree.last_zxid
            return Recovered(tree, DurableState(1, 1, last, last, tuple(self.disk_txns), 0, effect.snapshot_wanted))
        if isinstance(effect, Append):
            return False, self.syncs_at_once or not effect.sync
        if isinstance(effect, (Persist, CheckSpace)):
            return False
        return None

    def run(self, steps_max: int = 1000) -> list[Effect]:
        """Until the engine has nothing to do, turn after turn; the effects it asked for, in order."""

        def step(result: Any, error: BaseException | None) -> Effect | None:
            effect = self.engine.next_effect(result, error)
            while effect is None and self.engine.has_work():
                self.engine.begin_turn()
                effect = self.engine.next_effect(None, None)
            return effect

        self.engine.begin_turn()
        return self.drive(step, steps_max)

    def run_work(self, work: Generator[Effect, Any, None], steps_max: int = 1000) -> list[Effect]:
        """One unit of the engine's work (a generator of its own), to its end."""

        def step(result: Any, error: BaseException | None) -> Effect | None:
            try:
                return work.throw(error) if error is not None else work.send(result)
            except StopIteration:
                return None

        return self.drive(step, steps_max)

    def drive(self, step: Callable[[Any, BaseException | None], Effect | None], steps_max: int) -> list[Effect]:
        done: list[Effect] = []
        result: Any = None
        error: BaseException | None = None
        for _ in range(steps_max):
            effect = step(result, error)
            result, error = None, None
            if effect is None:
                self.effects += done
                return done
            if self.on_effect is not None:
                self.on_effect(effect)
            done.append(effect)
            try:
                result = self.answer(effect)
            except Exception as exc:
                error = exc
        raise AssertionError(f"the engine did not settle in {steps_max} effects")
