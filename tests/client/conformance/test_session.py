"""Sessions on all three clients: reconnects, expiry, and kazoo's known traps turned into
tests: a stop() that never returns (kazoo #582, #426), watches lost on reconnect (#151, #241),
a client used across fork() (#519, #554, #628), a callback that raises."""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Callable

import anyio
import anyio.to_thread
import pytest

from harness.local.netproxy import LinkProxy, Mode, ProxyHub
from zabby import EventType, KazooState, WatchedEvent
from zabby.errors import ForkedClientError, SessionExpiredError
from zabby.opcodes import AddWatchMode
from zabby.testing import ServerProcess

from .adapter import Zk, eventually
from .conftest import MakeClient

pytestmark = pytest.mark.anyio

STOP_BOUND_S = 4.0  # stop() and close() return within this, whatever the network does
FORK_WAIT_S = 30.0


async def proxy(method: Callable[..., object], *args: object) -> None:
    """Call a proxy's method (it blocks on the proxies' own trio thread) from a worker thread."""
    await anyio.to_thread.run_sync(method, *args)


@pytest.fixture
def link(hub: ProxyHub, server: ServerProcess) -> LinkProxy:
    """A proxy to the server that the test can cut, reset or blackhole."""
    return hub.add(server.port)


async def test_reconnect_after_the_connection_is_dropped_keeps_the_session(make_client: MakeClient, link: LinkProxy, path: str) -> None:
    states: list[KazooState] = []
    zk = await make_client(f"127.0.0.1:{link.port}")
    zk.raw.add_listener(states.append)
    session = zk.raw.client_id
    await zk.create(path, b"", ephemeral=True)
    fired: list[WatchedEvent] = []
    await zk.get(path, watch=fired.append)
    for _ in range(3):
        await proxy(link.reset_connections)
        await eventually(lambda: states[-2:] == [KazooState.SUSPENDED, KazooState.CONNECTED], "suspended, then connected")
        states.clear()
    assert zk.raw.client_id == session and await zk.exists(path) is not None  # the same session
    await zk.set(path, b"after")  # the one-shot watch set before the drops still fires
    await eventually(lambda: [e.type for e in fired] == [EventType.CHANGED], "the watch set before the drops")


async def test_a_persistent_watch_hears_the_changes_made_while_disconnected(make_client: MakeClient, link: LinkProxy, path: str) -> None:
    """kazoo #151/#241: watches lost on reconnect.  Here every change is heard, once, in order."""
    writer = await make_client()
    watcher = await make_client(f"127.0.0.1:{link.port}")
    heard: list[WatchedEvent] = []
    await writer.create(path, b"0")
    await watcher.add_watch(path, heard.append, AddWatchMode.PERSISTENT_RECURSIVE)
    await writer.set(path, b"1")
    await eventually(lambda: len(heard) == 1, "the first change")
    await proxy(link.set_mode, Mode.CUT)
    await eventually(lambda: not watcher.raw.connected, "disconnected")
    zxids = [(await writer.set(path, str(n).encode())).mzxid for n in range(2, 5)]
    zxids.append(await created_zxid(writer, path + "/kid"))
    await proxy(link.heal)
    await eventually(lambda: len(heard) >= 5, "the changes made while disconnected")
    await anyio.sleep(0.1)
    assert [(e.type, e.zxid) for e in heard[1:]] == [(EventType.CHANGED, z) for z in zxids[:3]] + [(EventType.CREATED, zxids[3])]


async def created_zxid(zk: Zk, path: str) -> int:
    _, stat = await zk.create(path, b"", include_data=True)
    return int(stat.czxid)


