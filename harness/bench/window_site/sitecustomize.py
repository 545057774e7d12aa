"""Loaded by every server ``python -m harness.bench.window`` starts (first on its PYTHONPATH):
SIGUSR2 opens a measured window, SIGUSR1 closes it and writes what the process spent in it to
``$ZABBY_WINDOW_OUT/<pid>.json`` (its user and system CPU, minor faults, the collector's runs by
generation and their time, its calls of the read(2) and write(2) family and the times it slept)
and, with ``ZABBY_WINDOW_PROFILE=1``, cProfile's stats of the main thread to ``<pid>.prof``.
Nothing else of the server changes."""

from __future__ import annotations

import gc
import json
import os
import resource
import signal
import time
from typing import Any

_OUT = os.environ.get("ZABBY_WINDOW_OUT")
_state: dict[str, Any] = {}


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _state["collecting"] = time.perf_counter()
    elif "collecting" in _state and "runs" in _state:
        run = _state["runs"].setdefault(str(info["generation"]), [0, 0.0])
        run[0] += 1
        run[1] += time.perf_counter() - _state.pop("collecting")


def _io_calls() -> int:
    """The process's calls of the read(2) and write(2) family so far, every thread's (``syscr`` +
    ``syscw`` of /proc/self/io; 0 where the kernel does not keep them): os.read and os.write on a
    socket, the log's writes, a read that found nothing; not send(2) or recv(2), which trio's
    socket streams use (a client's writer task when a socket took part of a reply, TLS, peers)."""
    try:
        with open("/proc/self/io") as io:
            fields = dict(line.split(":", 1) for line in io)
    except OSError:
        return 0
    return int(fields.get("syscr", 0)) + int(fields.get("syscw", 0))


def _open(signum: int, frame: Any) -> None:
    _state.update(times=os.times(), usage=resource.getrusage(resource.RUSAGE_SELF), io_calls=_io_calls(), runs={})
    if os.environ.get("ZABBY_WINDOW_PROFILE") == "1":
        import cProfile

        _state["profile"] = cProfile.Profile()
        _state["profile"].enable()
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


def _close(signum: int, frame: Any) -> None:
    if "times" not in _state or _OUT is None:
        return
    times, usage, io_calls = os.times(), resource.getrusage(resource.RUSAGE_SELF), _io_calls()  # before the profile's own writes
    profile = _state.pop("profile", None)
    if profile is not None:
        profile.disable()
        profile.dump_stats(os.path.join(_OUT, f"{os.getpid()}.prof"))
    spent = {"user_s": times.user - _state["times"].user, "system_s": times.system - _state["times"].system,
             "minor_faults": usage.ru_minflt - _state["usage"].ru_minflt, "collections": _state.pop("runs"),
             "io_calls": io_calls - _state["io_calls"], "sleeps": usage.ru_nvcsw - _state["usage"].ru_nvcsw}  # fmt: skip
    with open(os.path.join(_OUT, f"{os.getpid()}.json"), "w") as out:
        json.dump(spent, out)


if _OUT:
    signal.signal(signal.SIGUSR2, _open)
    signal.signal(signal.SIGUSR1, _close)
