"""Where a recipe's code runs: each recipe is written once, as async code on ``zabby.Client``.

Theory of operation
-------------------
A recipe (Lock, Election, DataWatch, ChildrenWatch, Counter, Barrier) keeps its logic in one
async class that talks to the async ``Client``.  What differs between the front-ends is only
*where* three kinds of code run, and a ``Runtime`` decides it:

* the recipe's own async code (its requests, its waits);
* the recipe's watch and state callbacks, which must get back to that code;
* the user's functions (a DataWatch's function, a leader's function).

``AsyncRuntime`` (``zabby.Client`` under asyncio or trio): everything runs in the caller's
event loop.  A callback is a coroutine function, which the client's event task awaits in
event order; a user's function may be a plain function or a coroutine function.

``ThreadRuntime`` (``SyncClient``): the recipe's async code runs on the client's loop thread
(a blocking method waits on it with ``run``).  The client hands every callback to its callback
thread; a recipe's callback hops from there back onto the loop thread (``SyncClient._submit``,
which never blocks), so callbacks and the recipe's code share one thread and need no locks.
A user's function runs on the callback thread, as kazoo runs it, so it may call the client's
blocking methods; the recipe awaits its result without blocking the loop.

We chose this over a sans-I/O step machine per recipe because a recipe is mostly a sequence of
requests and waits: as async code it reads top to bottom, and the one piece of machinery
(this module) serves every recipe.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

if TYPE_CHECKING:
    from ..aio import Client
    from ..blocking import BlockingClient

T = TypeVar("T")
R = TypeVar("R")


class AsyncRuntime:
    """A recipe on ``zabby.Client``: its code, its callbacks and the user's functions all run in
    the caller's event loop."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def callback(self, handler: Callable[[T], Awaitable[None]]) -> Callable[[T], Awaitable[None]]:
        """The function to register as a watch or state listener: the client awaits it."""
        return handler

    async def call_user(self, func: Callable[..., Any], *args: Any) -> Any:
        """Call the user's function (plain or async) and return what it returned."""
        result = func(*args)
        if inspect.isawaitable(result):
            result = await result
        return result


class ThreadRuntime:
    """A recipe on ``SyncClient``: its code runs on the client's loop thread, the user's
    functions on the client's callback thread (see the module docstring)."""

    def __init__(self, sync_client: BlockingClient) -> None:
        self.sync_client = sync_client
        self.client: Client = sync_client._client

    def callback(self, handler: Callable[[T], Awaitable[None]]) -> Callable[[T], None]:
        """The function to register: called on the callback thread, it runs ``handler`` on the
        loop thread and returns at once (so a slow recipe never holds up other callbacks)."""

        def on_callback_thread(arg: T) -> None:
            self.sync_client._submit(handler, (arg,), None)

        return on_callback_thread

    async def call_user(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run the user's function on the callback thread; await its result on the loop."""
        done = anyio.Event()
        outcome: list[Any] = []

        async def finish(result: Any) -> None:
            outcome.append(result)
            done.set()

        def on_callback_thread(_: object) -> None:
            result: Any = None
            try:
                result = func(*args)
            finally:  # an exception is logged by the callback thread; the recipe goes on
                self.sync_client._submit(finish, (result,), None)

        self.sync_client._dispatch_callback(on_callback_thread, None)
        await done.wait()
        return outcome[0]

    def run(self, afn: Callable[..., Awaitable[R]], *args: Any, timeout: float | None = None) -> R:
        """Run ``await afn(*args)`` on the loop thread and wait for it from this (user) thread;
        ``timeout`` None waits as long as the recipe does (a lock acquire without a timeout)."""
        limit = math.inf if timeout is None else timeout
        future = self.sync_client._submit(afn, args, limit)
        result: R = future.get()
        return result


Runtime = AsyncRuntime | ThreadRuntime


async def on_loop(func: Callable[[], R]) -> R:
    """Run a plain function as a coroutine (for ``ThreadRuntime.run``)."""
    return func()
