"""kazoo-style recipes for SyncClient: Lock, Election, DataWatch, ChildrenWatch, TreeCache."""

from .cache import NodeData, TreeCache, TreeEvent
from .election import Election
from .lock import Lock
from .watchers import ChildrenWatch, DataWatch

__all__ = ["ChildrenWatch", "DataWatch", "Election", "Lock", "NodeData", "TreeCache", "TreeEvent"]
