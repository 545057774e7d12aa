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
import os
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from zabby.core.messages import SnapChunk, encode
from zabby.server.transport import ForkedStream
from zabby.storage.snapshot import write_snapshot, write_snapshot_stream
from zabby.tree.datatree import DataTree
from zabby.wire.framing import encode_frame

SNAP_CHUNK_RECORDS = 2000
SNAPSHOT_NICENESS = 10  # a snapshot file's child: about a tenth of a core beside busy servers
PR_SET_PDEATHSIG = 1  # prctl(2)


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
    """The quorum frames of a snapshot stream: SnapChunk messages of SNAP_CHUNK_RECORDS records."""
    chunk: list[Any] = []
    for record in records:
        chunk.append(record)
        if len(chunk) >= SNAP_CHUNK_RECORDS:
            pipe.write(encode_frame(encode(SnapChunk(records=tuple(chunk), last=False))))
            chunk = []
    pipe.write(encode_frame(encode(SnapChunk(records=tuple(chunk), last=True))))


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
            # the requests come first: the log keeps every txn until the snapshot is done, and
            # the child's CPU (about 1 s per million znodes) would otherwise be taken from them
            os.nice(SNAPSHOT_NICENESS)
            write_snapshot(snap_dir, zxid, records())

        return DiskImage(fork_child(write_in_background), zxid)

    def discard(self, image: Any) -> None:
        if isinstance(image, ForkedStream):
            image.abandon()
