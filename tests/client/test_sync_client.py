"""SyncClient against a real server: blocking API, futures, timeouts, threads, expiry."""

from __future__ import annotations

import threading
import time

import pytest

from harness.local.netproxy import Mode, ProxyHub
from tests.client.conftest import wait_until
from zabby import AsyncResult, KazooRetry, KazooState, KazooTimeoutError, SyncClient
from zabby.errors import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RetryFailedError,
    SessionExpiredError,
)
from zabby.testing import ServerProcess


def test_blocking_api_and_async_variants(client: SyncClient) -> None:
    assert client.create("/s", b"v") == "/s"
    assert client.get("/s")[0] == b"v"
    assert client.set("/s", b"w").version == 1
    futures = [client.create_async(f"/s/{i}", b"x") for i in range(200)]
    assert [f.get(timeout=10) for f in futures] == [f"/s/{i}" for i in range(200)]
    assert all(f.ready() and f.successful() for f in futures)
    bad = client.create_async("/s", b"")
    with pytest.raises(NodeExistsError):
        bad.get(timeout=10)
    assert bad.ready() and not bad.successful() and isinstance(bad.exception, NodeExistsError)
    linked = threading.Event()
    got: list[AsyncResult] = []
    fut = client.get_async("/s")
    fut.rawlink(lambda r: (got.append(r), linked.set()))
    assert linked.wait(10) and got[0].get()[0] == b"w"
    assert len(client.get_children("/s")) == 200
    assert client.exists("/nope") is None
    with client.transaction() as tx:
        tx.create("/s2", b"")
        tx.delete("/s/0")
    assert client.exists("/s2") is not None and client.exists("/s/0") is None
    assert client.delete("/s", recursive=True) is True
    assert client.ensure_path("/e/f/g") and client.exists("/e/f/g")
    assert client.sync("/e") == "/e"
    assert client.command(b"ruok") == "imok"
    assert client.get_all_children_number("/e") == 2


def test_every_call_has_a_timeout(zabby_server: ServerProcess) -> None:
    c = SyncClient(zabby_server.hosts, timeout=4.0, request_timeout=0.5)
    c.start()
    try:
        zabby_server.kill()
        wait_until(lambda: not c.connected, 5, "disconnect")
        t0 = time.monotonic()
        with pytest.raises(KazooTimeoutError) as info:
            c.get("/")
        assert isinstance(info.value, OperationTimeoutError) and isinstance(info.value, TimeoutError)
        assert time.monotonic() - t0 < 3
        with pytest.raises(KazooTimeoutError):
            c.exists("/", timeout=0.2)
        with pytest.raises(KazooTimeoutError):
            c.get_async("/").get(timeout=0.1)
    finally:
        c.close()


def test_start_times_out_without_server() -> None:
    from zabby.testing import free_port

    c = SyncClient(f"127.0.0.1:{free_port()}", timeout=2.0)
    t0 = time.monotonic()
    with pytest.raises(KazooTimeoutError):
        c.start(timeout=0.5)
    assert time.monotonic() - t0 < 5
    c.close()
    with pytest.raises(ConnectionClosedError):
        c.get("/")


def test_many_threads_share_one_client(client: SyncClient) -> None:
    client.create("/threads", b"")
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(50):
                client.create(f"/threads/t{n}-{i}", b"x")
                assert client.get(f"/threads/t{n}-{i}")[0] == b"x"
        except BaseException as exc:  # collected and re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(daemon=True, target=work, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and client.get_all_children_number("/threads") == 16 * 50


def test_listeners_and_session_expiry_reported_as_lost(zabby_server: ServerProcess) -> None:
    hub = ProxyHub()
    link = hub.add(zabby_server.port)  # cut while b closes the session: a reconnecting in between would take it back
    a = SyncClient(f"127.0.0.1:{link.port}", timeout=2.0)
    states: list[KazooState] = []
    a.add_listener(states.append)
    a.start()
    a.create("/mine", b"", ephemeral=True)
    watch_events: list = []
    a.exists("/mine", watch=watch_events.append)
    session = a.client_id
    link.set_mode(Mode.CUT)
    b = SyncClient(zabby_server.hosts, client_id=session, timeout=2.0)
    b.start()
    assert b.client_id == session
    b.stop()  # closes the shared session: a's session is now gone on the server
    b.close()
    link.heal()
    try:
        wait_until(lambda: a.state == KazooState.LOST, 15, "LOST")
        with pytest.raises(SessionExpiredError):
            a.get("/")
        assert a.client_id is None
        wait_until(lambda: KazooState.LOST in states, 5, "LOST listener")
        assert states[0] == KazooState.CONNECTED and states[-1] == KazooState.LOST
        wait_until(lambda: any(e.type == "NONE" or e.type == "DELETED" for e in watch_events), 5, "watch told")
        c = SyncClient(zabby_server.hosts)
        c.start()
        assert c.exists("/mine") is None
        c.close()
    finally:
        a.close()
        hub.close()


def test_kazoo_retry(client: SyncClient) -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionLoss("flaky")
        return "ok"

    assert client.retry(flaky) == "ok" and len(calls) == 3
    retry = KazooRetry(max_tries=2, delay=0.01)

    def always() -> None:
        raise ConnectionLoss("down")

    with pytest.raises(RetryFailedError):
        retry(always)
    with pytest.raises(NoNodeError):
        retry(client.get, "/missing")


def test_a_failed_add_auth_raises_and_the_session_goes_on(client: SyncClient) -> None:
    """ZooKeeper answers AUTHFAILED and closes the connection; the client reconnects to the
    same session, without the refused credential."""
    session = client.client_id
    states: list[KazooState] = []
    client.add_listener(states.append)
    with pytest.raises(AuthFailedError):
        client.add_auth("nosuch", "whatever")
    client.retry(client.create, "/after-failed-auth", b"")
    assert client.client_id == session
    wait_until(lambda: states[-2:] == [KazooState.SUSPENDED, KazooState.CONNECTED], 10, "the reconnect")
    assert ("nosuch", b"whatever") not in client._client._auth_data
