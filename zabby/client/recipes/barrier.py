"""Barriers (kazoo's ``Barrier`` and ``DoubleBarrier``).

``Barrier``: the barrier is up while its node exists; ``wait()`` returns once it is gone.
``DoubleBarrier``: ``num_clients`` members each ``enter()`` (an ephemeral child) and are held
until all have entered (the last one in creates ``ready``), then each ``leave()`` and is held
until all have left: the lowest member waits for the highest to go, every other member
deletes its node and waits for the lowest, until none is left.

Waits re-check every ``WAIT_SLICE_S`` as well as on the watch event, so a missed event (a
blocked callback thread) costs at most a slice.  Unlike kazoo, whose ``enter``/``leave``
swallow every error, a failed ``enter``/``leave`` deletes this member's node and raises.

``AsyncBarrier``/``AsyncDoubleBarrier`` are the one implementation (``zabby.Client``, asyncio or
trio); ``Barrier``/``DoubleBarrier`` are kazoo's blocking shape for ``SyncClient``.
"""

from __future__ import annotations

import math
import os
import socket
import uuid
from typing import TYPE_CHECKING

import anyio

from zabby.errors import NodeExistsError, NoNodeError

from ..states import WatchedEvent
from ._runtime import AsyncRuntime, Runtime, ThreadRuntime

if TYPE_CHECKING:
    from ..aio import Client
    from ..blocking import BlockingClient

WAIT_SLICE_S = 1.0
READY = "ready"
_MAX_ROUNDS = 1_000_000


def _check_timeout(timeout: float | None) -> float:
    """The deadline for ``timeout`` seconds from now (inf for None)."""
    if timeout is None:
        return math.inf
    if not isinstance(timeout, (int, float)) or timeout < 0:
        raise ValueError(f"timeout must be a number of seconds (0 or more) or None, not {timeout!r}")
    return anyio.current_time() + timeout


class _Waiter:
    """Waits for a node to appear or go, woken by an exists-watch (one watcher per recipe
    object, so repeated waits do not pile watchers up on the server)."""

    def __init__(self, client: Client, runtime: Runtime) -> None:
        self.client = client
        self._wake: anyio.Event | None = None
        self._on_event = runtime.callback(self._changed)

    async def _changed(self, event: WatchedEvent) -> None:
        if self._wake is not None:
            self._wake.set()

    async def until(self, path: str, present: bool, deadline: float) -> bool:
        """True once ``path`` exists (``present``) or does not; False at the deadline."""
        for _ in range(_MAX_ROUNDS):
            self._wake = anyio.Event()
            if (await self.client.exists(path, watch=self._on_event) is not None) == present:
                return True
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                return False
            with anyio.move_on_after(min(remaining, WAIT_SLICE_S)):
                await self._wake.wait()
        return False


