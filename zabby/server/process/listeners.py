"""The accept loop of every listener of the server: the client ports, the admin port, the
peer ports.

``trio.serve_listeners`` backs off for 100 ms when ``accept`` fails for want of descriptors or
memory (EMFILE, ENFILE, ENOMEM, ENOBUFS), and logs each failure with its traceback: ten lines
a second per listener for as long as it lasts.  ``serve_listeners`` backs off the same way and says so
once per ``ACCEPT_WARNING_INTERVAL_S``.  With a ``Descriptors`` pool, a connection is served
only while a descriptor is free for it beyond the server's reserve
(``zabby.server.process.descriptors``); else it is closed at once and ``refused`` is told, so no flood
of connections can use up what the log, the snapshots and the peer links need.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from zabby.server.process.guard import contained
from zabby.server.process.ratelog import RateLimitedLog

if TYPE_CHECKING:
    from zabby.server.process.descriptors import Descriptors

LOGGER = logging.getLogger("zabby.server.listeners")
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_BACKOFF_S = 0.1
ACCEPT_WARNING_INTERVAL_S = 10.0

Handler = Callable[[Any], Awaitable[object]]


async def serve_listeners(handler: Handler, listeners: list[Any], *, descriptors: Descriptors | None = None,
                refused: Callable[[], None] | None = None) -> None:  # fmt: skip
    """Accept on every listener, each connection served by ``handler(stream)`` in a task of
    its own and closed after it; never returns.

    Args:
        descriptors: the pool each connection takes one descriptor from, or None (the peer
            links, whose descriptors are reserved).
        refused: called for each connection closed at once because none was free.
    """
    warning = RateLimitedLog(LOGGER, ACCEPT_WARNING_INTERVAL_S).warning
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(_accept_loop, listener, handler, nursery, descriptors, refused, warning)


async def serve_peer_ports(nursery: trio.Nursery, host: str, handlers: Sequence[tuple[str, int, Handler]], logger: logging.Logger,
                           wrap: Callable[[Any], Any] | None = None) -> None:  # fmt: skip
    """Listen on each peer port (``(kind, port, handler)``: the quorum and the election port)
    of ``host`` and serve it in ``nursery``, each link's handler contained (a link's failure is
    logged by ``logger``, never the server's end); ``wrap`` each listener (TLS) first."""
    for kind, port, handler in handlers:
        listeners: list[Any] = list(await trio.open_tcp_listeners(port, host=host))
        if wrap is not None:
            listeners = [wrap(listener) for listener in listeners]
        nursery.start_soon(serve_listeners, partial(contained, f"a link from a peer ({kind})", logger, handler), listeners)


async def _accept_loop(listener: Any, handler: Handler, nursery: trio.Nursery, descriptors: Descriptors | None,
                       refused: Callable[[], None] | None, warning: Callable[[str], None]) -> None:  # fmt: skip
    async with listener:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                    raise
                warning(f"accept failed: {errno.errorcode[exc.errno]} ({os.strerror(exc.errno)}); trying again in {ACCEPT_BACKOFF_S} s")
                await trio.sleep(ACCEPT_BACKOFF_S)
                continue
            if descriptors is not None and not descriptors.take():
                await trio.aclose_forcefully(stream)
                if refused is not None:
                    refused()
                continue
            nursery.start_soon(_run, handler, stream, descriptors)


async def _run(handler: Handler, stream: Any, descriptors: Descriptors | None) -> None:
    try:
        await handler(stream)
    finally:
        try:
            await trio.aclose_forcefully(stream)
        finally:
            if descriptors is not None:
                descriptors.give_back()
