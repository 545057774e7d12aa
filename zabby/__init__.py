"""zabby: a ZooKeeper-style coordination service in Python on trio.

The public client API is re-exported here, kazoo-style::

    from zabby import SyncClient          # instead of: from kazoo.client import KazooClient
    zk = SyncClient("127.0.0.1:2181")
    zk.start()

Names are resolved lazily (PEP 562) so that importing a server module does not import the
client stack.  Every exception class of ``zabby.errors`` is available as ``zabby.<Name>``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from zabby._version import __version__

if TYPE_CHECKING:  # what a type checker sees (py.typed); at run time the names load lazily, below
    from zabby import errors as errors
    from zabby.client.aio import Client as Client, TransactionRequest as TransactionRequest
    from zabby.client.exceptions import KazooTimeoutError as KazooTimeoutError
    from zabby.client.recipes import (
        AsyncBarrier as AsyncBarrier,
        AsyncChildrenWatch as AsyncChildrenWatch,
        AsyncCounter as AsyncCounter,
        AsyncDataWatch as AsyncDataWatch,
        AsyncDoubleBarrier as AsyncDoubleBarrier,
        AsyncElection as AsyncElection,
        AsyncLock as AsyncLock,
        AsyncTreeCache as AsyncTreeCache,
        Barrier as Barrier,
        ChildrenWatch as ChildrenWatch,
        Counter as Counter,
        DataWatch as DataWatch,
        DoubleBarrier as DoubleBarrier,
        Election as Election,
        Lock as Lock,
        NodeData as NodeData,
        TreeCache as TreeCache,
        TreeEvent as TreeEvent,
    )
    from zabby.client.retry import AsyncKazooRetry as AsyncKazooRetry, KazooRetry as KazooRetry
    from zabby.client.security import (
        ACL as ACL,
        CREATOR_ALL_ACL as CREATOR_ALL_ACL,
        Id as Id,
        OPEN_ACL_UNSAFE as OPEN_ACL_UNSAFE,
        Permissions as Permissions,
        READ_ACL_UNSAFE as READ_ACL_UNSAFE,
        make_acl as make_acl,
        make_digest_acl as make_digest_acl,
        make_digest_acl_credential as make_digest_acl_credential,
    )
    from zabby.client.states import EventType as EventType, KazooState as KazooState, KeeperState as KeeperState, WatchedEvent as WatchedEvent, ZnodeStat as ZnodeStat
    from zabby.client.blocking import AsyncResult as AsyncResult
    from zabby.client.sync import SyncClient as SyncClient
    from zabby.client.watching import WatchStream as WatchStream
    from zabby.opcodes import AddWatchMode as AddWatchMode, WatcherType as WatcherType
    from zabby.errors import *  # noqa: F403 - every exception class, as __getattr__ serves them

_CLIENT_NAMES = {
    "Client": "zabby.client.aio",
    "TransactionRequest": "zabby.client.aio",
    "SyncClient": "zabby.client.sync",
    "AsyncResult": "zabby.client.blocking",
    "WatchStream": "zabby.client.watching",
    "KazooTimeoutError": "zabby.client.exceptions",
    "KazooRetry": "zabby.client.retry",
    "AsyncKazooRetry": "zabby.client.retry",
    "ZnodeStat": "zabby.client.states",
    "WatchedEvent": "zabby.client.states",
    "KazooState": "zabby.client.states",
    "KeeperState": "zabby.client.states",
    "EventType": "zabby.client.states",
    "ACL": "zabby.client.security",
    "Id": "zabby.client.security",
    "Permissions": "zabby.client.security",
    "OPEN_ACL_UNSAFE": "zabby.client.security",
    "READ_ACL_UNSAFE": "zabby.client.security",
    "CREATOR_ALL_ACL": "zabby.client.security",
    "make_acl": "zabby.client.security",
    "make_digest_acl": "zabby.client.security",
    "make_digest_acl_credential": "zabby.client.security",
    "Lock": "zabby.client.recipes",
    "Election": "zabby.client.recipes",
    "DataWatch": "zabby.client.recipes",
    "ChildrenWatch": "zabby.client.recipes",
    "TreeCache": "zabby.client.recipes",
    "TreeEvent": "zabby.client.recipes",
    "NodeData": "zabby.client.recipes",
    "Counter": "zabby.client.recipes",
    "Barrier": "zabby.client.recipes",
    "DoubleBarrier": "zabby.client.recipes",
    "AsyncLock": "zabby.client.recipes",
    "AsyncElection": "zabby.client.recipes",
    "AsyncDataWatch": "zabby.client.recipes",
    "AsyncChildrenWatch": "zabby.client.recipes",
    "AsyncCounter": "zabby.client.recipes",
    "AsyncBarrier": "zabby.client.recipes",
    "AsyncDoubleBarrier": "zabby.client.recipes",
    "AsyncTreeCache": "zabby.client.recipes",
    "AddWatchMode": "zabby.opcodes",
    "WatcherType": "zabby.opcodes",
}

# kazoo's exception aliases that zabby.errors does not define (yet)
_ERROR_ALIASES = {
    "ConnectionLossException": "ConnectionLoss",
    "SystemErrorException": "SystemZookeeperError",
    "RuntimeInconsistencyException": "RuntimeInconsistency",
    "DataInconsistencyException": "DataInconsistency",
    "ApiErrorException": "APIError",
    "InvalidCallbackException": "InvalidCallbackError",
}

__all__ = ["__version__", "errors", *sorted(_CLIENT_NAMES), *sorted(_ERROR_ALIASES)]


def __getattr__(name: str) -> Any:
    module = _CLIENT_NAMES.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif name in _ERROR_ALIASES:
        errors = importlib.import_module("zabby.errors")
        value = getattr(errors, name, None) or getattr(errors, _ERROR_ALIASES[name])
    elif name == "errors":
        value = importlib.import_module("zabby.errors")
    else:
        errors = importlib.import_module("zabby.errors")
        if not (name[:1].isupper() and isinstance(getattr(errors, name, None), type)):
            raise AttributeError(f"module 'zabby' has no attribute {name!r}")
        value = getattr(errors, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    errors = importlib.import_module("zabby.errors")
    return sorted(set(__all__) | {n for n in vars(errors) if isinstance(getattr(errors, n), type)})