async def test_session_expiry_is_reported_as_lost_never_replaced(make_client: MakeClient, link: LinkProxy, server: ServerProcess, path: str) -> None:
    states: list[KazooState] = []
    zk = await make_client(f"127.0.0.1:{link.port}", timeout=2.0)
    zk.raw.add_listener(states.append)
    await zk.create(path, b"", ephemeral=True)
    told: list[WatchedEvent] = []
    await zk.exists(path, watch=told.append)
    session = zk.raw.client_id
    await proxy(link.set_mode, Mode.CUT)  # so the client cannot take the session back in between
    twin = await make_client(server.hosts, client_id=session, timeout=2.0)
    assert twin.raw.client_id == session
    await twin.stop()  # closes the shared session on the server
    await proxy(link.heal)
    await eventually(lambda: zk.raw.state == KazooState.LOST, "LOST", 15)
    with pytest.raises(SessionExpiredError):
        await zk.get("/")
    assert zk.raw.client_id is None and KazooState.LOST in states
    await eventually(lambda: any(e.type in (EventType.NONE, EventType.DELETED) for e in told), "the watch told")
    fresh = await make_client()
    assert await fresh.exists(path) is None  # the ephemeral went with the session


async def test_stop_and_close_return_in_bounded_time_against_a_blackholed_server(make_client: MakeClient, link: LinkProxy) -> None:
    """kazoo #582/#426: stop() that never returns.  The server stops answering (every byte is
    held), and stop() and close() still return within a bound."""
    zk = await make_client(f"127.0.0.1:{link.port}", timeout=2.0)
    assert await zk.exists("/") is not None
    await proxy(link.set_mode, Mode.BLACKHOLE)
    started = time.monotonic()
    with anyio.fail_after(STOP_BOUND_S * 3):
        await zk.stop()
    stopped = time.monotonic() - started
    await zk.close()
    closed = time.monotonic() - started
    await proxy(link.heal)
    assert stopped < STOP_BOUND_S and closed < STOP_BOUND_S, (stopped, closed)


async def test_a_raising_callback_never_stops_the_events(zk: Zk, path: str) -> None:
    heard: list[WatchedEvent] = []

    def explode(event: WatchedEvent) -> None:
        raise RuntimeError("a callback that fails")

    await zk.create(path, b"")
    await zk.get(path, watch=explode)
    await zk.add_watch(path, heard.append, AddWatchMode.PERSISTENT)
    await zk.set(path, b"1")
    await zk.set(path, b"2")
    await eventually(lambda: len(heard) == 2, "the events after the raising callback")
    assert (await zk.get(path))[0] == b"2"


def _child_checks(zk: Zk, hosts: str) -> int:
    """In the forked child: the parent's client must refuse at once with ForkedClientError;
    a client made in the child must work.  Runs in a thread of its own (the child's copy of
    the calling thread is inside the parent's event loop).  The exit status tells the parent."""
    status: list[int] = []

    async def check() -> None:
        with anyio.fail_after(10):
            try:
                await zk.get("/")
                status.append(10)  # the parent's client answered in the child
                return
            except ForkedClientError as exc:
                if "fork" not in str(exc):
                    status.append(11)
                    return
            own = Zk(zk.flavor, hosts, timeout=4.0)
            await own.start(timeout=8)
            ok = await own.exists("/") is not None
            await own.close()
            status.append(0 if ok else 12)

    def main() -> None:
        try:
            anyio.run(check, backend="trio" if zk.flavor == "sync" else zk.flavor)
        except BaseException:  # noqa: BLE001 - the status says it failed
            traceback.print_exc()
            status.append(13)

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    thread.join(20)
    return status[0] if status else 14


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
async def test_a_forked_child_gets_a_clear_error_and_can_make_its_own_client(zk: Zk, server: ServerProcess) -> None:
    """kazoo #519/#554/#628: a client used across fork() hangs.  Here the child is refused at
    once, makes its own client, and the parent's client is untouched."""
    await zk.create("/forked-" + zk.flavor, b"", ephemeral=True)
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 15
        try:
            code = _child_checks(zk, server.hosts)
        finally:
            os._exit(code)
    status = await wait_child(pid)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status:#x}"
    assert await zk.exists("/forked-" + zk.flavor) is not None  # the parent's session goes on


async def wait_child(pid: int) -> int:
    deadline = time.monotonic() + FORK_WAIT_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        await anyio.sleep(0.02)
    os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    raise AssertionError(f"the forked child did not finish within {FORK_WAIT_S}s")
