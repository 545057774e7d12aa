"""A fair, ephemeral-sequential lock (kazoo's ``Lock``) with a fencing token.

Theory of operation
-------------------
A contender creates ``<path>/<uuid>__lock__<seq>`` (ephemeral, sequential) and holds the
lock when its node has the lowest sequence number; otherwise it watches only its immediate
predecessor (no herd effect) and re-checks when that node goes.  Fair: the order is the
creation order.  The uuid prefix lets a contender find its own node again if the create's
reply was lost to a connection drop or a cancellation (the create may have been applied).

``fencing_token`` is the lock node's czxid: it grows with every new holder, so a resource
that remembers the highest token it has seen can refuse a stale holder's writes.
A session loss (LOST) releases the lock on the server; ``is_acquired`` is then false.

``AsyncLock`` is the one implementation (``async with lock:`` on ``zabby.Client``, under
asyncio or trio); ``Lock`` is kazoo's blocking shape for ``SyncClient`` and runs the same
code on the client's loop thread (see ``_runtime``).
"""

from __future__ import annotations

import math
import uuid
from typing import TYPE_CHECKING, Any

import anyio

from zabby.errors import CancelledError, ConnectionLoss, LockTimeout, NoNodeError, NodeExistsError

from ..states import KazooState, WatchedEvent
from ._runtime import AsyncRuntime, Runtime, ThreadRuntime, on_loop

if TYPE_CHECKING:
    from ..aio import Client
    from ..blocking import BlockingClient

WAIT_SLICE_S = 1.0  # re-check the children this often even without a watch event
CLEANUP_S = 5.0  # how long a cancelled acquire may spend deleting its node
_MAX_ROUNDS = 1_000_000
_CREATE_TRIES = 3


def _sequence(name: str) -> int:
    return int(name[-10:]) if name[-10:].isdigit() else -1