class AsyncBarrier:
    def __init__(self, client: Client, path: str, *, runtime: Runtime | None = None) -> None:
        self.client = client
        self.path = path
        self._waiter = _Waiter(client, runtime or AsyncRuntime(client))

    async def create(self) -> None:
        """Put the barrier up (its node), if it is not up already."""
        await self.client.retry(self.client.ensure_path, self.path)

    async def remove(self) -> bool:
        """Take the barrier down; False if it was not up."""
        try:
            await self.client.retry(self.client.delete, self.path)
            return True
        except NoNodeError:
            return False

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until the barrier is down: True, or False after ``timeout`` seconds."""
        return await self._waiter.until(self.path, False, _check_timeout(timeout))


class AsyncDoubleBarrier:
    def __init__(self, client: Client, path: str, num_clients: int, identifier: str | None = None, *, runtime: Runtime | None = None) -> None:
        if not isinstance(num_clients, int) or isinstance(num_clients, bool) or num_clients < 1:
            raise ValueError(f"num_clients must be a positive int, not {num_clients!r}")
        self.client = client
        self.path = path
        self.num_clients = num_clients
        self._identifier = (identifier or f"{socket.getfqdn()}-{os.getpid()}").encode("utf-8")
        self.participating = False
        self.assured_path = False
        self.node_name = uuid.uuid4().hex
        self.create_path = self.path + "/" + self.node_name
        self._waiter = _Waiter(client, runtime or AsyncRuntime(client))

    async def enter(self, timeout: float | None = None) -> bool:
        """Join, and wait until ``num_clients`` members have joined: True, or False after
        ``timeout`` seconds (this member then leaves again)."""
        deadline = _check_timeout(timeout)
        try:
            entered: bool = await self.client.retry(self._enter, deadline)
        except BaseException:
            await self._cleanup()
            raise
        if not entered:
            await self._cleanup()
        self.participating = entered
        return entered

    async def leave(self, timeout: float | None = None) -> bool:
        """Leave, and wait until every member has left: True, or False after ``timeout``."""
        deadline = _check_timeout(timeout)
        try:
            left: bool = await self.client.retry(self._leave, deadline)
        except BaseException:
            await self._cleanup()
            raise
        self.participating = False
        return left

    async def _enter(self, deadline: float) -> bool:
        if not self.assured_path:
            await self.client.ensure_path(self.path)
            self.assured_path = True
        try:
            await self.client.create(self.create_path, self._identifier, ephemeral=True)
        except NodeExistsError:  # a retry after our create was applied
            pass
        members = [c for c in await self.client.get_children(self.path) if c != READY]
        if len(members) >= self.num_clients:
            await self.client.ensure_path(self.path + "/" + READY)
            return True
        return await self._waiter.until(self.path + "/" + READY, True, deadline)

    async def _leave(self, deadline: float) -> bool:
        try:
            await self.client.delete(self.path + "/" + READY)
        except NoNodeError:
            pass
        for _ in range(_MAX_ROUNDS):
            members = sorted(c for c in await self.client.get_children(self.path) if c != READY)
            if not members:
                return True
            if members == [self.node_name]:
                await self._delete_own()
                return True
            if self.node_name == members[0]:  # the lowest waits for the highest to go
                watched = members[-1]
            else:
                await self._delete_own()
                watched = members[0]
            if not await self._waiter.until(self.path + "/" + watched, False, deadline):
                return False
        return False

    async def _delete_own(self) -> None:
        try:
            await self.client.delete(self.create_path)
        except NoNodeError:
            pass

    async def _cleanup(self) -> None:
        self.participating = False
        with anyio.CancelScope(shield=True), anyio.move_on_after(5.0):
            try:
                await self._delete_own()
            except Exception:  # the session may be gone; the node then goes with it
                pass


class Barrier:
    """kazoo's Barrier for ``SyncClient``."""

    def __init__(self, client: BlockingClient, path: str) -> None:
        self.client = client
        self._runtime = ThreadRuntime(client)
        self._barrier = AsyncBarrier(client._client, path, runtime=self._runtime)

    @property
    def path(self) -> str:
        return self._barrier.path

    def create(self) -> None:
        self._runtime.run(self._barrier.create, timeout=self.client.request_timeout * 4)

    def remove(self) -> bool:
        return self._runtime.run(self._barrier.remove, timeout=self.client.request_timeout * 4)

    def wait(self, timeout: float | None = None) -> bool:
        return self._runtime.run(self._barrier.wait, timeout)


class DoubleBarrier:
    """kazoo's DoubleBarrier for ``SyncClient``."""

    def __init__(self, client: BlockingClient, path: str, num_clients: int, identifier: str | None = None) -> None:
        self.client = client
        self._runtime = ThreadRuntime(client)
        self._barrier = AsyncDoubleBarrier(client._client, path, num_clients, identifier, runtime=self._runtime)

    @property
    def path(self) -> str:
        return self._barrier.path

    @property
    def participating(self) -> bool:
        return self._barrier.participating

    def enter(self, timeout: float | None = None) -> bool:
        return self._runtime.run(self._barrier.enter, timeout)

    def leave(self, timeout: float | None = None) -> bool:
        return self._runtime.run(self._barrier.leave, timeout)
