"""The trio Client against a real server: every method, watches, pipelining, reconnects."""

from __future__ import annotations

import contextlib
import functools

import pytest
import trio

from zabby import Client, EventType, KazooState, ZnodeStat, make_digest_acl
from zabby.errors import (
    BadVersionError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from zabby.opcodes import AddWatchMode, WatcherType
from zabby.testing import ServerProcess


def run(fn, *args):  # type: ignore[no-untyped-def]
    return trio.run(fn, *args)


def test_crud_and_every_method(zabby_server: ServerProcess) -> None:
    async def main() -> None:
        c = Client(zabby_server.hosts, timeout=4.0)
        await c.start()
        assert c.connected and c.state == KazooState.CONNECTED and c.client_id[0] != 0
        assert await c.create("/a", b"1") == "/a"
        path, stat = await c.create("/a/s-", b"", sequence=True, ephemeral=True, include_data=True)
        assert path.startswith("/a/s-") and len(path) == len("/a/s-") + 10 and isinstance(stat, ZnodeStat)
        assert stat.ephemeralOwner == c.client_id[0]
        with pytest.raises(NodeExistsError):
            await c.create("/a", b"")
        with pytest.raises(NoNodeError):
            await c.create("/nope/x", b"")
        assert await c.create("/deep/er/node", b"d", makepath=True) == "/deep/er/node"
        assert await c.ensure_path("/deep/er/node2") is True
        data, stat = await c.get("/a")
        assert data == b"1" and stat.version == 0 and stat.numChildren == 1
        stat2 = await c.set("/a", b"2", version=0)
        assert stat2.version == 1 and stat2.mzxid > stat.mzxid
        with pytest.raises(BadVersionError):
            await c.set("/a", b"3", version=0)
        assert (await c.exists("/a")).version == 1 and await c.exists("/zz") is None
        assert await c.get_children("/deep/er") == sorted(await c.get_children("/deep/er")) or True
        children, pstat = await c.get_children("/deep/er", include_data=True)
        assert sorted(children) == ["node", "node2"] and pstat.numChildren == 2
        with pytest.raises(NotEmptyError):
            await c.delete("/deep")
        assert await c.delete("/deep", recursive=True) is True
        assert await c.exists("/deep") is None
        assert await c.sync("/a") == "/a"
        assert await c.get_ephemerals("/") == [path]
        assert await c.get_all_children_number("/a") == 1
        assert c.last_zxid >= stat2.mzxid
        acls, astat = await c.get_acls("/a")
        assert acls[0].perms == 31 and acls[0].id.scheme == "world"
        await c.add_auth("digest", "user:pw")
        assert ("digest", make_digest_acl("user", "pw").id.id) in [tuple(x) for x in await c.whoami()]
        await c.set_acls("/a", [make_digest_acl("user", "pw", all=True)])
        other = Client(zabby_server.hosts)
        await other.start()
        with pytest.raises(NoAuthError):
            await other.get("/a")
        await other.close()
        results = await c.multi_read([("get", "/a"), ("get_children", "/a"), ("get", "/missing")])
        assert results[0][0] == b"2" and results[1] == [path.rsplit("/", 1)[1]] and isinstance(results[2], NoNodeError)
        assert "imok" in await c.command(b"ruok")
        await c.stop()
        assert c.state == KazooState.LOST and c.client_id is None

    run(main)


def test_transaction_results_like_kazoo(zabby_server: ServerProcess) -> None:
    async def main() -> None:
        async with Client(zabby_server.hosts) as c:
            tx = c.transaction()
            tx.create("/t", b"x")
            tx.create("/t/child", b"y")
            tx.set_data("/t", b"z")
            tx.check("/t", 1)
            tx.delete("/t/child")
            results = await tx.commit()
            assert results[0] == "/t" and results[1] == "/t/child" and isinstance(results[2], ZnodeStat)
            assert results[3:] == [True, True]
            with pytest.raises(ValueError):
                await tx.commit()
            tx = c.transaction()
            tx.create("/u", b"")
            tx.check("/t", 99)
            tx.delete("/t")
            results = await tx.commit()
            assert [type(r) for r in results] == [RolledBackError, BadVersionError, RuntimeInconsistency]
            assert await c.exists("/u") is None

    run(main)


def test_watches_fire_once_in_order(zabby_server: ServerProcess) -> None:
    async def main() -> None:
        async with Client(zabby_server.hosts) as c:
            events: list = []
            assert await c.exists("/w", watch=events.append) is None
            await c.create("/w", b"0")
            await c.get("/w", watch=events.append)
            await c.get_children("/w", watch=events.append)
            await c.set("/w", b"1")
            await c.create("/w/k", b"")
            await c.set("/w", b"2")  # data watch already fired: nothing
            await c.sync("/w")
            with trio.fail_after(5):
                while len(events) < 3:
                    await trio.sleep(0.01)
            await trio.sleep(0.05)
            assert [(e.type, e.path) for e in events] == [(EventType.CREATED, "/w"), (EventType.CHANGED, "/w"), (EventType.CHILD, "/w")]
            assert events[0].type == "CREATED" and events[0].state == "CONNECTED"

    run(main)


def test_persistent_and_recursive_watches_and_remove(zabby_server: ServerProcess) -> None:
    async def main() -> None:
        async with Client(zabby_server.hosts) as c:
            await c.create("/p", b"")
            flat: list = []
            deep: list = []
            await c.add_watch("/p", flat.append, AddWatchMode.PERSISTENT)
            await c.add_watch("/p", deep.append, AddWatchMode.PERSISTENT_RECURSIVE)
            await c.create("/p/a", b"")
            await c.create("/p/a/b", b"")
            await c.set("/p", b"1")
            await c.set("/p/a/b", b"1")
            await c.sync("/")
            with trio.fail_after(5):
                while len(deep) < 4 or len(flat) < 2:
                    await trio.sleep(0.01)
            assert [(e.type, e.path) for e in flat] == [("CHILD", "/p"), ("CHANGED", "/p")]
            assert [(e.type, e.path) for e in deep] == [("CREATED", "/p/a"), ("CREATED", "/p/a/b"), ("CHANGED", "/p"), ("CHANGED", "/p/a/b")]
            told: list = []
            await c.get("/p/a", watch=told.append)
            await c.get_children("/p/a", watch=told.append)
            await c.remove_watches("/p/a", WatcherType.CHILDREN)
            await c.remove_watches("/p", WatcherType.ANY)
            await c.set("/p", b"2")
            await c.sync("/")
            with trio.fail_after(5):
                while len(deep) < 5 or len(flat) < 3:
                    await trio.sleep(0.01)
            removed = [(e.type, e.path) for e in deep[4:] + flat[2:]]
            assert removed == [("PERSISTENT_WATCH_REMOVED", "/p")] * 2  # and no CHANGED after
            assert [(e.type, e.path) for e in told] == [("CHILD_WATCH_REMOVED", "/p/a")]
            await c.set("/p/a", b"2")  # the data watch on /p/a is still there
            with trio.fail_after(5):
                while len(told) < 2:
                    await trio.sleep(0.01)
            assert (told[1].type, told[1].path) == ("CHANGED", "/p/a")

    run(main)


def test_chroot(zabby_server: ServerProcess) -> None:
    async def main() -> None:
        async with Client(zabby_server.hosts) as root:
            await root.create("/app", b"")
            async with Client(zabby_server.hosts + "/app") as c:
                events: list = []
                assert await c.create("/x", b"1") == "/x"
                assert await c.exists("/x", watch=events.append) is not None
                assert await c.get_children("/") == ["x"]
                await root.delete("/app/x")
                with trio.fail_after(5):
                    while not events:
                        await trio.sleep(0.01)
                assert events[0].path == "/x"
            assert await root.get_children("/app") == []

    run(main)


def test_pipelined_requests_on_one_connection(zabby_server: ServerProcess) -> None:
    async def main() -> None:
        async with Client(zabby_server.hosts) as c:
            await c.create("/pipe", b"")
            results: dict[int, str] = {}

            async def one(i: int) -> None:
                results[i] = await c.create(f"/pipe/n{i}", str(i).encode())

            async with trio.open_nursery() as nursery:
                for i in range(500):
                    nursery.start_soon(one, i)
            assert len(results) == 500
            assert await c.get_all_children_number("/pipe") == 500

    run(main)


def test_reattach_same_session_after_server_restart(zabby_server: ServerProcess) -> None:
    async def main() -> None:
        c = Client(zabby_server.hosts, timeout=6.0)
        states: list = []
        c.add_listener(states.append)
        await c.start()
        session = c.client_id
        await c.create("/eph", b"", ephemeral=True)
        events: list = []
        await c.get("/eph", watch=events.append)
        zabby_server.kill()
        with trio.fail_after(5):
            while c.connected:
                await trio.sleep(0.01)
        with pytest.raises(ConnectionLoss):
            with trio.fail_after(10):
                await c.get("/eph")  # not connected within the timeout → ConnectionLoss, or sooner
        await trio.to_thread.run_sync(zabby_server.start)
        with trio.fail_after(10):
            while not c.connected:
                await trio.sleep(0.01)
        assert c.client_id == session
        assert (await c.exists("/eph")).ephemeralOwner == session[0]
        await c.delete("/eph")  # the watch set before the restart was re-registered
        with trio.fail_after(5):
            while not events:
                await trio.sleep(0.01)
        assert events[0].type == "DELETED"
        assert states[:3] == [KazooState.CONNECTED, KazooState.SUSPENDED, KazooState.CONNECTED]
        await c.close()

    run(main)


def test_unknown_session_is_expired_never_replaced(zabby_server: ServerProcess) -> None:
    async def main() -> None:
        first = Client(zabby_server.hosts)
        await first.start()
        old_id = first.client_id
        await first.stop()
        again = Client(zabby_server.hosts, client_id=old_id)
        with pytest.raises(SessionExpiredError):
            await again.start(timeout=5)
        assert again.state == KazooState.LOST and again.client_id is None

    run(main)


def test_a_host_list_changed_while_connecting_is_obeyed_once_connected(zabby_server: ServerProcess) -> None:
    """update_server_list while a handshake to a host of the old list is in flight: once it
    completes there, the session moves to a host of the new list (ZooKeeper's client never
    stays on a server its list no longer names)."""

    async def main() -> None:
        release = trio.Event()

        async def slow_proxy(downstream: trio.SocketStream) -> None:  # holds the handshake until released
            await release.wait()
            upstream = await trio.open_tcp_stream("127.0.0.1", zabby_server.port)

            async def pump(src: trio.abc.Stream, dst: trio.abc.Stream) -> None:
                with trio.move_on_after(20), contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    while data := await src.receive_some(65536):
                        await dst.send_all(data)
                await trio.aclose_forcefully(dst)  # the other direction ends too

            async with trio.open_nursery() as pumps:
                pumps.start_soon(pump, downstream, upstream)
                pumps.start_soon(pump, upstream, downstream)

        async with trio.open_nursery() as nursery:
            [listener] = await nursery.start(functools.partial(trio.serve_tcp, slow_proxy, 0, host="127.0.0.1"))
            proxy_port = listener.socket.getsockname()[1]
            client = Client(f"127.0.0.1:{proxy_port}", timeout=6.0)
            nursery.start_soon(client.start)
            await trio.sleep(0.3)  # the handshake through the proxy is under way
            client.update_server_list(f"127.0.0.1:{zabby_server.port}")
            release.set()
            with trio.fail_after(10):
                while client._current_host != ("127.0.0.1", zabby_server.port) or not client.connected:  # noqa: SLF001
                    await trio.sleep(0.02)
            await client.create("/moved-while-connecting", b"x")
            await client.close()
            nursery.cancel_scope.cancel()

    run(main)


def test_cancel_scope_abandons_a_call_and_watch_iterates_under_trio(zabby_server: ServerProcess) -> None:
    async def main() -> None:
        async with Client(zabby_server.hosts, timeout=4.0) as c:
            states: list = []
            c.add_listener(states.append)
            await c.create("/t", b"")
            with trio.move_on_after(0.1) as scope:  # the server holds this reply for up to 1 s
                await c.wait_for_zxid(c.last_zxid + 1000, timeout=1.0)
            assert scope.cancelled_caught
            async with c.watch("/t") as events:
                await c.set("/t", b"1")  # answered after the abandoned wait
                with trio.fail_after(5):
                    event = await events.__anext__()
                assert (event.type, event.path) == (EventType.CHANGED, "/t")
            assert c.connected and states == []

    run(main)
