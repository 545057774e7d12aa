"""kazoo's own recipes (Lock, Election, Counter, Barrier, Queue, TreeCache), unchanged, on zabby."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout
from kazoo.recipe.cache import TreeCache, TreeEvent

from tests.jute.conftest import start_kazoo, stop_kazoo
from tests.jute.helpers import wait_until
from zabby.testing import ServerProcess


@pytest.fixture
def kz2(shared_server: ServerProcess) -> Iterator[KazooClient]:
    client = start_kazoo(shared_server.hosts)
    try:
        yield client
    finally:
        stop_kazoo(client)


def test_lock_is_exclusive_and_freed_with_the_session(shared_server: ServerProcess, kz: KazooClient, kz2: KazooClient) -> None:
    first = kz.Lock("/recipes/lock", "first")
    second = kz2.Lock("/recipes/lock", "second")
    assert first.acquire(timeout=5)
    with pytest.raises(LockTimeout):
        second.acquire(timeout=0.3)
    assert second.contenders() == ["first"]
    got_it = threading.Event()
    waiter = threading.Thread(daemon=True, target=lambda: second.acquire(timeout=10) and got_it.set())
    waiter.start()
    wait_until(lambda: len(first.contenders()) == 2, 5, "the second contender to queue")
    first.release()
    waiter.join(10)
    assert got_it.is_set()
    third = start_kazoo(shared_server.hosts)
    try:
        lock = third.Lock("/recipes/lock", "third")
        stop_kazoo(kz2)  # the holder's session ends: its ephemeral lock node goes
        assert lock.acquire(timeout=10)
        lock.release()
    finally:
        stop_kazoo(third)


def test_election_runs_the_leader(kz: KazooClient, kz2: KazooClient) -> None:
    leading = threading.Event()
    release = threading.Event()
    election = kz.Election("/recipes/election", "alpha")

    def lead() -> None:
        leading.set()
        release.wait(10)

    runner = threading.Thread(daemon=True, target=election.run, args=(lead,))
    runner.start()
    assert leading.wait(10)
    assert kz2.Election("/recipes/election").contenders() == ["alpha"]
    release.set()
    runner.join(10)
    assert not runner.is_alive()


def test_counter(kz: KazooClient, kz2: KazooClient) -> None:
    counter = kz.Counter("/recipes/counter")
    other = kz2.Counter("/recipes/counter")
    threads = [threading.Thread(daemon=True, target=lambda c=c: [c + 1 for _ in range(10)]) for c in (counter, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert counter.value == 20 and other.value == 20
    counter -= 5
    assert other.value == 15


def test_barrier(kz: KazooClient, kz2: KazooClient) -> None:
    barrier = kz.Barrier("/recipes/barrier")
    barrier.create()
    passed = threading.Event()
    waiter = threading.Thread(daemon=True, target=lambda: kz2.Barrier("/recipes/barrier").wait(10) and passed.set())
    waiter.start()
    assert not passed.wait(0.3)
    barrier.remove()
    waiter.join(10)
    assert passed.is_set()
    double = [kz.DoubleBarrier("/recipes/double", 2), kz2.DoubleBarrier("/recipes/double", 2)]
    entered = threading.Thread(daemon=True, target=double[1].enter)
    entered.start()
    double[0].enter()
    entered.join(10)
    leaving = threading.Thread(daemon=True, target=double[1].leave)
    leaving.start()
    double[0].leave()
    leaving.join(10)
    assert not leaving.is_alive()


def test_queues(kz: KazooClient, kz2: KazooClient) -> None:
    queue = kz.Queue("/recipes/queue")
    for item in (b"one", b"two", b"three"):
        queue.put(item)
    consumer = kz2.Queue("/recipes/queue")
    assert len(consumer) == 3
    assert [consumer.get(), consumer.get(), consumer.get(), consumer.get()] == [b"one", b"two", b"three", None]
    locking = kz.LockingQueue("/recipes/lqueue")
    locking.put(b"job", priority=5)
    worker = kz2.LockingQueue("/recipes/lqueue")
    assert worker.get(timeout=5) == b"job"
    assert worker.consume()
    assert len(worker) == 0


def test_tree_cache(kz: KazooClient, kz2: KazooClient) -> None:
    kz.ensure_path("/recipes/tree")
    cache = TreeCache(kz, "/recipes/tree")
    events: list[TreeEvent] = []
    cache.listen(events.append)
    cache.start()
    try:
        wait_until(lambda: any(e.event_type == TreeEvent.INITIALIZED for e in events), 10, "the cache to initialize")
        kz2.create("/recipes/tree/a", b"1")
        kz2.create("/recipes/tree/a/b", b"2")
        wait_until(lambda: cache.get_data("/recipes/tree/a/b") is not None, 10, "the cache to see /a/b")
        kz2.set("/recipes/tree/a", b"changed")
        wait_until(lambda: cache.get_data("/recipes/tree/a").data == b"changed", 10, "the cache to see the change")
        kz2.delete("/recipes/tree/a", recursive=True)
        wait_until(lambda: cache.get_data("/recipes/tree/a") is None, 10, "the cache to drop /a")
        kinds = {e.event_type for e in events}
        assert {TreeEvent.NODE_ADDED, TreeEvent.NODE_UPDATED, TreeEvent.NODE_REMOVED} <= kinds
    finally:
        cache.close()
