"""Where the shell's output goes: a terminal (``StreamWriter``) or memory (``BufferWriter``).

Watch events are written from the client's callback thread while the main thread may be
printing a command's output, so every write is one locked call (an event block never
interleaves with a command's lines).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol, TextIO


class Writer(Protocol):
    def out(self, text: str) -> None:
        """Write ``text`` (newlines included by the caller) to standard output."""

    def err(self, text: str) -> None:
        """Write ``text`` to standard error."""


class StreamWriter:
    """Writes to ``sys.stdout``/``sys.stderr`` as they are at each call.

    Looking the streams up per call matters: prompt_toolkit's ``patch_stdout`` swaps them
    while a prompt is shown, so watch events land above the prompt instead of inside it.
    """

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self._out = out
        self._err = err
        self._lock = threading.Lock()

    def out(self, text: str) -> None:
        self._write(self._out or sys.stdout, text)

    def err(self, text: str) -> None:
        self._write(self._err or sys.stderr, text)

    @contextmanager
    def streams_swapped(self, swap: AbstractContextManager[object]) -> Iterator[None]:
        """Run ``swap`` (a context that replaces sys.stdout) with no write in flight as it
        enters or exits, so every write lands in either the old stream or the new one."""
        with self._lock:
            swap.__enter__()
        try:
            yield
        finally:
            with self._lock:
                swap.__exit__(None, None, None)

    def _write(self, stream: TextIO, text: str) -> None:
        with self._lock:
            try:
                stream.write(text)
                stream.flush()
            except (OSError, ValueError):  # closed pipe / closed stream: nothing to tell
                pass


class BufferWriter:
    """Collects output in memory; ``wait_for`` polls (bounded) for text written by a watch."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._out: list[str] = []
        self._err: list[str] = []

    def out(self, text: str) -> None:
        with self._lock:
            self._out.append(text)

    def err(self, text: str) -> None:
        with self._lock:
            self._err.append(text)

    @property
    def stdout(self) -> str:
        with self._lock:
            return "".join(self._out)

    @property
    def stderr(self) -> str:
        with self._lock:
            return "".join(self._err)

    def take(self) -> tuple[str, str]:
        """(stdout, stderr) written so far, and forget them."""
        with self._lock:
            out, err = "".join(self._out), "".join(self._err)
            self._out.clear()
            self._err.clear()
        return out, err

    def wait_for(self, needle: str, timeout_s: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if needle in self.stdout:
                return True
            time.sleep(0.01)
        return needle in self.stdout
