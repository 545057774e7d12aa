"""How the server core sees a client: who asks (for ACL checks) and where its events go.

The core (today ``zabby.server.node``, tomorrow the engine) holds clients only through these
two protocols: it registers them as watchers, checks their identity against ACLs, sends
them watch events and closes them.  It never sees a socket, a codec or a session's slots.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

from zabby.tree.acl import AuthId


class Asker(Protocol):
    """The identity a read or a write is checked against."""

    @property
    def session_id(self) -> int: ...

    @property
    def auth_ids(self) -> list[AuthId]: ...

    @property
    def superuser(self) -> bool: ...


class ClientSink(Asker, Hashable, Protocol):
    """One connected client, as a watcher (hashable: a key of the watch registry)."""

    def send_event(self, event_type: int, path: str, zxid: int) -> None:
        """Queue a watch event now, as the txn at ``zxid`` is applied.  Ordering: the client
        hears it before any reply that shows the change (ZooKeeper's watch guarantee)."""
        ...

    def close_after_flush(self) -> None:
        """Close the connection once what is queued for it has been sent."""
        ...
