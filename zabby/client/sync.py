"""``zabby.SyncClient``: the blocking client (``blocking.BlockingClient``: threads, timeouts,
fork safety) with kazoo's recipe factories: ``zk.Lock(path)``, ``zk.Election(path)``,
``zk.DataWatch(path, func)``, ``zk.ChildrenWatch``, ``zk.TreeCache``, ``zk.Counter``,
``zk.Barrier``, ``zk.DoubleBarrier``.  The recipes are written against ``BlockingClient``, below
them; this module sits above both."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from .blocking import BlockingClient
from .recipes.barrier import Barrier, DoubleBarrier
from .recipes.cache import TreeCache
from .recipes.counter import Counter
from .recipes.election import Election
from .recipes.lock import Lock
from .recipes.watchers import ChildrenWatch, DataWatch

_P = ParamSpec("_P")
_R = TypeVar("_R")


class _Recipe(Generic[_P, _R]):
    """``client.Name(...)`` is ``Name(client, ...)``, as kazoo binds its recipes."""

    def __init__(self, make: Callable[Concatenate[BlockingClient, _P], _R]) -> None:
        self._make = make

    def __get__(self, client: BlockingClient, owner: type[Any] | None = None) -> Callable[_P, _R]:
        return functools.partial(self._make, client)


class SyncClient(BlockingClient):
    """Blocking, thread-safe client; the same API as kazoo's KazooClient, recipes included
    (see ``blocking`` for threads, timeouts and fork safety)."""

    Lock = _Recipe(Lock)
    Election = _Recipe(Election)
    DataWatch = _Recipe(DataWatch)
    ChildrenWatch = _Recipe(ChildrenWatch)
    TreeCache = _Recipe(TreeCache)
    Counter = _Recipe(Counter)
    Barrier = _Recipe(Barrier)
    DoubleBarrier = _Recipe(DoubleBarrier)


__all__ = ["SyncClient"]
