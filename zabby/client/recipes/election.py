"""Leader election on top of the lock (kazoo's ``Election``): the lock holder is the leader.

``AsyncElection`` runs on ``zabby.Client`` (asyncio or trio; the leader's function may be a
coroutine function); ``Election`` is kazoo's blocking shape for ``SyncClient``, on the
blocking ``Lock`` (the same lock code), and runs the leader's function in the calling thread.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from zabby.errors import CancelledError

from .lock import AsyncLock, Lock

if TYPE_CHECKING:
    from ..aio import Client
    from ..blocking import BlockingClient


def _check_callable(func: object) -> None:
    if not callable(func):
        raise ValueError("leader function is not callable")


class AsyncElection:
    def __init__(self, client: Client, path: str, identifier: str | None = None) -> None:
        self.lock = AsyncLock(client, path, identifier)

    async def run(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Wait until elected, run ``func`` (awaited if it is a coroutine function) as leader,
        then step down; return its result, or None if ``cancel()`` ended the wait."""
        _check_callable(func)
        try:
            async with self.lock:
                result = func(*args, **kwargs)
                return await result if inspect.isawaitable(result) else result
        except CancelledError:
            return None

    def cancel(self) -> None:
        self.lock.cancel()

    async def contenders(self) -> list[str]:
        return await self.lock.contenders()


class Election:
    def __init__(self, client: BlockingClient, path: str, identifier: str | None = None) -> None:
        self.lock = Lock(client, path, identifier)

    def run(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Block until elected, run ``func`` as leader, then step down; None if cancelled."""
        _check_callable(func)
        try:
            with self.lock:
                return func(*args, **kwargs)
        except CancelledError:
            return None

    def cancel(self) -> None:
        self.lock.cancel()

    def contenders(self) -> list[str]:
        return self.lock.contenders()