class AsyncLock:
    """kazoo's Lock for ``zabby.Client``: ``await acquire()``, ``await release()``, ``async with``."""

    _NODE_NAME = "__lock__"
    _EXCLUDE_NAMES = ("__lock__",)

    def __init__(self, client: Client, path: str, identifier: str | None = None, extra_lock_patterns: tuple[str, ...] = (),
                 *, runtime: Runtime | None = None) -> None:  # fmt: skip
        self.client = client
        self._runtime: Runtime = runtime or AsyncRuntime(client)
        self.path = path.rstrip("/") or "/"
        self._exclude_names = set(self._EXCLUDE_NAMES) | set(extra_lock_patterns)
        self.data = str(identifier or "").encode("utf-8")
        self.node: str | None = None
        self.prefix = uuid.uuid4().hex + self._NODE_NAME
        self.create_path = self.path + "/" + self.prefix
        self.is_acquired = False
        self.assured_path = False
        self.cancelled = False
        self.fencing_token: int | None = None
        self._wake: anyio.Event | None = None
        self._guard: anyio.Lock | None = None  # one acquire of this object at a time (made in the loop)
        self._on_predecessor = self._runtime.callback(self._predecessor_changed)
        self._on_state = self._runtime.callback(self._state_changed)

    # -- public API ------------------------------------------------------------------------
    async def acquire(self, blocking: bool = True, timeout: float | None = None, ephemeral: bool = True) -> bool:
        """Take the lock; False if not ``blocking`` and it is taken (or another acquire of this
        object is under way); LockTimeout after ``timeout`` seconds; CancelledError after
        ``cancel()``.  Cancelling the calling task abandons the attempt and deletes its node."""
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout >= 0):
            raise ValueError(f"timeout must be a number of seconds (0 or more) or None, not {timeout!r}")
        if self.is_acquired:
            raise RuntimeError("Lock is not re-entrant: already acquired")
        deadline = math.inf if timeout is None else anyio.current_time() + timeout
        if self._guard is None:
            self._guard = anyio.Lock()
        if not blocking and self._guard.locked():
            return False
        with anyio.move_on_after(deadline - anyio.current_time()) as waiting:
            await self._guard.acquire()
        if waiting.cancelled_caught:
            raise LockTimeout(f"Failed to acquire lock on {self.path} within the timeout (another acquire of this object held it)")
        try:
            return await self._acquire_guarded(blocking, deadline, ephemeral)
        finally:
            self._guard.release()

    async def _acquire_guarded(self, blocking: bool, deadline: float, ephemeral: bool) -> bool:
        if self.is_acquired:
            raise RuntimeError("Lock is not re-entrant: already acquired")
        self.cancelled = False
        self.client.add_listener(self._on_state)
        try:
            got = await self._acquire(blocking, deadline, ephemeral)
        except BaseException:
            await self._cleanup()
            raise
        finally:
            self.client.remove_listener(self._on_state)
        if not got:
            await self._cleanup()
        self.is_acquired = got
        return got

    async def release(self) -> bool:
        """Give the lock up (delete the node); True if it was held."""
        if not self.is_acquired:
            return False
        self.is_acquired = False
        node, self.node = self.node, None
        if node is not None:
            try:
                await self.client.retry(self.client.delete, self.path + "/" + node)
            except NoNodeError:
                pass
        return True

    def cancel(self) -> None:
        """Make a waiting ``acquire`` raise CancelledError (kazoo's ``cancel``)."""
        self.cancelled = True
        if self._wake is not None:
            self._wake.set()

    async def contenders(self) -> list[str]:
        """Identifiers of the contenders, holder first."""
        out = []
        for name in await self._sorted_children():
            try:
                data, _ = await self.client.get(self.path + "/" + name)
            except NoNodeError:
                continue
            out.append(data.decode("utf-8"))
        return out

    async def __aenter__(self) -> AsyncLock:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_S):
            await self.release()

    # -- internals -------------------------------------------------------------------------
    async def _state_changed(self, state: KazooState) -> None:
        if state != KazooState.CONNECTED and self._wake is not None:
            self._wake.set()

    async def _predecessor_changed(self, event: WatchedEvent) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _acquire(self, blocking: bool, deadline: float, ephemeral: bool) -> bool:
        if not self.assured_path:
            await self.client.ensure_path(self.path)
            self.assured_path = True
        self.node = await self._create_node(ephemeral)
        for _ in range(_MAX_ROUNDS):
            if self.cancelled:
                raise CancelledError("lock acquisition cancelled")
            children = await self._sorted_children()
            if self.node not in children:
                raise ConnectionLoss(f"lock node {self.node} vanished (session lost?)")
            index = children.index(self.node)
            if index == 0:
                return True
            if not blocking:
                return False
            await self._wait_for(children[index - 1], deadline)
        raise LockTimeout("too many rounds waiting for the lock")

    async def _create_node(self, ephemeral: bool) -> str:
        for _ in range(_CREATE_TRIES):
            try:
                path, stat = await self.client.create(self.create_path, self.data, ephemeral=ephemeral, sequence=True, include_data=True)
                self.fencing_token = stat.czxid
                return path.rsplit("/", 1)[1]
            except ConnectionLoss:  # the create may have been applied: look for our prefix
                mine = [c for c in await self._children() if c.startswith(self.prefix)]
                if mine:
                    found = await self.client.exists(self.path + "/" + mine[0])
                    if found is not None:
                        self.fencing_token = found.czxid
                        return mine[0]
            except NodeExistsError:  # pragma: no cover - sequential names are unique
                continue
        raise ConnectionLoss("could not create the lock node")

    async def _wait_for(self, predecessor: str, deadline: float) -> None:
        """Until the predecessor goes, a session event, ``cancel()`` or the next slice."""
        self._wake = anyio.Event()
        if await self.client.exists(self.path + "/" + predecessor, watch=self._on_predecessor) is None:
            return
        remaining = deadline - anyio.current_time()
        if remaining <= 0:
            raise LockTimeout(f"Failed to acquire lock on {self.path} within the timeout")
        with anyio.move_on_after(min(remaining, WAIT_SLICE_S)):
            await self._wake.wait()
        if not self.client.connected:
            await self._wait_connected(deadline)

    async def _wait_connected(self, deadline: float) -> None:
        while not self.client.connected:  # bounded by the deadline or the session's end
            if self.client.state == KazooState.LOST:
                raise ConnectionLoss("session lost while waiting for the lock")
            if anyio.current_time() >= deadline:
                raise LockTimeout(f"Failed to acquire lock on {self.path} within the timeout")
            await anyio.sleep(0.02)

    async def _children(self) -> list[str]:
        try:
            children: list[str] = await self.client.get_children(self.path)
            return children
        except NoNodeError:
            self.assured_path = False
            return []

    async def _sorted_children(self) -> list[str]:
        names = [c for c in await self._children() if any(n in c for n in self._exclude_names)]
        names.sort(key=_sequence)
        return names

    async def _cleanup(self) -> None:
        """Delete our node, even when the attempt was cancelled (shielded, bounded).  Requests
        of one session are answered in order, so a create still in flight is seen here."""
        self.node = None
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_S):
            try:
                for name in await self._children():
                    if name.startswith(self.prefix):
                        await self.client.delete(self.path + "/" + name)
            except Exception:  # the session may be gone; the node then goes with it
                pass


class Lock:
    """kazoo's blocking Lock for ``SyncClient`` (``with lock:``): ``AsyncLock`` run on the
    client's loop thread."""

    def __init__(self, client: BlockingClient, path: str, identifier: str | None = None, extra_lock_patterns: tuple[str, ...] = ()) -> None:
        self.client = client
        self._runtime = ThreadRuntime(client)
        self._lock = AsyncLock(client._client, path, identifier, extra_lock_patterns, runtime=self._runtime)

    @property
    def path(self) -> str:
        return self._lock.path

    @property
    def node(self) -> str | None:
        return self._lock.node

    @property
    def is_acquired(self) -> bool:
        return self._lock.is_acquired

    @property
    def cancelled(self) -> bool:
        return self._lock.cancelled

    @property
    def fencing_token(self) -> int | None:
        return self._lock.fencing_token

    def acquire(self, blocking: bool = True, timeout: float | None = None, ephemeral: bool = True) -> bool:
        """See ``AsyncLock.acquire``; blocks this thread only."""
        return self._runtime.run(self._lock.acquire, blocking, timeout, ephemeral)

    def release(self) -> bool:
        return self._runtime.run(self._lock.release, timeout=self.client.request_timeout * 2)

    def cancel(self) -> None:
        self._runtime.run(on_loop, self._lock.cancel, timeout=self.client.request_timeout)

    def contenders(self) -> list[str]:
        return self._runtime.run(self._lock.contenders, timeout=self.client.request_timeout * 2)

    def __enter__(self) -> Lock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
