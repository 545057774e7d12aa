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
import fcntl
import math
import os
import resource
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from zabby.core.messages import SnapChunk, encode
from zabby.server.process.children import DigestChild as DigestChild
from zabby.server.process.children import fork_child
from zabby.tree.acl import acl_bytes
from zabby.server.peering.transport import ForkedStream
from zabby.storage.snapshot import write_snapshot, write_snapshot_stream
from zabby.tree.datatree import DataTree
from zabby.wire.framing import encode_frame
from zabby.wire.zk_quorum import SNAP_SIGNATURE
from zabby.wire.zk_snapshot import snap_stream

SNAP_CHUNK_RECORDS = 2000
SNAP_CHUNK_BYTES = 4 * 2**20  # a chunk ends once its data passes this (one record may pass it by jute.maxbuffer)
# A snapshot file's child first runs at idle priority, then, if it is still running after
# SNAPSHOT_IDLE_S, at SNAPSHOT_NICENESS (about a tenth of a core beside busy servers).
SNAPSHOT_IDLE_S = 20.0
SNAPSHOT_NICENESS = 10
CAP_SYS_NICE = 23  # capability(7)


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


def _forked_pipe(work: Callable[[int], None], what: str, *, zookeeper: bool = False) -> ForkedStream:
    """A child running ``work(write_fd)`` on its copy-on-write image, read through a pipe."""
    read_fd, write_fd = os.pipe()
    with contextlib.suppress(OSError, AttributeError):  # a bigger pipe: fewer wake-ups (Linux)
        fcntl.fcntl(read_fd, fcntl.F_SETPIPE_SZ, 1 << 20)

    def in_child() -> None:
        os.close(read_fd)
        work(write_fd)

    pid = fork_child(in_child)
    os.close(write_fd)
    return ForkedStream(pid, read_fd, what, zookeeper)


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


@dataclass(frozen=True, slots=True)
class DiskImage:
    """A child writing the snapshot of the tree at ``zxid`` into the snapshot folder."""

    pid: int
    zxid: int


class ForkFreezer:
    def __init__(self, snap_dir: Path, *, zookeeper_peer: Callable[[int], bool] = lambda sid: False) -> None:
        """``zookeeper_peer(sid)``: whether a SNAP's child writes the tree for ``sid`` as
        ZooKeeper's leader does (the serialized tree and its signature,
        ``zabby.wire.zk_snapshot.snap_stream``): a peer that speaks ZooKeeper's protocol."""
        self.zookeeper_peer = zookeeper_peer
        self.snap_dir = snap_dir

    def image_for_peer(self, tree: DataTree, sid: int) -> ForkedStream:
        """A child streams the tree's records as it is now into a pipe (the tree is never
        held twice; the pipe is the buffer)."""
        records, zookeeper = tree.records, self.zookeeper_peer(sid)

        def stream_tree(write_fd: int) -> None:
            with os.fdopen(write_fd, "wb", buffering=1 << 20) as pipe:
                if zookeeper:
                    for chunk in snap_stream(records(), SNAP_SIGNATURE):
                        pipe.write(chunk)
                else:
                    write_snapshot_frames(pipe, records())

        return _forked_pipe(stream_tree, f"a snapshot at 0x{tree.last_zxid:x} to server {sid}", zookeeper=zookeeper)

    def image_for_disk(self, tree: DataTree) -> DiskImage:
        snap_dir, zxid, records = self.snap_dir, tree.last_zxid, tree.records

        def write_in_background() -> None:
            write_snapshot(snap_dir, zxid, records(), between=BackgroundPriority())

        return DiskImage(fork_child(write_in_background), zxid)

    def discard(self, image: Any) -> None:
        if isinstance(image, ForkedStream):
            image.abandon()
