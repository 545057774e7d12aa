"""Containment: nothing a client, a peer or a race does ends the server process.

trio's nurseries raise ``ExceptionGroup``s (strict exception groups), so an ``except
SomeError`` around a nursery never matches what its tasks raise.  Every task boundary that
faces the outside world (a client connection, a peer link, the admin endpoint, a periodic
job) runs inside ``contained``: a network error ends that one task quietly, anything else is
a bug of ours that is logged with its traceback, and in both cases the server goes on.

Only a failed disk stops a server (``zabby.server.process.disk.fail_stop``), and that is not an
exception that passes through here.
"""

from __future__ import annotations

import logging
import time
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


FAILURE_LOG_INTERVAL_S = 10.0
_failures: dict[tuple[str, str], list[float]] = {}  # (logger, what) → [the next traceback's time, failures held back]


async def contained(what: str, logger: logging.Logger, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
    """Run ``fn(*args)``; what it raises ends it alone.

    Error handling: a network error (the peer went away, reset, timed out) is logged at
    DEBUG; any other ``Exception`` at ERROR with its traceback, since it is a bug of ours,
    at most once per ``FAILURE_LOG_INTERVAL_S`` for each ``what`` (the failures between are
    counted into the next one): a client that can set off a bug on every connection fills
    no disk with tracebacks.  Cancellation and ``KeyboardInterrupt`` pass through (they are
    not ``Exception``s).
    """
    try:
        await fn(*args)
    except Exception as exc:
        if only(exc, NETWORK_ERRORS):
            logger.debug("%s ended: %r", what, exc)
            return
        key = (logger.name, what)
        state = _failures.get(key)
        if state is None:
            if len(_failures) > 1024:  # the kinds are few (``what`` names a kind, or a peer): never a table to grow
                _failures.clear()
            state = _failures[key] = [0.0, 0]
        now = time.monotonic()
        if now < state[0]:
            state[1] += 1
            return
        held, state[0], state[1] = state[1], now + FAILURE_LOG_INTERVAL_S, 0
        more = f" ({held:.0f} more failures like it in the last {FAILURE_LOG_INTERVAL_S:g} s, not shown)" if held else ""
        logger.error("%s failed; it is closed and the server goes on%s", what, more, exc_info=exc)
