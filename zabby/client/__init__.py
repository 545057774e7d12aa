"""zabby's Python clients: ``Client`` (async: asyncio or trio) and ``SyncClient`` (blocking, thread-safe).

Both follow kazoo's API (method names, arguments, return values, exception classes), so a
kazoo user switches by changing the import and the constructor.  See ``aio.py`` for the
session/connection design and ``sync.py`` for threads, timeouts and fork safety.
"""

from .aio import Client, TransactionRequest
from .exceptions import KazooTimeoutError
from .retry import AsyncKazooRetry, KazooRetry
from .security import (
    ACL,
    CREATOR_ALL_ACL,
    OPEN_ACL_UNSAFE,
    READ_ACL_UNSAFE,
    Id,
    Permissions,
    make_acl,
    make_digest_acl,
    make_digest_acl_credential,
)
from .states import EventType, KazooState, KeeperState, WatchedEvent, ZnodeStat
from .blocking import AsyncResult
from .sync import SyncClient
from .watching import WatchStream

__all__ = [
    "ACL",
    "CREATOR_ALL_ACL",
    "OPEN_ACL_UNSAFE",
    "READ_ACL_UNSAFE",
    "AsyncKazooRetry",
    "AsyncResult",
    "Client",
    "EventType",
    "Id",
    "KazooRetry",
    "KazooState",
    "KazooTimeoutError",
    "KeeperState",
    "Permissions",
    "SyncClient",
    "TransactionRequest",
    "WatchStream",
    "WatchedEvent",
    "ZnodeStat",
    "make_acl",
    "make_digest_acl",
    "make_digest_acl_credential",
]
