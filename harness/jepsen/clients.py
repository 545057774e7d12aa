"""The two clients a run uses, behind kazoo's method names: ``zabby.SyncClient`` (zabby's own
protocol) and ``kazoo.client.KazooClient`` (ZooKeeper's jute protocol; imported only when
used, since kazoo is a test extra).

Every call goes through ``call``: the ``*_async`` form of the method, waited on for at most
``timeout_s``, so no worker can hang on a server that stopped answering.  ``classify`` says
what an exception means for the history: certain failure, or unknown outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

CLIENT_KINDS = ("zabby", "kazoo")

# The server said no: the operation certainly did not take effect.
DEFINITE_ERRORS = frozenset({
    "BadVersionError", "NoNodeError", "NodeExistsError", "NotEmptyError", "BadArgumentsError",
    "NoChildrenForEphemeralsError", "NoAuthError", "InvalidACLError", "RolledBackError",
})  # fmt: skip
CONNECT_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


def open_client(kind: str, hosts: str, session_timeout_s: float, request_timeout_s: float, randomize_hosts: bool = True) -> Any:
    """A started client of ``kind`` ("zabby" or "kazoo"); raises if it cannot connect in time.
    Both reopen a session after theirs expired (kazoo always does; zabby is told to).
    ``randomize_hosts=False``: the first host is tried first (a client that prefers a server)."""
    client = _make_client(kind, hosts, session_timeout_s, request_timeout_s, randomize_hosts)
    try:
        client.start(timeout=CONNECT_TIMEOUT_S)
    except BaseException:
        close_quietly(client)
        raise
    return client


def kazoo_reconnect_retry(max_delay_s: float = 1.0) -> dict[str, Any]:
    """A kazoo ``connection_retry`` that tries for ever, at most ``max_delay_s`` apart (kazoo's
    default backoff doubles toward an hour).  kazoo copies it when the client is made: a bound
    set on the client afterwards changes nothing."""
    return {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": max_delay_s}


def _make_client(kind: str, hosts: str, session_timeout_s: float, request_timeout_s: float, randomize_hosts: bool) -> Any:
    if kind == "zabby":
        from zabby import SyncClient

        return SyncClient(hosts, timeout=session_timeout_s, request_timeout=request_timeout_s, reconnect_after_expiry=True, randomize_hosts=randomize_hosts)
    if kind == "kazoo":
        from kazoo.client import KazooClient

        # a short reconnect backoff: kazoo's default would make the harness measure kazoo's
        # patience rather than the servers' availability
        return KazooClient(hosts=hosts, timeout=session_timeout_s, connection_retry=kazoo_reconnect_retry(), randomize_hosts=randomize_hosts)
    raise ValueError(f"unknown client kind {kind!r} (expected one of {CLIENT_KINDS})")


def call(method: Callable[..., Any], *args: Any, timeout_s: float, **kwargs: Any) -> Any:
    """``client.x_async(*args).get(timeout)``: the result, or the exception, within the time."""
    return method(*args, **kwargs).get(timeout=timeout_s)


def classify(exc: BaseException) -> tuple[str, str]:
    """(``fail`` or ``unknown``, the exception's class name)."""
    name = type(exc).__name__
    return ("fail" if name in DEFINITE_ERRORS else "unknown"), name


def session_id(client: Any) -> int:
    client_id = client.client_id
    return int(client_id[0]) if client_id else 0


def close_quietly(client: Any) -> None:
    """Stop and close, whatever state the client is in (bounded by the client's own timeouts)."""
    for method in ("stop", "close"):
        try:
            getattr(client, method)()
        except Exception:  # noqa: BLE001 - closing is best effort; the session expires anyway
            pass
