"""Recipes against a real server: Lock (threads, processes), Election, watches, TreeCache."""

from __future__ import annotations

import multiprocessing
import random
import threading
import time

import pytest

from tests.client.conftest import wait_until
from zabby import SyncClient, TreeEvent
from zabby.errors import LockTimeout, NoNodeError
from zabby.testing import ServerProcess


def test_lock_mutual_exclusion_threads_and_fencing(client: SyncClient) -> None:
    inside = 0
    max_inside = 0
    tokens: list[int] = []
    guard = threading.Lock()
    errors: list[BaseException] = []

    def work(n: int) -> None:
        nonlocal inside, max_inside
        try:
            for _ in range(3):
                lock = client.Lock("/locks/t", f"w{n}")
                with lock:
                    with guard:
                        inside += 1
                        max_inside = max(max_inside, inside)
                        tokens.append(lock.fencing_token)  # type: ignore[arg-type]
                    time.sleep(0.002)
                    with guard:
                        inside -= 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(daemon=True, target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and max_inside == 1 and len(tokens) == 24
    assert tokens == sorted(tokens) and len(set(tokens)) == 24  # fencing tokens grow per holder
    assert client.get_children("/locks/t") == []


def test_lock_timeout_nonblocking_and_contenders(client: SyncClient) -> None:
    holder = client.Lock("/locks/x", "holder")
    assert holder.acquire()
    other = client.Lock("/locks/x", "other")
    assert other.acquire(blocking=False) is False
    with pytest.raises(LockTimeout):
        other.acquire(timeout=0.3)
    assert holder.contenders() == ["holder"]
    holder.release()
    assert other.acquire(timeout=5)
    other.release()


def _process_worker(hosts: str, path: str, rounds: int, out: "multiprocessing.Queue[tuple[float, float]]") -> None:
    c = SyncClient(hosts)
    c.start()
    for _ in range(rounds):
        with c.Lock("/locks/p"):
            start = time.time()
            with open(path, "a") as f:
                f.write("x")
            time.sleep(0.005)
            out.put((start, time.time()))
    c.close()


def test_lock_mutual_exclusion_processes(zabby_server: ServerProcess, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_process_worker, args=(zabby_server.hosts, str(tmp_path / "f"), 4, out)) for _ in range(3)]
    for proc in procs:
        proc.start()
    intervals = [out.get(timeout=60) for _ in range(12)]
    for proc in procs:
        proc.join(30)
        assert proc.exitcode == 0
    intervals.sort()
    for (_, end), (start, _) in zip(intervals, intervals[1:]):
        assert start >= end - 0.001  # critical sections never overlap


def test_election(client: SyncClient) -> None:
    election = client.Election("/election", "me")
    assert election.run(lambda: "led") == "led"
    assert election.contenders() == []


def test_data_and_children_watch(client: SyncClient) -> None:
    seen: list = []
    kids: list = []

    @client.DataWatch("/dw")
    def on_data(data, stat):  # type: ignore[no-untyped-def]
        seen.append(data)

    @client.ChildrenWatch("/")
    def on_children(children):  # type: ignore[no-untyped-def]
        kids.append(sorted(children))

    client.create("/dw", b"1")
    wait_until(lambda: seen[-1:] == [b"1"], 5, "created")
    client.set("/dw", b"2")
    wait_until(lambda: seen[-1:] == [b"2"], 5, "changed")
    client.delete("/dw")
    wait_until(lambda: seen[-1:] == [None], 5, "deleted")
    assert seen[0] is None
    wait_until(lambda: "dw" not in kids[-1] and any("dw" in k for k in kids), 5, "children")


def _tree(client: SyncClient, root: str) -> dict[str, tuple[bytes, tuple[str, ...]]]:
    out = {}
    todo = [root]
    while todo:
        path = todo.pop()
        try:
            data, _ = client.get(path)
            children = client.get_children(path)
        except NoNodeError:
            continue
        out[path] = (data, tuple(sorted(children)))
        todo.extend(f"{path}/{c}" for c in children)
    return out


def _cached(cache, root: str) -> dict[str, tuple[bytes, tuple[str, ...]]]:  # type: ignore[no-untyped-def]
    snap = cache.snapshot()
    return {p: (n.data, tuple(sorted(cache.get_children(p) or ()))) for p, n in snap.items()}


def _storm(client: SyncClient, root: str, rounds: int, rng: random.Random) -> None:
    names = [f"{root}/n{i}" for i in range(12)]
    for _ in range(rounds):
        path = rng.choice(names + [f"{n}/c{rng.randrange(3)}" for n in names])
        action = rng.random()
        try:
            if action < 0.45:
                client.create(path, str(rng.random()).encode())
            elif action < 0.8:
                client.set(path, str(rng.random()).encode())
            else:
                client.delete(path, recursive=True)
        except Exception:  # NoNode / NodeExists are part of the storm
            pass


def test_tree_cache_matches_tree_through_storm_and_restart(zabby_server: ServerProcess) -> None:
    client = SyncClient(zabby_server.hosts, timeout=6.0)
    client.start()
    try:
        client.ensure_path("/tc")
        cache = client.TreeCache("/tc")
        events: list[TreeEvent] = []
        cache.listen(events.append)
        cache.start()
        assert cache.initialized.wait(10)
        rng = random.Random(7)
        _storm(client, "/tc", 300, rng)
        wait_until(lambda: _cached(cache, "/tc") == _tree(client, "/tc"), 10, "cache == tree after storm")
        assert {e.event_type for e in events} >= {TreeEvent.NODE_ADDED, TreeEvent.NODE_UPDATED, TreeEvent.NODE_REMOVED, TreeEvent.INITIALIZED}

        writer = SyncClient(zabby_server.hosts)  # changes made while the cache's client is away
        zabby_server.kill()
        wait_until(lambda: not client.connected, 5, "disconnect")
        zabby_server.start()
        writer.start()
        _storm(writer, "/tc", 100, rng)
        writer.close()
        wait_until(lambda: client.connected, 15, "reconnect")
        wait_until(lambda: _cached(cache, "/tc") == _tree(client, "/tc"), 15, "cache == tree after restart")
        kinds = [e.event_type for e in events]
        assert TreeEvent.CONNECTION_SUSPENDED in kinds and TreeEvent.CONNECTION_RECONNECTED in kinds
        cache.close()
    finally:
        client.close()


def test_kazoo_shortcuts_bind_counter_and_barriers(client: SyncClient) -> None:
    """``zk.Counter(path)`` and the barriers, as kazoo's client offers them."""
    counter = client.Counter("/shortcut-counter")
    counter += 5
    counter -= 2
    assert counter.value == 3
    barrier = client.Barrier("/shortcut-barrier")
    barrier.create()
    assert not barrier.wait(0.1)
    barrier.remove()
    assert barrier.wait(1)
    assert client.DoubleBarrier("/shortcut-double", 1).client is client
