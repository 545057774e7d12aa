"""Tree images by fork(): the server's ``Freezer`` (see ``zabby.engine.effects``).

A forked child holds a copy-on-write image of the whole process, so the tree as it is at the
fork stays readable by the child however the parent changes it afterwards.  A SNAP's child
writes the tree's records as SnapChunk frames into a pipe that the peer link relays; a
snapshot's child writes the snapshot file; a download's child writes a snapshot file's bytes
into a pipe that the admin endpoint relays (``zabby-admin snapshot save``).  Children die with the server (PR_SET_PDEATHSIG),
so a killed server's child never holds its listening sockets against a restart.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import math
import os
import resource
import signal
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import msgpack

from zabby.core.messages import SnapChunk, encode
from zabby.tree.acl import acl_bytes
from zabby.server.transport import ForkedStream
from zabby.storage.snapshot import read_snapshot, write_snapshot, write_snapshot_stream
from zabby.tree.datatree import DataTree, records_digest
from zabby.wire.framing import encode_frame

SNAP_CHUNK_RECORDS = 2000
SNAP_CHUNK_BYTES = 4 * 2**20  # a chunk ends once its data passes this (one record may pass it by jute.maxbuffer)
# A snapshot file's child first runs at idle priority, then, if it is still running after
# SNAPSHOT_IDLE_S, at SNAPSHOT_NICENESS (about a tenth of a core beside busy servers).
SNAPSHOT_IDLE_S = 20.0
SNAPSHOT_NICENESS = 10
PR_SET_PDEATHSIG = 1  # prctl(2)
CAP_SYS_NICE = 23  # capability(7)
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


def write_snapshot_frames(pipe: BinaryIO, records: Iterable[tuple[Any, ...]]) -> None:
    """The quorum frames of a snapshot stream: SnapChunk messages of SNAP_CHUNK_RECORDS records,
    or fewer where their data passes SNAP_CHUNK_BYTES (a receiver refuses a frame over its
    limit: 2,000 znodes of 1 MB would have made one of 2 GB), the last one marked ``last``
    (empty when the records end with a full chunk)."""
    chunk: list[tuple[Any, ...]] = []
    chunk_bytes = 0
    for record in records:
        chunk.append(record)
        chunk_bytes += _record_bytes(record)
        if len(chunk) == SNAP_CHUNK_RECORDS or chunk_bytes >= SNAP_CHUNK_BYTES:
            pipe.write(encode_frame(encode(SnapChunk(records=tuple(chunk), last=False))))
            chunk, chunk_bytes = [], 0
    pipe.write(encode_frame(encode(SnapChunk(records=tuple(chunk), last=True))))


def _record_bytes(record: tuple[Any, ...]) -> int:
    """About what a snapshot record packs to: its path (or kind), its data and its ACL, and
    room for the rest.  ACLs are shared, so each one's size is computed once."""
    size = 128 + sum(len(field) for field in record[:2] if isinstance(field, (bytes, str)))
    return size + acl_bytes(record[2]) if len(record) > 2 and record[2].__class__ is tuple else size


def download_image(tree: DataTree) -> tuple[ForkedStream, int, int]:
    """A child writes a snapshot file of the tree as it is now into a pipe (the admin
    endpoint's ``snapshot`` command); returns it with the tree's zxid and digest.  Call it
    from the trio thread, between two engine steps (the tree is then whole)."""
    zxid, digest, records = tree.last_zxid, tree.digest, tree.records

    def stream_file(write_fd: int) -> None:
        try:
            write_snapshot_stream(write_fd, zxid, records())
        finally:
            os.close(write_fd)

    return _forked_pipe(stream_file, f"a snapshot at 0x{zxid:x} for download"), zxid, digest


def _forked_pipe(work: Callable[[int], None], what: str) -> ForkedStream:
    """A child running ``work(write_fd)`` on its copy-on-write image, read through a pipe."""
    read_fd, write_fd = os.pipe()
    with contextlib.suppress(OSError, AttributeError):  # a bigger pipe: fewer wake-ups (Linux)
        fcntl.fcntl(read_fd, fcntl.F_SETPIPE_SZ, 1 << 20)

    def in_child() -> None:
        os.close(read_fd)
        work(write_fd)

    pid = fork_child(in_child)
    os.close(write_fd)
    return ForkedStream(pid, read_fd, what)


