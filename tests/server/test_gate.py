"""What a peer link may queue in the engine while the engine awaits an effect (``zabby.server.peering.gate``):
a link over its budget stops reading until the engine's input queue is empty again; while the
engine is free, no read ever waits."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from tests.server.test_driver import make_server
from zabby.core.messages import Ping
from zabby.server.peering.gate import InputGate


def test_a_link_under_its_budget_never_waits() -> None:
    async def main() -> None:
        gate = InputGate(budget_bytes=100)
        with trio.fail_after(1):
            for _ in range(3):
                await gate.admit(("a", 1), 30)
        assert gate.waits == 0

    trio.run(main)


def test_a_link_over_its_budget_waits_until_drained_and_others_go_on() -> None:
    async def main() -> None:
        gate = InputGate(budget_bytes=100)
        admitted: list[str] = []

        async def reader(link: str, reads: int) -> None:
            for _ in range(reads):
                await gate.admit(link, 60)
            admitted.append(link)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader, "flood", 2)  # 120 bytes: over
            nursery.start_soon(reader, "quiet", 1)  # 60 bytes: under
            await trio.testing.wait_all_tasks_blocked()
            assert admitted == ["quiet"] and gate.waits == 1
            gate.drained()
            await trio.testing.wait_all_tasks_blocked()
            assert admitted == ["quiet", "flood"]

    trio.run(main)


def test_a_forgotten_link_starts_from_zero() -> None:
    async def main() -> None:
        gate = InputGate(budget_bytes=100)
        await gate.admit("link", 90)
        gate.forget("link")
        with trio.fail_after(1):
            await gate.admit("link", 90)

    trio.run(main)


def test_the_server_opens_the_gate_once_the_engine_took_its_queued_input(tmp_path: Path) -> None:
    """Queued input (the engine busy) holds a flooding link; once the driver ran the engine
    and its queue is empty, the link reads on."""

    async def main() -> None:
        server = make_server(tmp_path)
        gate = server.input_gate
        gate.budget_bytes = 100
        released: list[bool] = []

        async def flooding_link() -> None:
            await gate.admit((2, "quorum"), 200)
            released.append(True)

        server.engine.receive(2, Ping())  # queued: nobody ran the engine yet
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flooding_link)
            await trio.testing.wait_all_tasks_blocked()
            assert not released and server.engine.inputs_queued == 1
            server.run_effects()  # the engine takes the queued ping
            assert server.engine.inputs_queued == 0
            await trio.testing.wait_all_tasks_blocked()
            assert released == [True]

    trio.run(main)
