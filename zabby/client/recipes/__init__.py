"""kazoo-style recipes, each written once on the async ``zabby.Client`` (see ``_runtime``).

``AsyncLock``, ``AsyncElection``, ``AsyncDataWatch``, ``AsyncChildrenWatch``, ``AsyncCounter``,
``AsyncBarrier`` and ``AsyncDoubleBarrier`` run on ``zabby.Client`` under asyncio or trio;
``Lock``, ``Election``, ``DataWatch``, ``ChildrenWatch``, ``Counter``, ``Barrier`` and
``DoubleBarrier`` are kazoo's blocking shapes of the same code for ``SyncClient``.
The tree cache keeps its logic once too, as a sans-I/O mirror (``_mirror``) that
``AsyncTreeCache`` (``zabby.Client``) and kazoo's ``TreeCache`` (``SyncClient``) drive;
``cache`` says why the blocking one drives it from the callback thread.
"""

from .barrier import AsyncBarrier, AsyncDoubleBarrier, Barrier, DoubleBarrier
from .cache import AsyncTreeCache, NodeData, TreeCache, TreeEvent
from .counter import AsyncCounter, Counter
from .election import AsyncElection, Election
from .lock import AsyncLock, Lock
from .watchers import AsyncChildrenWatch, AsyncDataWatch, ChildrenWatch, DataWatch

__all__ = [
    "AsyncBarrier",
    "AsyncChildrenWatch",
    "AsyncCounter",
    "AsyncDataWatch",
    "AsyncDoubleBarrier",
    "AsyncElection",
    "AsyncLock",
    "AsyncTreeCache",
    "Barrier",
    "ChildrenWatch",
    "Counter",
    "DataWatch",
    "DoubleBarrier",
    "Election",
    "Lock",
    "NodeData",
    "TreeCache",
    "TreeEvent",
]
