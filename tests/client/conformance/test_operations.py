"""Operations, watches, multi and auth: the same bodies for asyncio, trio and SyncClient."""

from __future__ import annotations

import anyio
import pytest

from zabby import EventType, WatchedEvent, ZnodeStat, make_digest_acl
from zabby.errors import (
    BadVersionError,
    NoAuthError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)
from zabby.opcodes import AddWatchMode

from .adapter import Zk, eventually
from .conftest import MakeClient

pytestmark = pytest.mark.anyio


async def test_create_modes_and_their_errors(zk: Zk, path: str) -> None:
    assert await zk.create(path, b"root") == path
    made, stat = await zk.create(path + "/seq-", b"", sequence=True, include_data=True)
    assert made.startswith(path + "/seq-") and made[-10:].isdigit() and isinstance(stat, ZnodeStat)
    ephemeral, stat = await zk.create(path + "/eph", b"e", ephemeral=True, include_data=True)
    assert stat.ephemeralOwner == zk.raw.client_id[0] and stat.owner_session_id == zk.raw.client_id[0]
    both = await zk.create(path + "/es-", b"", ephemeral=True, sequence=True)
    assert int(both[-10:]) > int(made[-10:])  # one counter per parent
    assert await zk.create(path + "/deep/er/node", b"d", makepath=True) == path + "/deep/er/node"
    assert await zk.get_ephemerals(path) == sorted([ephemeral, both])
    with pytest.raises(NodeExistsError):
        await zk.create(path, b"")
    with pytest.raises(NoNodeError):
        await zk.create(path + "/missing/child", b"")
    with pytest.raises(NoChildrenForEphemeralsError):
        await zk.create(ephemeral + "/child", b"")
    with pytest.raises(TypeError):
        await zk.create(path + "/text", "not bytes")


async def test_get_set_delete_exists_children_with_versions(zk: Zk, path: str) -> None:
    await zk.create(path, b"1")
    data, stat = await zk.get(path)
    assert data == b"1" and stat.version == 0 and stat.numChildren == 0
    changed = await zk.set(path, b"2", version=0)
    assert changed.version == 1 and changed.mzxid > stat.mzxid
    with pytest.raises(BadVersionError):
        await zk.set(path, b"3", version=0)
    assert (await zk.exists(path)).version == 1 and await zk.exists(path + "/none") is None
    await zk.create(path + "/b", b"")
    await zk.create(path + "/a", b"")
    assert sorted(await zk.get_children(path)) == ["a", "b"]
    children, parent = await zk.get_children(path, include_data=True)
    assert sorted(children) == ["a", "b"] and parent.numChildren == 2 and parent.cversion == 2
    with pytest.raises(NotEmptyError):
        await zk.delete(path)
    with pytest.raises(BadVersionError):
        await zk.delete(path + "/a", version=5)
    assert await zk.delete(path + "/a", version=0) is True
    with pytest.raises(NoNodeError):
        await zk.get(path + "/a")
    assert await zk.delete(path, recursive=True) is True
    assert await zk.exists(path) is None


async def test_one_shot_watches_fire_once_each(zk: Zk, path: str) -> None:
    events: list[WatchedEvent] = []
    assert await zk.exists(path, watch=events.append) is None
    await zk.create(path, b"0")
    await zk.get(path, watch=events.append)
    await zk.get_children(path, watch=events.append)
    await zk.set(path, b"1")
    await zk.create(path + "/kid", b"")
    await zk.set(path, b"2")  # the data watch has fired already: nothing more
    await eventually(lambda: len(events) >= 3, "three events")
    await zk.sync(path)
    await anyio.sleep(0.1)
    assert [(e.type, e.path) for e in events] == [(EventType.CREATED, path), (EventType.CHANGED, path), (EventType.CHILD, path)]
    assert all(e.zxid > 0 for e in events)


