"""Disk faults injected from a file, for the tests and the fault harness.

``ZABBY_DISK_FAULTS`` names a JSON file; while it exists and holds an object, the storage
primitives (``zabby.storage.files``) obey it, for example::

    {"fsync_delay_ms": 200}    every fsync first waits 200 ms (a slow disk)
    {"fsync": "EIO"}           every fsync fails with EIO
    {"write": "ENOSPC"}        every write to the log, an epoch or a snapshot fails
    {"allocate": "ENOSPC"}     reserving space for the log fails (the disk is full)

Any ``<operation>_delay_ms`` and any errno name work.  The file is reread at most every
``REREAD_S``, so a test turns a fault on by writing the file and off by deleting it.  With
the variable unset, ``inject`` costs one global lookup.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

ENVIRONMENT_VARIABLE = "ZABBY_DISK_FAULTS"
REREAD_S = 0.1


class DiskFaults:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._spec: dict[str, Any] = {}
        self._read_at = -REREAD_S
        self._lock = threading.Lock()  # the disk thread and forked snapshot writers both call in

    def _current(self) -> dict[str, Any]:
        now = time.monotonic()
        with self._lock:
            if now - self._read_at >= REREAD_S:
                self._read_at = now
                try:
                    spec = json.loads(self.path.read_text())
                    self._spec = spec if isinstance(spec, dict) else {}
                except (OSError, ValueError):
                    self._spec = {}
            return self._spec

    def active(self) -> bool:
        """Whether the file asks for any fault now."""
        return bool(self._current())

    def inject(self, operation: str) -> None:
        """Sleep and/or raise ``OSError`` as the file says for ``operation``."""
        spec = self._current()
        if not spec:
            return
        delay_ms = spec.get(f"{operation}_delay_ms")
        if isinstance(delay_ms, (int, float)) and delay_ms > 0:
            time.sleep(delay_ms / 1000)
        name = spec.get(operation)
        if isinstance(name, str) and hasattr(errno, name):
            code = getattr(errno, name)
            raise OSError(code, f"{os.strerror(code)} (injected by {self.path})")


def _from_environment() -> DiskFaults | None:
    path = os.environ.get(ENVIRONMENT_VARIABLE)
    return DiskFaults(Path(path)) if path else None


FAULTS = _from_environment()


def inject(operation: str) -> None:
    if FAULTS is not None:
        FAULTS.inject(operation)


def active() -> bool:
    """Whether any fault is being injected now (a caller that bypasses the primitives, such as
    the kernel's fdatasync, leaves the work to them meanwhile)."""
    return FAULTS is not None and FAULTS.active()
