"""The one async Client under asyncio (the same code the trio tests run): operations, watches
(plain and coroutine callbacks, the async iterator), cancellation, timeouts, reconnects."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from zabby import Client, KazooState, ZnodeStat
from zabby.errors import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from zabby.local.processes import ServerProcess


async def until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait (bounded) for ``predicate()`` to hold."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(main(), 60))  # type: ignore[arg-type]


def test_operations_under_asyncio(zabby_server: ServerProcess) -> None:
    async def main() -> None:
        async with Client(zabby_server.hosts, timeout=4.0) as c:
            assert c.connected and c.state == KazooState.CONNECTED and c.client_id is not None
            assert await c.create("/a", b"1") == "/a"
            with pytest.raises(NodeExistsError):
                await c.create("/a", b"")
            assert await c.create("/a/b/c", b"x", makepath=True) == "/a/b/c"
            data, stat = await c.get("/a")
            assert data == b"1" and isinstance(stat, ZnodeStat) and stat.numChildren == 1
            assert (await c.set("/a", b"2", version=0)).version == 1
            with pytest.raises(BadVersionError):
                await c.set("/a", b"3", version=0)
            with pytest.raises(NotEmptyError):
                await c.delete("/a")
            results = await asyncio.gather(*(c.create(f"/a/p{i}", b"") for i in range(200)))  # pipelined
            assert len(set(results)) == 200 and await c.get_all_children_number("/a") == 202
            assert await c.delete("/a", recursive=True) is True
            with pytest.raises(NoNodeError):
                await c.get("/a")
        assert c.state == KazooState.LOST

    run(main)


def test_a_cancelled_call_is_abandoned_and_the_session_goes_on(zabby_server: ServerProcess) -> None:
    async def main() -> None:
        async with Client(zabby_server.hosts, timeout=4.0) as c:
            states: list[KazooState] = []
            c.add_listener(states.append)
            session = c.client_id
            await c.create("/before", b"")
            future_zxid = c.last_zxid + 1000  # the server holds the reply (up to 1 s)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(c.wait_for_zxid(future_zxid, timeout=1.0), 0.1)
            task = asyncio.create_task(c.wait_for_zxid(future_zxid, timeout=1.0))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await c.create("/after", b"ok") == "/after"  # answered after the abandoned ones
            assert (await c.get("/after"))[0] == b"ok"
            assert c.client_id == session and c.connected and states == []

    run(main)
