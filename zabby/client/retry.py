"""``KazooRetry``: retry idempotent calls on connection trouble, with backoff and jitter.

Same constructor and semantics as kazoo's: ConnectionLoss, OperationTimeoutError (which
includes ``KazooTimeoutError``) and ForceRetryError are retried, SessionExpiredError too when
``ignore_expire`` (but never ConnectionClosedError: a closed client cannot recover);
``max_tries=-1`` retries forever within ``deadline`` seconds; giving up raises
RetryFailedError.  ``AsyncKazooRetry`` is the async version (``await retry(fn, ...)``, asyncio or
trio).
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

import anyio

from zabby.errors import (
    ConnectionClosedError,
    ConnectionLoss,
    ForceRetryError,
    OperationTimeoutError,
    RetryFailedError,
    SessionExpiredError,
)


_P = ParamSpec("_P")
_T = TypeVar("_T")


class InterruptedError(RetryFailedError):  # noqa: A001 - kazoo's name
    """The ``interrupt`` callable asked the retry loop to stop."""


class KazooRetry:
    RETRY_EXCEPTIONS: tuple[type[BaseException], ...] = (ConnectionLoss, OperationTimeoutError, ForceRetryError)
    EXPIRED_EXCEPTIONS: tuple[type[BaseException], ...] = (SessionExpiredError,)

    def __init__(
        self,
        max_tries: int = 1,
        delay: float = 0.1,
        backoff: float = 2,
        max_jitter: float = 0.4,
        max_delay: float = 60.0,
        ignore_expire: bool = True,
        sleep_func: Callable[[float], Any] = time.sleep,
        deadline: float | None = None,
        interrupt: Callable[[], bool] | None = None,
    ) -> None:
        self.max_tries = max_tries
        self.delay = delay
        self.backoff = backoff
        self.max_jitter = max(min(max_jitter, 1.0), 0.0)
        self.max_delay = float(max_delay)
        self._attempts = 0
        self._cur_delay = delay
        self.deadline = deadline
        self._cur_stoptime: float | None = None
        self.sleep_func = sleep_func
        self.interrupt = interrupt
        self.retry_exceptions = self.RETRY_EXCEPTIONS + (self.EXPIRED_EXCEPTIONS if ignore_expire else ())

    def reset(self) -> None:
        self._attempts = 0
        self._cur_delay = self.delay
        self._cur_stoptime = None

    def copy(self) -> KazooRetry:
        obj = KazooRetry(
            max_tries=self.max_tries,
            delay=self.delay,
            backoff=self.backoff,
            max_jitter=self.max_jitter,
            max_delay=self.max_delay,
            sleep_func=self.sleep_func,
            deadline=self.deadline,
            interrupt=self.interrupt,
        )
        obj.retry_exceptions = self.retry_exceptions
        return obj

    def _next_sleep_s(self, exc: BaseException) -> float:
        """Count one failed attempt; return how long to sleep or raise RetryFailedError."""
        self._attempts += 1
        if self._attempts == self.max_tries:
            raise RetryFailedError(f"Too many retry attempts: {exc!r}") from exc
        jitter = random.uniform(1.0 - self.max_jitter, 1.0 + self.max_jitter)
        sleep_s = self._cur_delay * jitter
        if self._cur_stoptime is not None and time.monotonic() + sleep_s >= self._cur_stoptime:
            raise RetryFailedError(f"Exceeded retry deadline: {exc!r}") from exc
        self._cur_delay = min(sleep_s * self.backoff, self.max_delay)
        return sleep_s

    def __call__(self, func: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        self.reset()
        if self.deadline is not None:
            self._cur_stoptime = time.monotonic() + self.deadline
        while True:
            try:
                return func(*args, **kwargs)
            except ConnectionClosedError:
                raise
            except self.retry_exceptions as exc:
                sleep_s = self._next_sleep_s(exc)
                self._sleep(sleep_s)

    def _sleep(self, sleep_s: float) -> None:
        if self.interrupt is None:
            self.sleep_func(sleep_s)
            return
        end = time.monotonic() + sleep_s
        while time.monotonic() < end:  # bounded by sleep_s
            if self.interrupt():
                raise InterruptedError("retry interrupted")
            self.sleep_func(min(0.1, max(end - time.monotonic(), 0.0)))


class AsyncKazooRetry(KazooRetry):
    """The async version: ``await retry(async_fn, *args)``; sleeps with ``anyio.sleep``."""

    @classmethod
    def from_retry(cls, base: KazooRetry) -> AsyncKazooRetry:
        obj = cls(max_tries=base.max_tries, delay=base.delay, backoff=base.backoff, max_jitter=base.max_jitter, max_delay=base.max_delay, deadline=base.deadline, interrupt=base.interrupt)
        obj.retry_exceptions = base.retry_exceptions
        return obj

    async def __call__(self, func: Callable[_P, Awaitable[_T]], *args: _P.args, **kwargs: _P.kwargs) -> _T:  # type: ignore[override]  # awaits func
        self.reset()
        if self.deadline is not None:
            self._cur_stoptime = time.monotonic() + self.deadline
        while True:
            try:
                return await func(*args, **kwargs)
            except ConnectionClosedError:
                raise
            except self.retry_exceptions as exc:
                sleep_s = self._next_sleep_s(exc)
                if self.interrupt is not None and self.interrupt():
                    raise InterruptedError("retry interrupted") from exc
                await anyio.sleep(sleep_s)