async def test_coroutine_and_plain_watch_callbacks(zk: Zk, path: str) -> None:
    """The async client awaits a coroutine callback; the blocking one calls plain functions."""
    heard: list[WatchedEvent] = []

    async def on_change(event: WatchedEvent) -> None:
        await anyio.sleep(0)
        heard.append(event)

    watch = heard.append if zk.threaded else on_change
    await zk.create(path, b"")
    await zk.get(path, watch=watch)
    await zk.set(path, b"x")
    await eventually(lambda: [e.type for e in heard] == [EventType.CHANGED], "the change")


async def test_persistent_and_recursive_watches_until_removed(zk: Zk, path: str) -> None:
    flat: list[WatchedEvent] = []
    deep: list[WatchedEvent] = []
    await zk.create(path, b"")
    await zk.add_watch(path, flat.append, AddWatchMode.PERSISTENT)
    await zk.add_watch(path, deep.append, AddWatchMode.PERSISTENT_RECURSIVE)
    for value in (b"1", b"2", b"3"):
        await zk.set(path, value)
    await zk.create(path + "/kid", b"")
    await zk.set(path + "/kid", b"k")
    await eventually(lambda: len(flat) >= 4 and len(deep) >= 5, "every event")
    assert [e.type for e in flat] == [EventType.CHANGED] * 3 + [EventType.CHILD]
    assert [(e.type, e.path) for e in deep] == [(EventType.CHANGED, path)] * 3 + [(EventType.CREATED, path + "/kid"), (EventType.CHANGED, path + "/kid")]
    assert [e.zxid for e in deep] == sorted(e.zxid for e in deep)
    assert await zk.remove_watches(path) is True
    await eventually(lambda: flat[-1].type == EventType.PERSISTENT_WATCH_REMOVED, "told it is removed")
    count = len(flat)
    await zk.set(path, b"after")
    await zk.sync(path)
    await anyio.sleep(0.1)
    assert len(flat) == count


async def test_transaction_commits_all_or_nothing(zk: Zk, path: str) -> None:
    tx = zk.raw.transaction()
    tx.create(path, b"x")
    tx.create(path + "/kid", b"y")
    tx.set_data(path, b"z")
    tx.check(path, 1)
    tx.delete(path + "/kid")
    results = await zk.commit(tx)
    assert results[:2] == [path, path + "/kid"] and isinstance(results[2], ZnodeStat) and results[3:] == [True, True]
    with pytest.raises(ValueError):
        await zk.commit(tx)
    tx = zk.raw.transaction()
    tx.create(path + "/new", b"")
    tx.check(path, 99)
    tx.delete(path)
    results = await zk.commit(tx)
    assert [type(r) for r in results] == [RolledBackError, BadVersionError, RuntimeInconsistency]
    assert await zk.exists(path + "/new") is None and (await zk.get(path))[0] == b"z"


async def test_digest_auth_and_acls(zk: Zk, make_client: MakeClient, path: str) -> None:
    await zk.add_auth("digest", "alice:secret")
    await zk.create(path, b"private", acl=[make_digest_acl("alice", "secret", all=True)])
    acls, _ = await zk.get_acls(path)
    assert [(a.id.scheme, a.perms) for a in acls] == [("digest", 31)]
    stranger = await make_client()
    with pytest.raises(NoAuthError):
        await stranger.get(path)
    await stranger.add_auth("digest", "alice:secret")
    assert (await stranger.get(path))[0] == b"private"
    await zk.set_acls(path, [make_digest_acl("alice", "secret", read=True)])
    with pytest.raises(NoAuthError):
        await stranger.set(path, b"no write")


async def test_a_watch_as_an_async_iterator(zk: Zk, path: str) -> None:
    if zk.threaded:
        pytest.skip("an async iterator of events is the async client's (SyncClient calls functions)")
    await zk.create(path, b"")
    heard: list[tuple[EventType, str | None]] = []
    async with zk.raw.watch(path, mode=AddWatchMode.PERSISTENT_RECURSIVE) as events:
        await zk.set(path, b"1")
        await zk.create(path + "/kid", b"")
        with anyio.fail_after(10):
            async for event in events:
                heard.append((event.type, event.path))
                if len(heard) == 2:
                    break
    assert heard == [(EventType.CHANGED, path), (EventType.CREATED, path + "/kid")]