class BackgroundPriority:
    """Call it in a snapshot file's child before each group of records it writes: the child
    runs at idle priority (SCHED_IDLE) for SNAPSHOT_IDLE_S, then at SNAPSHOT_NICENESS.

    The requests come first.  The child's CPU (about 1 s per million znodes, plus the faults
    of its copy-on-write image) would otherwise be taken from them.  Nice alone is not
    enough: a server waking from its fsync or its socket may wait behind a niced child on
    its core, which an idle-priority one yields at once.  Pipelined setData on a standalone
    server with 1M znodes and a snapshot every ~2 s: 6.4-7.1k ops/s niced (10 or 19),
    8.0-8.5k at idle priority, 8.8-9.3k with no snapshot.  Idle priority alone could starve
    the child on a machine that is never idle, and the log is kept until the snapshot is
    done: so after SNAPSHOT_IDLE_S it runs niced, as before.  Where it could not come back
    from idle priority (Linux lets only a process whose RLIMIT_NICE allows the nice value
    leave SCHED_IDLE, or one with CAP_SYS_NICE), it runs niced from the start.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._idle_until: float | None = None  # None: not started; inf: niced for good

    def __call__(self) -> None:
        if self._idle_until is None:
            if _can_leave_idle() and _set_idle_priority():
                self._idle_until = self._clock() + SNAPSHOT_IDLE_S
            else:
                os.nice(SNAPSHOT_NICENESS)
                self._idle_until = math.inf
        elif self._idle_until != math.inf and self._clock() >= self._idle_until:
            _set_niced_priority()
            self._idle_until = math.inf


def _can_leave_idle() -> bool:
    """Whether Linux lets this process go back from SCHED_IDLE once niced: its RLIMIT_NICE
    allows SNAPSHOT_NICENESS, or it holds CAP_SYS_NICE (root in a container often does not)."""
    try:
        limit = resource.getrlimit(resource.RLIMIT_NICE)[0]
        if limit == resource.RLIM_INFINITY or limit >= 20 - SNAPSHOT_NICENESS:
            return True
        with open("/proc/self/status") as status:
            effective = next((line.split()[1] for line in status if line.startswith("CapEff:")), "0")
        return bool(int(effective, 16) >> CAP_SYS_NICE & 1)
    except (AttributeError, OSError, ValueError):  # not Linux
        return False


def _set_idle_priority() -> bool:
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or not allowed
        return False
    return True


def _set_niced_priority() -> None:
    os.nice(SNAPSHOT_NICENESS)
    try:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except OSError:  # not allowed (RLIMIT_NICE): it goes on at idle priority
        pass


class DigestChild:
    """``records_digest`` of snapshot records, computed by a forked child on the other core
    while this process builds the tree from the same records (``TreeBuilder(digest=False)``):
    a SNAP's stream, passed on with ``feed`` as it arrives, or a snapshot file (``path``) at
    start-up.  The digest is a third of a build's time (about 1 s at 1M znodes).

    ``result`` is None when the child could not give it (it failed, or the stream could not
    reach it): the caller computes the digest itself.  Fork it from the thread that lives as
    long as the child's work (see ``fork_child``); ``result`` or ``abandon`` collects it."""

    def __init__(self, path: Path | None = None) -> None:
        result_read, result_write = os.pipe()
        feed_read, feed_write = os.pipe() if path is None else (-1, -1)
        if path is None:
            with contextlib.suppress(OSError, AttributeError):  # fewer wake-ups on both sides (Linux)
                fcntl.fcntl(feed_write, fcntl.F_SETPIPE_SZ, 1 << 20)

        def in_child() -> None:
            os.close(result_read)
            if path is None:
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


@dataclass(frozen=True, slots=True)
class DiskImage:
    """A child writing the snapshot of the tree at ``zxid`` into the snapshot folder."""

    pid: int
    zxid: int


class ForkFreezer:
    def __init__(self, snap_dir: Path) -> None:
        self.snap_dir = snap_dir

    def image_for_peer(self, tree: DataTree, sid: int) -> ForkedStream:
        """A child streams the tree's records as it is now into a pipe (the tree is never
        held twice; the pipe is the buffer)."""
        records = tree.records

        def stream_tree(write_fd: int) -> None:
            with os.fdopen(write_fd, "wb", buffering=1 << 20) as pipe:
                write_snapshot_frames(pipe, records())

        return _forked_pipe(stream_tree, f"a snapshot at 0x{tree.last_zxid:x} to server {sid}")

    def image_for_disk(self, tree: DataTree) -> DiskImage:
        snap_dir, zxid, records = self.snap_dir, tree.last_zxid, tree.records

        def write_in_background() -> None:
            write_snapshot(snap_dir, zxid, records(), between=BackgroundPriority())

        return DiskImage(fork_child(write_in_background), zxid)

    def discard(self, image: Any) -> None:
        if isinstance(image, ForkedStream):
            image.abandon()
