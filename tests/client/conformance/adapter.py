"""One async surface over the three clients, so one test body serves them all.

``Zk(flavor, hosts)`` holds ``zabby.Client`` (flavors ``asyncio`` and ``trio``: the test runs
under that framework, anyio's pytest plugin picks it) or ``SyncClient`` (flavor ``sync``: each
call runs in a worker thread, as a threaded program would call it).  ``await zk.get(path)``
works for all three; ``zk.raw`` is the client itself, for properties and plain methods.
Recipes are reached the same way: ``zk.recipe("Lock", path)`` is an ``AsyncLock`` or a
``Lock``, behind the same surface; ``zk.tree_cache(path, listener)`` a loaded tree cache.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread

from zabby import Client, SyncClient
from zabby.client import recipes

FLAVORS = ("asyncio", "trio", "sync")
WAIT_S = 10.0  # how long a test waits for something that should happen at once


class Surface:
    """``await surface.method(...)`` for a blocking or an async object alike."""

    def __init__(self, target: Any, threaded: bool) -> None:
        self.raw = target
        self.threaded = threaded

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self.raw, name)
        if not callable(method):
            raise AttributeError(f"{name} is not a method: use .raw.{name}")
        threaded = self.threaded

        async def call(*args: Any, **kwargs: Any) -> Any:
            if threaded:
                return await anyio.to_thread.run_sync(functools.partial(method, *args, **kwargs))
            return await method(*args, **kwargs)

        return call


class Zk(Surface):
    def __init__(self, flavor: str, hosts: str, **options: Any) -> None:
        if flavor not in FLAVORS:
            raise ValueError(f"unknown client flavor {flavor!r}")
        self.flavor = flavor
        super().__init__(SyncClient(hosts, **options) if flavor == "sync" else Client(hosts, **options), flavor == "sync")

    async def commit(self, transaction: Any) -> list[Any]:
        if self.threaded:
            return list(await anyio.to_thread.run_sync(transaction.commit))
        return list(await transaction.commit())

    def recipe(self, name: str, *args: Any, **kwargs: Any) -> Surface:
        """The recipe ``name`` (kazoo's class name) on this client."""
        cls = getattr(recipes, name if self.threaded else "Async" + name)
        return Surface(cls(self.raw, *args, **kwargs), self.threaded)

    async def data_watch(self, path: str, func: Callable[..., Any]) -> Any:
        if self.threaded:
            return await anyio.to_thread.run_sync(recipes.DataWatch, self.raw, path, func)
        return await recipes.AsyncDataWatch(self.raw, path, func).start()

    async def children_watch(self, path: str, func: Callable[..., Any]) -> Any:
        if self.threaded:
            return await anyio.to_thread.run_sync(recipes.ChildrenWatch, self.raw, path, func)
        return await recipes.AsyncChildrenWatch(self.raw, path, func).start()

    async def tree_cache(self, path: str, listener: Callable[[Any], Any], **kwargs: Any) -> Surface:
        """A tree cache of ``path``, ``listener`` listening from the start, once it is loaded
        (``AsyncTreeCache.start()`` returns then; kazoo's ``start()`` does not: wait for
        ``initialized``)."""
        if self.threaded:
            cache = recipes.TreeCache(self.raw, path, **kwargs)
            cache.listen(listener)
            cache.start()
            if not await anyio.to_thread.run_sync(cache.initialized.wait, WAIT_S):
                raise AssertionError(f"the tree cache of {path} did not load within {WAIT_S}s")
            return Surface(cache, True)
        async_cache = recipes.AsyncTreeCache(self.raw, path, **kwargs)
        async_cache.listen(listener)
        with anyio.fail_after(WAIT_S):
            return Surface(await async_cache.start(), False)


async def eventually(predicate: Callable[[], object], what: str, timeout_s: float = WAIT_S) -> None:
    """Wait until ``predicate()`` holds (polled; the events come from another task or thread)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        await anyio.sleep(0.01)
