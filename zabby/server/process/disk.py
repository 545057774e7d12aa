"""One long-lived thread for the server's blocking disk calls (fsync above all).

``trio.to_thread.run_sync`` costs a thread hand-off per call that is several times the
fdatasync it wraps on fast disks; a dedicated worker fed by a queue, answering through the
trio token, makes the hop cheap.  Calls run one at a time in submission order, which is also
what the txn log needs (it is not thread-safe).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, NoReturn

import outcome
import trio

LOGGER = logging.getLogger("zabby.server")
EXIT_DISK_FAILURE = 74  # EX_IOERR (sysexits.h): the only way a zabby server stops by itself


def fail_stop(reason: str) -> NoReturn:
    """The disk failed: stop at once, with one log line and exit code 74.  No retry, no
    cleanup that could write: what was acknowledged is on the other servers' disks, and a
    supervisor (or an operator) restarts this one once its disk is sound."""
    LOGGER.critical("disk failure, stopping this server (exit %d): %s", EXIT_DISK_FAILURE, reason)
    logging.shutdown()
    os._exit(EXIT_DISK_FAILURE)


class DiskWorker:
    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Callable[[outcome.Outcome[Any]], None]] | None] = queue.SimpleQueue()
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread: threading.Thread | None = None

    def _start(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.Thread(target=self._work, name="zabby-disk", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, deliver = job
            result = outcome.capture(fn)
            assert self._token is not None
            try:
                self._token.run_sync_soon(deliver, result)
            except trio.RunFinishedError:
                return

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` on the disk thread; return its result or raise its exception."""
        if self._thread is None:
            self._start()
        done = trio.Event()
        box: list[outcome.Outcome[Any]] = []

        def deliver(result: outcome.Outcome[Any]) -> None:
            box.append(result)
            done.set()

        self._jobs.put((lambda: fn(*args), deliver))
        with trio.CancelScope(shield=True):  # the call runs anyway: wait for it, keep order
            await done.wait()
        return box[0].unwrap()

    def stop(self) -> None:
        self._jobs.put(None)
