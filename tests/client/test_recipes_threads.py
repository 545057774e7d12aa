"""The blocking recipes' threads (recipes/_runtime.py's ThreadRuntime): recipes used from the
SyncClient's callback thread, and user functions that raise."""

from __future__ import annotations

import threading
from typing import Any

from tests.client.conftest import wait_until
from zabby import SyncClient, WatchedEvent


def test_a_data_watch_made_inside_a_callback_is_called(client: SyncClient) -> None:
    """Its first call runs in the caller's thread, as kazoo's does: here the callback thread,
    which must not wait on itself."""
    seen: list[Any] = []
    client.create("/nest", b"v")

    def on_children(children: list[str]) -> None:
        if children and not seen:
            client.DataWatch("/nest/" + children[0], lambda data, stat: seen.append(data))

    client.ChildrenWatch("/nest", on_children)
    client.create("/nest/kid", b"k")
    wait_until(lambda: seen[:1] == [b"k"], 10, "the nested watch's first call")
    client.set("/nest/kid", b"k2")
    wait_until(lambda: seen[-1:] == [b"k2"], 10, "the nested watch's next call")


def test_a_lock_taken_on_the_callback_thread_is_still_granted(client: SyncClient) -> None:
    """The waiter blocks the callback thread, so its predecessor's watch event cannot reach
    it: the wait's re-check (every WAIT_SLICE_S) grants it once the holder lets go."""
    holder = client.Lock("/cbl", "holder")
    holder.acquire()
    granted = threading.Event()

    def in_callback(event: WatchedEvent) -> None:
        with client.Lock("/cbl", "waiter"):
            granted.set()

    client.exists("/cbl-trigger", watch=in_callback)
    client.create("/cbl-trigger", b"")
    wait_until(lambda: len(client.get_children("/cbl")) == 2, 10, "the waiter queued")
    holder.release()
    assert granted.wait(10)
    wait_until(lambda: client.get_children("/cbl") == [], 10, "the waiter released")


def test_a_raising_watch_function_is_called_again_on_the_next_change(client: SyncClient) -> None:
    calls: list[Any] = []

    def flaky(data: bytes | None, stat: Any) -> None:
        calls.append(data)
        if data == b"boom":
            raise RuntimeError("a user function that fails")

    client.create("/flaky", b"ok")
    client.DataWatch("/flaky", flaky)
    client.set("/flaky", b"boom")
    wait_until(lambda: calls[-1:] == [b"boom"], 10, "the failing call")
    client.set("/flaky", b"fine")
    wait_until(lambda: calls[-1:] == [b"fine"], 10, "called again after it raised")
    assert client.get("/flaky")[0] == b"fine"
