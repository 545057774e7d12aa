"""The one async Client under asyncio, on its own event loop and on uvloop (the same code the trio tests run): operations, watches
(plain and coroutine callbacks, the async iterator), cancellation, timeouts, reconnects."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
import trio
import uvloop

from harness.local.netproxy import ProxyHub
from zabby import Client, EventType, KazooState, KazooTimeoutError, WatchedEvent, ZnodeStat
from zabby.errors import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from zabby.opcodes import AddWatchMode
from zabby.testing import ServerProcess, free_port


async def until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait (bounded) for ``predicate()`` to hold."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


Run = Callable[[Callable[[], Awaitable[Any]]], Any]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run:
    """Run a test's ``main`` (bounded) on asyncio's own event loop, and on uvloop's."""
    loop_factory = uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop

    def run_main(main: Callable[[], Awaitable[Any]]) -> Any:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            assert isinstance(runner.get_loop(), uvloop.Loop) == (request.param == "uvloop")
            return runner.run(asyncio.wait_for(main(), 60))  # type: ignore[arg-type]

    return run_main


def test_operations_under_asyncio(zabby_server: ServerProcess, run: Run) -> None:
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


def test_a_cancelled_call_is_abandoned_and_the_session_goes_on(zabby_server: ServerProcess, run: Run) -> None:
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


def test_watch_callbacks_plain_and_coroutine_in_order(zabby_server: ServerProcess, run: Run) -> None:
    async def main() -> None:
        async with Client(zabby_server.hosts, timeout=4.0) as c:
            heard: list[tuple[str, EventType, str | None]] = []

            def plain(event: WatchedEvent) -> None:
                heard.append(("plain", event.type, event.path))

            async def coroutine(event: WatchedEvent) -> None:
                await asyncio.sleep(0.05)  # awaited in the delivery task: later events wait for it
                heard.append(("coroutine", event.type, event.path))

            assert await c.exists("/w", watch=coroutine) is None
            await c.create("/w", b"0")
            await c.get("/w", watch=plain)
            await c.set("/w", b"1")
            await c.add_watch("/w", coroutine)
            await c.set("/w", b"2")
            await c.delete("/w")
            await until(lambda: len(heard) == 4)
            assert heard == [("coroutine", EventType.CREATED, "/w"), ("plain", EventType.CHANGED, "/w"),
                             ("coroutine", EventType.CHANGED, "/w"), ("coroutine", EventType.DELETED, "/w")]  # fmt: skip

    run(main)


def test_watch_as_an_async_iterator(zabby_server: ServerProcess, run: Run) -> None:
    async def main() -> None:
        async with Client(zabby_server.hosts, timeout=4.0) as c:
            await c.create("/it", b"")
            async with c.watch("/it", mode=AddWatchMode.PERSISTENT_RECURSIVE) as events:
                await c.create("/it/a", b"")
                await c.set("/it/a", b"1")
                await c.delete("/it/a")
                seen = []
                async for event in events:
                    seen.append((event.type, event.path))
                    if len(seen) == 3:
                        break
                assert seen == [(EventType.CREATED, "/it/a"), (EventType.CHANGED, "/it/a"), (EventType.DELETED, "/it/a")]
            assert c._proto.watches.every_feed() == []  # the block's exit removed the watch
            await c.set("/it", b"after")  # no watcher is left to hear it
            since = (await c.get("/it"))[1].mzxid
            await c.set("/it", b"later")
            async with c.watch("/it", since_zxid=since - 1) as replay:  # the history first
                first = await replay.__anext__()
                assert (first.type, first.zxid) == (EventType.CHANGED, since)
                assert (await replay.__anext__()).zxid > since
        ended = [event async for event in events]  # closed: the iteration is over
        assert ended == []

    run(main)


def test_the_iterator_ends_with_the_session(zabby_server: ServerProcess, run: Run) -> None:
    async def main() -> None:
        c = Client(zabby_server.hosts, timeout=4.0)
        await c.start()
        stream = c.watch("/gone")
        await stream.open()
        await c.close()
        events = [event async for event in stream]
        assert [(e.type, e.state) for e in events] == [(EventType.NONE, "CLOSED")]

    run(main)


def test_start_times_out_on_a_closed_port_and_a_silent_server(run: Run) -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel's backlog), never answers
    try:
        for hosts in (f"127.0.0.1:{free_port()}", f"127.0.0.1:{silent.getsockname()[1]}"):

            async def main(hosts: str = hosts) -> float:
                c = Client(hosts, timeout=1.0)
                started = time.monotonic()
                with pytest.raises(KazooTimeoutError, match="Connection time-out"):
                    await c.start(timeout=1.0)
                return time.monotonic() - started

            assert run(main) < 5.0
    finally:
        silent.close()


def test_reconnects_to_the_same_session_after_the_server_drops_the_connection(zabby_server: ServerProcess, run: Run) -> None:
    hub = ProxyHub()
    proxy = hub.add(zabby_server.port, "client")

    async def main() -> None:
        async with Client(f"127.0.0.1:{proxy.port}", timeout=4.0) as c:
            states: list[KazooState] = []
            c.add_listener(states.append)
            session = c.client_id
            await c.create("/eph", b"", ephemeral=True)
            events: list[WatchedEvent] = []
            await c.get("/eph", watch=events.append)
            assert await asyncio.to_thread(proxy.reset_connections) == 1
            await until(lambda: states == [KazooState.SUSPENDED, KazooState.CONNECTED])
            assert c.client_id == session
            assert (await c.exists("/eph")).ephemeralOwner == session[0]  # type: ignore[union-attr, index]
            await c.delete("/eph")  # the watch set before the drop was set again
            await until(lambda: len(events) == 1)
            assert events[0].type == EventType.DELETED

    try:
        run(main)
    finally:
        hub.close()


def test_one_client_started_again_under_another_event_loop(zabby_server: ServerProcess) -> None:
    client = Client(zabby_server.hosts, timeout=4.0)  # made outside any loop

    async def session(name: str) -> None:
        async with client:
            heard: list[WatchedEvent] = []
            await client.create(f"/{name}", b"")
            await client.get(f"/{name}", watch=heard.append)
            await client.delete(f"/{name}")
            for _ in range(1000):  # bounded: the watch fires within 10 s
                if heard:
                    break
                await anyio.sleep(0.01)
            assert [event.type for event in heard] == [EventType.DELETED]

    asyncio.run(session("first"))
    trio.run(session, "second")
    asyncio.run(session("third"))
