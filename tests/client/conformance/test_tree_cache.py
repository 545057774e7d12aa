"""The tree cache on all three clients (``AsyncTreeCache`` under asyncio and trio, kazoo's
``TreeCache`` on SyncClient): the load, the node events, the zxid it reflects, a reconnect
and a new session caught up from the resumed watch (each change heard once, nothing
re-read), and a saved mirror resumed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
import pytest

from harness.local.netproxy import LinkProxy, Mode, ProxyHub
from zabby import TreeEvent
from zabby.errors import NoNodeError
from zabby.testing import ServerProcess

from .adapter import WAIT_S, Surface, Zk, eventually
from .conftest import MakeClient

pytestmark = pytest.mark.anyio

Tree = dict[str, tuple[bytes, tuple[int, ...], frozenset[str]]]


@pytest.fixture
def link(hub: ProxyHub, server: ServerProcess) -> LinkProxy:
    return hub.add(server.port)


async def proxy(method: Callable[..., object], *args: object) -> None:
    """Call a proxy's method (it blocks on the proxies' own thread) from a worker thread."""
    await anyio.to_thread.run_sync(method, *args)


async def tree_of(zk: Zk, root: str) -> Tree:
    """Every node under ``root`` as the server has it: data, stat, children."""
    out: Tree = {}
    todo = [root]
    while todo:
        path = todo.pop()
        try:
            data, stat = await zk.get(path)
            children = await zk.get_children(path)
        except NoNodeError:
            continue
        out[path] = (data, tuple(stat), frozenset(children))
        todo.extend(f"{path}/{c}" for c in children)
    return out


def mirror_of(cache: Surface) -> Tree:
    return {p: (n.data, tuple(n.stat), cache.raw.get_children(p, frozenset())) for p, n in cache.raw.snapshot().items()}


def changes(events: list[TreeEvent]) -> list[tuple[int, str, bytes]]:
    """The node events heard: (type, path, data)."""
    return [(e.event_type, e.event_data.path, e.event_data.data) for e in events if e.event_data is not None]


async def reflects(cache: Surface, zxid: int) -> None:
    assert await cache.wait_for_zxid(zxid, WAIT_S), f"the cache is at 0x{cache.raw.zxid:x}, not at 0x{zxid:x}"


async def test_load_then_added_updated_removed_and_the_zxid_reflected(zk: Zk, path: str) -> None:
    await zk.create(path + "/a/b", b"ab", makepath=True)
    loaded = (await zk.set(path, b"root")).mzxid
    events: list[TreeEvent] = []
    cache = await zk.tree_cache(path, events.append)
    assert cache.raw.zxid >= loaded and cache.raw.full_reads == 1
    assert mirror_of(cache) == await tree_of(zk, path)
    assert [e.event_type for e in events] == [TreeEvent.NODE_ADDED] * 3 + [TreeEvent.INITIALIZED]
    events.clear()

    _, stat = await zk.create(path + "/a/c", b"1", include_data=True)
    await reflects(cache, stat.czxid)
    assert cache.raw.get_data(path + "/a/c").data == b"1" and cache.raw.get_children(path + "/a") == {"b", "c"}
    await reflects(cache, (await zk.set(path + "/a/c", b"2")).mzxid)
    assert cache.raw.get_data(path + "/a/c").data == b"2"
    await zk.delete(path + "/a/c")
    await reflects(cache, (await zk.set(path, b"marker")).mzxid)
    assert cache.raw.get_data(path + "/a/c") is None and cache.raw.get_children(path + "/a") == {"b"}
    assert changes(events) == [(TreeEvent.NODE_ADDED, path + "/a/c", b"1"), (TreeEvent.NODE_UPDATED, path + "/a/c", b"2"),
                               (TreeEvent.NODE_REMOVED, path + "/a/c", b"2"), (TreeEvent.NODE_UPDATED, path, b"marker")]  # fmt: skip
    assert mirror_of(cache) == await tree_of(zk, path)  # stats too: the parents' are re-read
    assert not await cache.wait_for_zxid(cache.raw.zxid + 1000, 0.2)
    await cache.close()
    assert not await cache.wait_for_zxid(cache.raw.zxid + 1, None)  # closed: no wait


async def test_a_coroutine_listener_and_async_with(zk: Zk, path: str) -> None:
    """The async cache awaits a coroutine listener in order; ``async with`` closes it."""
    if zk.threaded:
        pytest.skip("kazoo's TreeCache takes plain functions and has no async with")
    from zabby import AsyncTreeCache

    heard: list[tuple[int, str | None]] = []
    running: list[TreeEvent] = []

    async def slow_listener(event: TreeEvent) -> None:
        assert not running, "a listener call began before the last one ended"
        running.append(event)
        await anyio.sleep(0.01)
        heard.append((event.event_type, event.event_data.path if event.event_data else None))
        running.pop()

    await zk.create(path, b"")
    async with AsyncTreeCache(zk.raw, path) as cache:
        cache.listen(slow_listener)
        for name in "abc":
            await zk.create(f"{path}/{name}", b"")
        await reflects(Surface(cache, False), (await zk.set(path, b"m")).mzxid)
        await eventually(lambda: len(heard) == 4, "every event heard")
    # a batch's re-read of the parent may bring the root's later change before a sibling's event
    assert sorted(heard) == sorted([(TreeEvent.NODE_ADDED, f"{path}/{n}") for n in "abc"] + [(TreeEvent.NODE_UPDATED, path)])
    assert cache.zxid > 0 and not await cache.wait_for_zxid(cache.zxid + 1)  # closed at the block's end


async def test_a_reconnect_hears_each_change_made_meanwhile_once_without_a_reread(make_client: MakeClient, link: LinkProxy, path: str) -> None:
    writer = await make_client()
    watcher = await make_client(f"127.0.0.1:{link.port}")
    await writer.create(path + "/stays", b"0", makepath=True)
    await writer.create(path + "/goes", b"0")
    events: list[TreeEvent] = []
    cache = await watcher.tree_cache(path, events.append)
    events.clear()
    await proxy(link.set_mode, Mode.CUT)
    await eventually(lambda: not watcher.raw.connected, "disconnected")
    await writer.create(path + "/new", b"1")
    await writer.set(path + "/stays", b"1")
    await writer.delete(path + "/goes")
    await proxy(link.heal)
    await reflects(cache, (await writer.set(path, b"marker")).mzxid)
    assert sorted(changes(events)) == sorted([(TreeEvent.NODE_ADDED, path + "/new", b"1"), (TreeEvent.NODE_UPDATED, path + "/stays", b"1"),
                                              (TreeEvent.NODE_REMOVED, path + "/goes", b"0"), (TreeEvent.NODE_UPDATED, path, b"marker")])  # fmt: skip
    kinds = [e.event_type for e in events]
    assert TreeEvent.CONNECTION_SUSPENDED in kinds and TreeEvent.CONNECTION_RECONNECTED in kinds
    assert cache.raw.full_reads == 1  # caught up from the resumed watch, not by re-reading
    assert mirror_of(cache) == await tree_of(writer, path)
    await cache.close()


async def test_a_new_session_adds_the_watch_again_from_the_last_zxid(make_client: MakeClient, link: LinkProxy, server: ServerProcess, path: str) -> None:
    """The session expires while the link is cut; the client opens a new one (which has no
    watches) and the cache adds its watch again from the last zxid its feed brought."""
    writer = await make_client()
    watcher = await make_client(f"127.0.0.1:{link.port}", timeout=2.0, reconnect_after_expiry=True)
    await writer.create(path + "/a", b"0", makepath=True)
    events: list[TreeEvent] = []
    cache = await watcher.tree_cache(path, events.append)
    await reflects(cache, (await writer.set(path + "/a", b"1")).mzxid)
    session = watcher.raw.client_id
    await proxy(link.set_mode, Mode.CUT)
    thief = await make_client(server.hosts, client_id=session, timeout=2.0)
    await thief.stop()  # ends the shared session on the server
    events.clear()
    await writer.create(path + "/b", b"2")
    await writer.set(path + "/a", b"2")
    await proxy(link.heal)
    await reflects(cache, (await writer.set(path, b"marker")).mzxid)
    assert watcher.raw.client_id is not None and watcher.raw.client_id[0] != session[0]
    assert TreeEvent.CONNECTION_LOST in [e.event_type for e in events]
    assert sorted(changes(events)) == sorted([(TreeEvent.NODE_ADDED, path + "/b", b"2"), (TreeEvent.NODE_UPDATED, path + "/a", b"2"),
                                              (TreeEvent.NODE_UPDATED, path, b"marker")])  # fmt: skip
    assert cache.raw.full_reads == 1 and mirror_of(cache) == await tree_of(writer, path)
    await cache.close()


async def test_a_saved_mirror_resumes_from_its_zxid(zk: Zk, path: str) -> None:
    await zk.create(path + "/a", b"0", makepath=True)
    await zk.create(path + "/b", b"0")
    first = await zk.tree_cache(path, lambda event: None)
    saved = first.raw.save_state()
    await first.close()
    assert saved["zxid"] == first.raw.zxid and set(saved["nodes"]) == {path, path + "/a", path + "/b"}
    await zk.set(path + "/a", b"1")  # changes while no cache runs
    await zk.delete(path + "/b")
    last = (await zk.create(path + "/c", b"1", include_data=True))[1].czxid
    events: list[TreeEvent] = []
    resumed = await zk.tree_cache(path, events.append, saved_state=saved)
    assert resumed.raw.full_reads == 0  # from the watch's history alone
    assert resumed.raw.zxid >= last and mirror_of(resumed) == await tree_of(zk, path)
    told = changes(events)
    assert told[:3] == [(TreeEvent.NODE_ADDED, path, b""), (TreeEvent.NODE_ADDED, path + "/a", b"0"), (TreeEvent.NODE_ADDED, path + "/b", b"0")]  # the saved mirror
    assert sorted(told[3:]) == sorted([(TreeEvent.NODE_UPDATED, path + "/a", b"1"), (TreeEvent.NODE_REMOVED, path + "/b", b"0"),
                                       (TreeEvent.NODE_ADDED, path + "/c", b"1")])  # fmt: skip
    assert events[-1].event_type == TreeEvent.INITIALIZED
    await resumed.close()


async def test_a_listener_that_raises_is_reported_and_the_cache_goes_on(zk: Zk, path: str) -> None:
    faults: list[BaseException] = []
    heard: list[Any] = []

    def listener(event: TreeEvent) -> None:
        heard.append(event.event_type)
        if event.event_type == TreeEvent.NODE_ADDED and event.event_data is not None and event.event_data.path.endswith("/bad"):
            raise ValueError("a listener's bug")

    await zk.create(path, b"")
    cache = await zk.tree_cache(path, listener)
    cache.raw.listen_fault(faults.append)
    await zk.create(path + "/bad", b"")
    await reflects(cache, (await zk.create(path + "/good", b"", include_data=True))[1].czxid)
    assert cache.raw.get_data(path + "/good") is not None
    await eventually(lambda: len(faults) == 1, "the fault reported")
    assert isinstance(faults[0], ValueError)
    await cache.close()


async def test_start_raises_when_the_load_cannot_be_done(make_client: MakeClient, path: str) -> None:
    """``AsyncTreeCache.start()`` returns once loaded, so a load that fails raises there
    (kazoo's ``start()`` returns at once and tells a fault listener instead)."""
    zk = await make_client()
    if zk.threaded:
        pytest.skip("kazoo's TreeCache.start() does not wait for the load")
    from zabby import AsyncTreeCache
    from zabby.errors import ConnectionClosedError

    await zk.close()
    cache = AsyncTreeCache(zk.raw, path)
    with anyio.fail_after(WAIT_S), pytest.raises(ConnectionClosedError):
        await cache.start()
    assert cache.snapshot() == {} and not await cache.wait_for_zxid(1, 0.1)
