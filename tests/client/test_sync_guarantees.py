"""What the blocking client promises beyond kazoo: stop()/close() return in bounded time
whatever the network does (kazoo #582, #426), a child after fork() gets a clear error and can
make its own client (kazoo #519, #554, #628), a callback that blocks or raises never stops the
client, and ``*_async`` results can be awaited from asyncio and trio."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import trio

from harness.local.netproxy import LinkProxy, Mode, ProxyHub
from zabby import EventType, KazooTimeoutError, SyncClient, WatchedEvent
from zabby.errors import ForkedClientError
from zabby.testing import ServerProcess

from .conftest import wait_until


@pytest.fixture
def proxy(zabby_server: ServerProcess) -> Iterator[LinkProxy]:
    hub = ProxyHub()
    try:
        yield hub.add(zabby_server.port, "client")
    finally:
        hub.close()


def test_stop_and_close_are_bounded_on_a_blackholed_link(proxy: LinkProxy) -> None:
    client = SyncClient(f"127.0.0.1:{proxy.port}", timeout=10.0)
    client.start(timeout=10)
    client.create("/held", b"", ephemeral=True)
    proxy.set_mode(Mode.BLACKHOLE)  # the connection stays open; nothing gets through
    started = time.monotonic()
    client.stop()  # its close request is never answered
    stopped_s = time.monotonic() - started
    assert stopped_s <= client.stop_timeout_s + 1.0
    started = time.monotonic()
    client.close()
    assert time.monotonic() - started <= client.stop_timeout_s + 4.0 + 1.0


def test_start_against_a_silent_listener_times_out_and_close_is_quick() -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the backlog), never reads or answers
    try:
        client = SyncClient(f"127.0.0.1:{silent.getsockname()[1]}", timeout=1.0)
        started = time.monotonic()
        with pytest.raises(KazooTimeoutError):
            client.start(timeout=1.0)
        assert time.monotonic() - started < 5.0
        started = time.monotonic()
        client.close()
        assert time.monotonic() - started < 3.0
    finally:
        silent.close()


def test_a_forked_child_gets_a_clear_error_and_makes_its_own_client(client: SyncClient) -> None:
    client.create("/parent", b"")
    hosts = ",".join(f"{host}:{port}" for host, port in client.hosts)
    pid = os.fork()
    if pid == 0:  # the child: report by exit status, never return into pytest
        status = 1
        try:
            try:
                client.get("/parent")
                status = 2  # the parent's client answered: it must not
            except ForkedClientError as exc:
                status = 3 if "fork" not in str(exc) else 0
            if status == 0:
                with SyncClient(hosts, timeout=4.0) as own:
                    own.start(timeout=10)
                    own.create("/from-child", str(os.getpid()).encode())
        except BaseException:
            status = 4
        os._exit(status)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(status) == 0
    assert client.get("/from-child")[0] == str(pid).encode()  # the parent's client is untouched


def test_a_raising_callback_is_logged_and_later_events_still_arrive(client: SyncClient, caplog: pytest.LogCaptureFixture) -> None:
    heard: list[WatchedEvent] = []

    def raising(event: WatchedEvent) -> None:
        raise RuntimeError("a broken callback")

    client.create("/r", b"")
    client.get("/r", watch=raising)
    client.add_watch("/r", heard.append)
    with caplog.at_level(logging.ERROR, logger="zabby.client"):
        client.set("/r", b"1")
        client.set("/r", b"2")
        wait_until(lambda: len(heard) == 2, 10)
    assert any("a broken callback" in (record.exc_text or "") for record in caplog.records)
    assert [event.type for event in heard] == [EventType.CHANGED, EventType.CHANGED]
    assert client.get("/r")[0] == b"2"


def test_a_blocking_callback_does_not_stop_requests(client: SyncClient) -> None:
    release = threading.Event()
    heard: list[str] = []

    def blocking(event: WatchedEvent) -> None:
        heard.append("blocking")
        release.wait(20)

    client.create("/b", b"")
    client.get("/b", watch=blocking)
    client.add_watch("/b", lambda event: heard.append(event.type))
    client.set("/b", b"1")
    wait_until(lambda: heard == ["blocking"], 10)
    started = time.monotonic()
    for i in range(20):  # the callback thread is stuck; requests go on
        client.set("/b", str(i).encode(), timeout=5)
    assert time.monotonic() - started < 10
    assert heard == ["blocking"]
    release.set()
    wait_until(lambda: len(heard) == 22, 10)  # then the events queued meanwhile, in order
    assert heard[1:] == [EventType.CHANGED] * 21


def test_async_results_can_be_awaited_from_asyncio_and_trio(client: SyncClient) -> None:
    client.create("/aw", b"v")

    async def under_asyncio() -> list[bytes]:
        results = await asyncio.gather(*(client.get_async("/aw") for _ in range(50)))
        return [data for data, _ in results]

    assert asyncio.run(under_asyncio()) == [b"v"] * 50

    async def under_trio() -> tuple[bytes, int]:
        data, _ = await client.get_async("/aw")
        stat = await client.set_async("/aw", b"w")
        return data, stat.version

    assert trio.run(under_trio) == (b"v", 1)

    async def failing() -> None:
        await client.get_async("/missing")

    from zabby.errors import NoNodeError

    with pytest.raises(NoNodeError):
        asyncio.run(failing())


def test_a_coroutine_callback_on_the_blocking_client_is_reported(client: SyncClient, caplog: pytest.LogCaptureFixture) -> None:
    async def coroutine(event: WatchedEvent) -> None:
        raise AssertionError("never run")

    heard: list[WatchedEvent] = []
    client.create("/c", b"")
    with caplog.at_level(logging.ERROR, logger="zabby.client"):
        client.get("/c", watch=coroutine)
        client.add_watch("/c", heard.append)
        client.set("/c", b"1")
        wait_until(lambda: len(heard) == 1, 10)
    assert any("is a coroutine function: SyncClient runs plain functions" in record.getMessage() for record in caplog.records)
