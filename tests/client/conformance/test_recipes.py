"""The recipes on all three clients: Lock, Election, DataWatch/ChildrenWatch, Counter, Barrier,
DoubleBarrier (the async classes under asyncio and trio, kazoo's blocking ones on SyncClient)."""

from __future__ import annotations

import struct
from typing import Any

import anyio
import anyio.to_thread
import pytest

from zabby.errors import CancelledError, LockTimeout

from .adapter import Surface, Zk, eventually
from .conftest import MakeClient

pytestmark = pytest.mark.anyio


async def test_lock_excludes_queues_fairly_and_fences(zk: Zk, make_client: MakeClient, path: str) -> None:
    other = await make_client()
    first, second = zk.recipe("Lock", path, "first"), other.recipe("Lock", path, "second")
    assert await first.acquire() is True and first.raw.is_acquired
    assert await second.acquire(blocking=False) is False
    with pytest.raises(LockTimeout):
        await second.acquire(timeout=0.3)
    assert await zk.get_children(path) == [first.raw.node]  # the losers left no node behind
    order: list[str] = []

    async def wait_then_hold() -> None:
        assert await second.acquire(timeout=20) is True
        order.append("second")
        await second.release()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(wait_then_hold)
        await eventually(lambda: second.raw.node is not None, "the second contender queued")
        assert await first.contenders() == ["first", "second"]
        order.append("first")
        token = first.raw.fencing_token
        assert await first.release() is True
    assert order == ["first", "second"] and second.raw.fencing_token > token
    assert await zk.get_children(path) == []


async def test_lock_cancel_and_task_cancellation_leave_no_node(zk: Zk, make_client: MakeClient, path: str) -> None:
    holder = zk.recipe("Lock", path, "holder")
    await holder.acquire()
    other = await make_client()
    waiter = other.recipe("Lock", path, "waiter")
    outcome: list[Any] = []

    async def acquire() -> None:
        try:
            outcome.append(await waiter.acquire())
        except CancelledError as exc:
            outcome.append(exc)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(acquire)
        await eventually(lambda: waiter.raw.node is not None, "the waiter queued")
        await anyio.to_thread.run_sync(waiter.raw.cancel) if zk.threaded else waiter.raw.cancel()
    assert len(outcome) == 1 and isinstance(outcome[0], CancelledError)
    if not zk.threaded:  # the framework's own cancellation (a timeout, task.cancel()) as well
        with anyio.move_on_after(0.3) as scope:
            await waiter.acquire()
        assert scope.cancelled_caught and not waiter.raw.is_acquired
    assert await zk.get_children(path) == [holder.raw.node]
    await holder.release()


async def test_one_lock_object_acquired_twice_at_once_obeys_each_timeout(zk: Zk, make_client: MakeClient, path: str) -> None:
    holder = (await make_client()).recipe("Lock", path, "holder")
    await holder.acquire()
    lock = zk.recipe("Lock", path, "both")
    outcome: list[str] = []

    async def first() -> None:
        with pytest.raises(LockTimeout):
            await lock.acquire(timeout=1.5)
        outcome.append("first timed out")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(first)
        await eventually(lambda: lock.raw.node is not None, "the first acquire queued")
        assert await lock.acquire(blocking=False) is False
        with pytest.raises(LockTimeout):
            await lock.acquire(timeout=0.2)  # waits for the first acquire, not for the lock
    assert outcome == ["first timed out"] and await zk.get_children(path) == [holder.raw.node]
    await holder.release()


async def test_async_with_on_the_async_lock(zk: Zk, path: str) -> None:
    if zk.threaded:
        lock = zk.recipe("Lock", path)
        await anyio.to_thread.run_sync(lambda: lock.raw.__enter__())
        assert lock.raw.is_acquired
        await anyio.to_thread.run_sync(lambda: lock.raw.__exit__(None, None, None))
    else:
        async with zk.recipe("Lock", path).raw as held:
            assert held.is_acquired and len(await zk.get_children(path)) == 1
    assert await zk.get_children(path) == []


async def test_election_runs_the_leader_then_steps_down(zk: Zk, make_client: MakeClient, path: str) -> None:
    election = zk.recipe("Election", path, "me")
    assert await election.run(lambda x: ("led", x), 7) == ("led", 7)
    if not zk.threaded:
        async def lead() -> str:
            assert await election.contenders() == ["me"]
            return "async leader"

        assert await election.run(lead) == "async leader"
    assert await election.contenders() == []
    holder = (await make_client()).recipe("Lock", path, "someone")
    await holder.acquire()
    waiting = zk.recipe("Election", path, "second")
    results: list[Any] = []

    async def run() -> None:
        results.append(await waiting.run(lambda: "never"))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run)
        await eventually(lambda: waiting.raw.lock.node is not None, "queued for leadership")
        await anyio.to_thread.run_sync(waiting.raw.cancel) if zk.threaded else waiting.raw.cancel()
    assert results == [None]
    with pytest.raises(ValueError):
        await election.run("not callable")
    await holder.release()


