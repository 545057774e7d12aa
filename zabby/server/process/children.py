"""Work done by a forked child beside this process, without trio: ``fork_child`` (the child
dies with its parent) and ``DigestChild`` (a digest computed on the other core).  The server's
tree images (``zabby.server.process.forks``) fork through them, and so does ``zabby-admin zookeeper
import``, which must not pay for trio's import to use them."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import stat
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack

from zabby.storage.snapshot import read_snapshot
from zabby.tree.datatree import records_digest

PR_SET_PDEATHSIG = 1  # prctl(2)
_DIGEST = struct.Struct(">Q")


def fork_child(work: Callable[[], object]) -> int:
    """Fork; the child runs ``work`` on its copy-on-write image of this process (the tree as
    of now, however the parent changes it) and exits without any of the parent's cleanup.
    Returns the child's pid; its exit status is 0 when ``work`` returned.  Call it from the
    trio thread: the child is killed when the thread that forked it ends (prctl(2))."""
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            _die_with_parent(parent)
            _close_inherited_sockets()
            work()
            code = 0
        finally:
            os._exit(code)
    return pid


def _die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this child if the server dies, so a killed server's child never
    outlives it holding the server's inherited listening sockets (a restart could not bind)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the child ends with its work
        return
    if os.getppid() != parent:  # the server died before the prctl took effect
        os._exit(1)


def _close_inherited_sockets() -> None:
    """The parent's sockets (its listeners above all) let go of in the child at once: the
    SIGKILL of a killed server reaches its child, but the child then takes milliseconds to
    tear down its copy of a large image, and until it has, a restarted server cannot bind its
    ports (EADDRINUSE: the adversary's restart after a tree-fill of 40,000 znodes failed so).

    Each socket's descriptor is pointed at /dev/null rather than closed: objects of the
    parent's still hold those numbers, and a file the child opens must not take one (trio's
    signal wake-up descriptor above all: a signal would write its byte into that file).  The
    signals' handlers are the parent's (trio's, for a loop the child does not run): SIGTERM and
    SIGINT end the child as they would any process, and no handler writes anywhere."""
    try:
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
    except ValueError:  # not the main thread: its handlers are not this thread's to change
        pass
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:  # not Linux
        return
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for name in names:
            fd = int(name)
            try:
                if fd != null and stat.S_ISSOCK(os.fstat(fd).st_mode):
                    os.dup2(null, fd)
            except OSError:  # the listing's own descriptor, closed by now
                pass
    finally:
        os.close(null)


class DigestChild:
    """``records_digest`` of snapshot records, computed by a forked child on the other core
    while this process builds the tree from the same records (``TreeBuilder(digest=False)``):
    a SNAP's stream, passed on with ``feed`` as it arrives, or a snapshot file (``path``) at
    start-up.  The digest is a third of a build's time (about 1 s at 1M znodes).  Or any
    digest: ``compute()`` run by the child (``zookeeper import``: ZooKeeper's, of the
    snapshot's bytes, while this process builds the nodes).

    ``result`` is None when the child could not give it (it failed, or the stream could not
    reach it): the caller computes the digest itself.  Fork it from the thread that lives as
    long as the child's work (see ``fork_child``); ``result`` or ``abandon`` collects it."""

    def __init__(self, path: Path | None = None, *, compute: Callable[[], int] | None = None) -> None:
        result_read, result_write = os.pipe()
        streamed = path is None and compute is None
        feed_read, feed_write = os.pipe() if streamed else (-1, -1)
        if streamed:
            with contextlib.suppress(OSError, AttributeError):  # fewer wake-ups on both sides (Linux)
                fcntl.fcntl(feed_write, fcntl.F_SETPIPE_SZ, 1 << 20)

        def in_child() -> None:
            os.close(result_read)
            if compute is not None:
                digest = compute()
            elif path is None:
                os.close(feed_write)
                digest = records_digest(_records_from_pipe(feed_read))
            else:
                _, records = read_snapshot(path)
                digest = records_digest(records)
            os.write(result_write, _DIGEST.pack(digest))

        try:
            self._pid: int | None = fork_child(in_child)
        finally:
            os.close(result_write)
            if feed_read >= 0:
                os.close(feed_read)
        self._result_fd = result_read
        self._feed_fd: int | None = feed_write if feed_write >= 0 else None

    def feed(self, encoded: bytes | memoryview) -> None:
        """The next records, packed as the stream carried them.  A child that is gone (it
        failed) gets no more: ``result`` then says None."""
        if self._feed_fd is None:
            return
        try:
            view = memoryview(encoded)
            while view:
                view = view[os.write(self._feed_fd, view) :]
        except OSError:
            self._close_feed()

    def result(self) -> int | None:
        """The digest, once the child has read every record (it blocks until then)."""
        self._close_feed()
        try:
            answer = b""
            while chunk := os.read(self._result_fd, _DIGEST.size):
                answer += chunk
            status = self._reap()
        finally:
            self.abandon()
        return _DIGEST.unpack(answer)[0] if status == 0 and len(answer) == _DIGEST.size else None

    def abandon(self) -> None:
        """Stop the child if it is still running, and close what is open (idempotent)."""
        self._close_feed()
        if self._pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
            self._reap()
        if self._result_fd >= 0:
            os.close(self._result_fd)
            self._result_fd = -1

    def _close_feed(self) -> None:
        if self._feed_fd is not None:
            os.close(self._feed_fd)
            self._feed_fd = None

    def _reap(self) -> int:
        pid, self._pid = self._pid, None
        return os.waitpid(pid, 0)[1] if pid is not None else -1


def _records_from_pipe(fd: int) -> Iterator[tuple[Any, ...]]:
    unpacker = msgpack.Unpacker(raw=False, use_list=False)
    while data := os.read(fd, 1 << 20):
        unpacker.feed(data)
        yield from unpacker
