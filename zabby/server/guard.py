"""Containment: nothing a client, a peer or a race does ends the server process.

trio's nurseries raise ``ExceptionGroup``s (strict exception groups), so an ``except
SomeError`` around a nursery never matches what its tasks raise.  Every task boundary that
faces the outside world (a client connection, a peer link, the admin endpoint, a periodic
job) runs inside ``contained``: a network error ends that one task quietly, anything else is
a bug of ours that is logged with its traceback, and in both cases the server goes on.

Only a failed disk stops a server (``zabby.server.disk.fail_stop``), and that is not an
exception that passes through here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    trio.BusyResourceError,
    trio.TooSlowError,
    OSError,
)


def only(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> bool:
    """True if ``exc`` is one of ``kinds`` or a group whose every leaf is."""
    if isinstance(exc, BaseExceptionGroup):
        return all(only(inner, kinds) for inner in exc.exceptions)
    return isinstance(exc, kinds)


async def contained(what: str, logger: logging.Logger, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
    """Run ``fn(*args)``; what it raises ends it alone.

    Error handling: a network error (the peer went away, reset, timed out) is logged at
    DEBUG; any other ``Exception`` at ERROR with its traceback, since it is a bug of ours.
    Cancellation and ``KeyboardInterrupt`` pass through (they are not ``Exception``s).
    """
    try:
        await fn(*args)
    except Exception as exc:
        if only(exc, NETWORK_ERRORS):
            logger.debug("%s ended: %r", what, exc)
        else:
            logger.error("%s failed; it is closed and the server goes on", what, exc_info=exc)