async def test_data_and_children_watch(zk: Zk, path: str) -> None:
    data: list[Any] = []
    children: list[list[str]] = []
    await zk.create(path, b"")
    await zk.data_watch(path + "/node", lambda value, stat: data.append(value))
    await zk.children_watch(path, lambda names: children.append(sorted(names)))
    assert data == [None] and children == [[]]  # the first call comes at once
    await zk.create(path + "/node", b"1")
    await eventually(lambda: data[-1:] == [b"1"], "created")
    await zk.set(path + "/node", b"2")
    await eventually(lambda: data[-1:] == [b"2"], "changed")
    await zk.delete(path + "/node")
    await eventually(lambda: data[-1:] == [None], "deleted")
    await eventually(lambda: children[-1] == [] and ["node"] in children, "the child came and went")


async def test_a_watch_function_returning_false_stops_it(zk: Zk, path: str) -> None:
    calls: list[Any] = []

    def until_two(value: bytes | None, stat: Any) -> bool:
        calls.append(value)
        return len(calls) < 2

    await zk.create(path, b"a")
    await zk.data_watch(path, until_two)
    await zk.set(path, b"b")
    await eventually(lambda: calls == [b"a", b"b"], "two calls")
    await zk.set(path, b"c")
    await zk.sync(path)
    await anyio.sleep(0.2)
    assert calls == [b"a", b"b"]


async def add(counter: Surface, value: int | float) -> None:
    if counter.threaded:
        await anyio.to_thread.run_sync(lambda: counter.raw + value)  # kazoo's counter += value
    else:
        await counter.add(value)


async def value_of(counter: Surface) -> Any:
    if counter.threaded:
        return await anyio.to_thread.run_sync(lambda: counter.raw.value)
    return await counter.get_value()


async def test_counter_changes_are_never_lost_under_contention(zk: Zk, make_client: MakeClient, path: str) -> None:
    counters = [zk.recipe("Counter", path), (await make_client()).recipe("Counter", path)]

    async def bump(counter: Surface) -> None:
        for _ in range(10):
            await add(counter, 1)

    async with anyio.create_task_group() as tasks:
        for counter in counters:
            tasks.start_soon(bump, counter)
    assert await value_of(counters[0]) == 20 and (await zk.get(path))[0] == b"20"
    await add(counters[0], -5)
    assert (counters[0].raw.pre_value, counters[0].raw.post_value) == (20, 15)
    with pytest.raises(TypeError):
        await add(counters[0], 1.5)


async def test_counter_float_and_curator_formats(zk: Zk, path: str) -> None:
    floats = zk.recipe("Counter", path + "/f", default=1.0)
    await add(floats, 2.5)
    assert await value_of(floats) == 3.5 and (await zk.get(path + "/f"))[0] == b"3.5"
    curator = zk.recipe("Counter", path + "/c", support_curator=True)
    await add(curator, 7)
    assert (await zk.get(path + "/c"))[0] == struct.pack(">i", 7)
    with pytest.raises(TypeError):
        zk.recipe("Counter", path + "/x", default=1.0, support_curator=True)


async def test_barrier_holds_until_removed(zk: Zk, make_client: MakeClient, path: str) -> None:
    barrier = zk.recipe("Barrier", path)
    await barrier.create()
    assert await barrier.wait(timeout=0.2) is False
    passed: list[bool] = []
    other = (await make_client()).recipe("Barrier", path)

    async def wait() -> None:
        passed.append(await other.wait(timeout=20))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(wait)
        await anyio.sleep(0.1)
        assert passed == []
        assert await barrier.remove() is True
    assert passed == [True]
    assert await barrier.remove() is False and await barrier.wait() is True


async def test_double_barrier_enters_and_leaves_together(zk: Zk, make_client: MakeClient, path: str) -> None:
    members = [zk.recipe("DoubleBarrier", path, 3, "m0")]
    for n in (1, 2):
        members.append((await make_client()).recipe("DoubleBarrier", path, 3, f"m{n}"))
    assert await members[0].enter(timeout=0.2) is False and not members[0].raw.participating
    entered: list[bool] = []

    async def enter(member: Surface) -> None:
        entered.append(await member.enter(timeout=20))

    async with anyio.create_task_group() as tasks:
        for member in members[:2]:
            tasks.start_soon(enter, member)
        await anyio.sleep(0.2)
        assert entered == []  # two of three: held
        tasks.start_soon(enter, members[2])
    assert entered == [True] * 3
    left: list[bool] = []

    async def leave(member: Surface) -> None:
        left.append(await member.leave(timeout=20))

    async with anyio.create_task_group() as tasks:
        for member in members:
            tasks.start_soon(leave, member)
    assert left == [True] * 3 and await zk.get_children(path) == []
