"""The leader's SNAP stream: the frames a forked child writes, relayed in queue order."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from itertools import chain, repeat
from pathlib import Path

import msgpack
import pytest

from tests import ROOT
from tests.storage.helpers import OPEN_ACL, TxnMaker, as_records, tree_of
from zabby.core.messages import SnapChunk, decode, encode
from zabby.opcodes import OpCode
from zabby.server.process.forks import (
    SNAP_CHUNK_BYTES,
    SNAP_CHUNK_RECORDS,
    SNAPSHOT_IDLE_S,
    SNAPSHOT_NICENESS,
    BackgroundPriority,
    DigestChild,
    ForkFreezer,
    _can_leave_idle,
    fork_child,
    write_snapshot_frames,
)  # fmt: skip
from zabby.server.peering.transport import MEMBER_FRAME_BYTES_MAX
from zabby.storage.datadir import DataDir
from zabby.storage.snapshot import SnapshotWriter, read_snapshot, write_snapshot
from zabby.testing import wait_until
from zabby.testing.processes import process_alive
from zabby.tree.datatree import DataTree
from zabby.tree.txns import Txn, make_zxid
from zabby.wire.framing import FrameDecoder


def test_snapshot_frames_carry_every_record_once_and_end_with_last() -> None:
    tree = DataTree()
    records = list(tree.records()) * (SNAP_CHUNK_RECORDS // 2 + 1)  # a few chunks' worth
    pipe = io.BytesIO()
    write_snapshot_frames(pipe, iter(records))
    chunks = [decode(frame) for frame in FrameDecoder(1 << 30).receive_data(pipe.getvalue())]
    assert all(isinstance(chunk, SnapChunk) for chunk in chunks)
    assert [chunk.last for chunk in chunks] == [False] * (len(chunks) - 1) + [True]
    assert [tuple(r) for chunk in chunks for r in chunk.records] == [tuple(r) for r in records]
    assert all(len(chunk.records) <= SNAP_CHUNK_RECORDS for chunk in chunks)


def test_a_chunk_of_large_znodes_ends_by_bytes_under_a_members_frame_limit() -> None:
    """2,000 znodes of 1 MB made one frame of 2 GB, which any receiver refuses (its limit is
    64 MiB): the SNAP could never finish."""
    records = [(f"/big{index}", b"x" * 1_000_000, ()) for index in range(40)]
    pipe = io.BytesIO()
    write_snapshot_frames(pipe, iter(records))
    limit = MEMBER_FRAME_BYTES_MAX
    frames = FrameDecoder(limit).receive_data(pipe.getvalue())
    assert len(frames) > 1 and all(len(frame) <= SNAP_CHUNK_BYTES + 1_000_000 + 1024 for frame in frames)
    assert [r[0] for frame in frames for r in decode(frame).records] == [r[0] for r in records]  # type: ignore[attr-defined]


def test_an_empty_tree_is_one_last_chunk() -> None:
    pipe = io.BytesIO()
    write_snapshot_frames(pipe, iter(()))
    [chunk] = [decode(frame) for frame in FrameDecoder().receive_data(pipe.getvalue())]
    assert chunk == SnapChunk(records=(), last=True) and bytes(chunk.encoded) == b""


@pytest.mark.parametrize("count", [0, 1, 15, 16, 2000, 65535, 65536])  # each size of msgpack's array header
def test_a_chunk_keeps_its_records_bytes_exactly_as_a_snapshot_file_holds_them(count: int) -> None:
    records = tuple(("/n" * (index % 3), b"d" * (index % 5), index) for index in range(count))
    for last in (False, True):
        frame = encode(SnapChunk(records=records, last=last, encoded=b"not sent"))
        assert frame == encode(SnapChunk(records=records, last=last))  # encoded never goes on the wire
        chunk = decode(frame)
        assert chunk.records == records and chunk.last is last
        assert bytes(chunk.encoded) == b"".join(msgpack.packb(record, use_bin_type=True) for record in records)


def test_a_chunk_laid_out_otherwise_still_decodes_and_is_packed_again() -> None:
    records = (("/a", b"x", 1),)
    wider = b"\x93\xcc\x65" + msgpack.packb(records, use_bin_type=True) + b"\xc3"  # the type as a uint 8
    chunk = decode(wider)
    assert chunk == SnapChunk(records=records, last=True) and chunk.encoded == b""


def test_a_learner_writes_the_stream_it_received_into_the_snapshot_the_leader_would_write(tmp_path: Path) -> None:
    """SnapshotWriter.add_encoded with each chunk's bytes from the wire makes the very file that
    write_snapshot makes of the tree, which then loads as that tree."""
    tree = DataTree()
    for index in range(3 * SNAP_CHUNK_RECORDS):
        tree.apply(Txn(make_zxid(1, index + 1), 0, index, 1000 + index, OpCode.CREATE, (f"/n{index}", b"v" * (index % 40), OPEN_ACL, 0, index + 1)))
    pipe = io.BytesIO()
    write_snapshot_frames(pipe, tree.records())
    staged = SnapshotWriter(tmp_path, tree.last_zxid, tmp_tag=".from1")
    for frame in FrameDecoder(1 << 30).receive_data(pipe.getvalue()):
        chunk = decode(frame)
        assert isinstance(chunk, SnapChunk) and chunk.encoded
        staged.add_encoded(chunk.encoded, len(chunk.records))
    received = staged.finish().read_bytes()
    (tmp_path / "leader").mkdir()
    assert received == write_snapshot(tmp_path / "leader", tree.last_zxid, tree.records()).read_bytes()
    _, loaded = read_snapshot(tmp_path / f"snapshot.{tree.last_zxid:016x}")
    assert DataTree.from_records(loaded).content_hash() == tree.content_hash()


def test_a_forked_child_dies_with_the_server(tmp_path: Path) -> None:
    """A snapshot child must not outlive a killed server (it holds the server's listening
    sockets, so a restart could not bind them)."""
    parent = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time\n"
            "from zabby.server.process.forks import fork_child\n"
            "print(fork_child(lambda: time.sleep(60)), flush=True)\n"
            "time.sleep(60)\n"
        )],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        child = int(parent.stdout.readline())  # type: ignore[union-attr]
        assert process_alive(child)
    finally:
        parent.kill()
        parent.wait(10)
    wait_until(lambda: not process_alive(child), 10.0, "the child to die with its parent")


class PriorityProbe:
    """A tree whose records say the scheduling policy and niceness each was produced at."""

    last_zxid = 7

    def __init__(self, count: int = 1) -> None:
        self.count = count

    def records(self) -> Iterator[tuple[str, int, int]]:
        for _ in range(self.count):
            yield ("priority", os.sched_getscheduler(0), os.nice(0))


def _records_written_by(pid: int, snap_dir: Path) -> list[tuple[str, int, int]]:
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    zxid, records = read_snapshot(snap_dir / "snapshot.0000000000000007")
    assert zxid == 7
    return [tuple(record) for record in records]  # type: ignore[misc]


def test_a_snapshot_file_is_written_by_a_child_at_idle_priority(tmp_path: Path) -> None:
    """The child's CPU (about 1 s per million znodes) must not be taken from the requests:
    at idle priority a server waking on its core runs at once."""
    image = ForkFreezer(tmp_path).image_for_disk(PriorityProbe())  # type: ignore[arg-type]
    niced = ("priority", os.SCHED_OTHER, min(os.nice(0) + SNAPSHOT_NICENESS, 19))
    idle = ("priority", os.SCHED_IDLE, os.nice(0))
    assert _records_written_by(image.pid, tmp_path) == [idle if _can_leave_idle() else niced]


def test_a_snapshot_child_still_running_after_its_idle_time_runs_niced(tmp_path: Path) -> None:
    """Idle priority alone could starve the child on a machine that is never idle, and the log
    is kept until the snapshot is done."""
    if not _can_leave_idle():
        pytest.skip("this process may not leave SCHED_IDLE (RLIMIT_NICE, CAP_SYS_NICE): the child runs niced from the start")
    clock = chain([0.0, 0.0], repeat(SNAPSHOT_IDLE_S + 1))  # the deadline, one group in time, then past it
    probe = PriorityProbe(2000)
    pid = fork_child(lambda: write_snapshot(tmp_path, 7, probe.records(), between=BackgroundPriority(clock.__next__)))
    records = _records_written_by(pid, tmp_path)
    idle, niced = ("priority", os.SCHED_IDLE, os.nice(0)), ("priority", os.SCHED_OTHER, min(os.nice(0) + SNAPSHOT_NICENESS, 19))
    at_idle = records.count(idle)
    assert 0 < at_idle < len(records) == 2000  # two groups at idle priority, then the rest niced
    assert records == [idle] * at_idle + [niced] * (2000 - at_idle)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root, and setpriv to drop CAP_SYS_NICE")
def test_a_child_that_could_not_leave_idle_priority_runs_niced_from_the_start() -> None:
    """Root in a container often lacks CAP_SYS_NICE, and with RLIMIT_NICE at 0 Linux then keeps
    a process at SCHED_IDLE for good: it must not go there."""
    probe = (
        "import os\n"
        "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0)); os.nice(10)\n"
        "try:\n    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0)); print('left idle')\n"
        "except PermissionError:\n    print('stuck at idle')\n"
    )  # fmt: skip
    drop = ["setpriv", "--bounding-set=-sys_nice", "--inh-caps=-sys_nice", sys.executable, "-c"]
    assert subprocess.run([*drop, probe], capture_output=True, text=True, cwd=ROOT, check=True).stdout == "stuck at idle\n"
    child = (
        "import os; from zabby.server.process.forks import _can_leave_idle, BackgroundPriority\n"
        "print(_can_leave_idle(), BackgroundPriority()(), os.sched_getscheduler(0) == os.SCHED_OTHER, os.nice(0))\n"
    )  # fmt: skip
    out = subprocess.run([*drop, child], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out == f"False None True {min(os.nice(0) + SNAPSHOT_NICENESS, 19)}\n"


def _tree_with_sessions(txn_count: int) -> DataTree:
    tree = tree_of(TxnMaker().some(txn_count))
    for session_id in (0x11, 0x22):
        tree.add_session(session_id, 10_000 * session_id, b"p" * 16)
    return tree


def test_a_digest_child_fed_a_snap_stream_in_any_pieces_gives_the_trees_digest() -> None:
    tree = _tree_with_sessions(3000)
    encoded = b"".join(msgpack.packb(record, use_bin_type=True) for record in tree.records())
    child = DigestChild()
    for start in range(0, len(encoded), 7777):  # pieces that cut records in two
        child.feed(memoryview(encoded)[start : start + 7777])
    assert child.result() == tree.digest == tree.compute_digest()
    child.abandon()  # after result: nothing left to do


def test_a_digest_child_reads_a_snapshot_file_itself(tmp_path: Path) -> None:
    tree = _tree_with_sessions(500)
    path = write_snapshot(tmp_path, tree.last_zxid, tree.records())
    assert DigestChild(path).result() == tree.digest


def test_a_digest_child_runs_any_computation_and_answers_none_when_it_fails() -> None:
    """``zookeeper import`` adds up ZooKeeper's digest of a snapshot's bytes this way."""
    numbers = list(range(100_000))
    assert DigestChild(compute=lambda: sum(numbers)).result() == sum(numbers)
    assert DigestChild(compute=lambda: 1 // 0).result() is None


def test_a_digest_child_answers_none_for_a_stream_cut_short_or_when_it_is_gone() -> None:
    tree = _tree_with_sessions(300)
    records = list(tree.records())
    short = DigestChild()
    short.feed(b"".join(msgpack.packb(record, use_bin_type=True) for record in records[:-1]))
    assert short.result() is None  # the header counts one znode more: no digest to trust
    gone = DigestChild()
    os.kill(gone._pid, signal.SIGKILL)  # type: ignore[arg-type]
    gone.feed(b"".join(msgpack.packb(record, use_bin_type=True) for record in records) * 50)  # EPIPE, not an error
    assert gone.result() is None
    abandoned = DigestChild()
    pid = abandoned._pid
    abandoned.abandon()
    abandoned.abandon()
    assert pid is not None and not process_alive(pid)


class _NoDigest:
    def result(self) -> None:
        return None

    def abandon(self) -> None:
        pass


def _no_fork(path: Path) -> _NoDigest:
    raise OSError(11, "Resource temporarily unavailable")


def test_a_restart_takes_the_digest_from_beside_the_load_or_computes_it(tmp_path: Path) -> None:
    """DataDir.recover: the digest child's digest, or, where it has none or could not start,
    the tree's own; in every case the digest a load computing it inline has."""
    maker = TxnMaker()
    datadir = DataDir(tmp_path)
    tree, log = datadir.recover()
    for count in (1500, 200):  # a snapshot after the first, the second to replay after it
        txns = maker.some(count)
        log.append(as_records(txns))
        log.sync()
        for txn in txns:
            tree.apply(txn)
        if count == 1500:
            datadir.take_snapshot(tree.records(), tree.last_zxid)
    log.close()
    for digest_beside in (None, DigestChild, lambda path: _NoDigest(), _no_fork):
        recovered, log = DataDir(tmp_path).recover(digest_beside=digest_beside)
        log.close()
        assert recovered.content_hash() == tree.content_hash()
        assert recovered.digest == recovered.compute_digest() == tree.digest
        assert recovered.digest_at(tree.last_zxid) == tree.digest


def test_a_forked_child_holds_none_of_the_servers_sockets() -> None:
    """A killed server's snapshot child, still tearing down its copy of a 40,000-znode tree,
    held the listening socket, and the restart failed: EADDRINUSE (the adversary, after a
    tree-fill).  The child lets go of every inherited socket before its work: while it runs,
    the port can be listened on again."""
    import socket
    import stat

    from zabby.server.process.children import fork_child

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    read_end, write_end = os.pipe()
    go_read, go_write = os.pipe()
    try:
        def report_and_wait() -> None:
            is_socket = stat.S_ISSOCK(os.fstat(listener.fileno()).st_mode)
            os.write(write_end, b"socket" if is_socket else b"let go")
            os.read(go_read, 1)  # until the parent has listened again

        pid = fork_child(report_and_wait)
        os.close(write_end)
        assert os.read(read_end, 16) == b"let go"
        listener.getsockname()  # the parent's own is untouched
        listener.close()
        again = socket.create_server(("127.0.0.1", port))  # EADDRINUSE if the child held it
        again.close()
        os.write(go_write, b"x")
        assert os.waitpid(pid, 0)[1] == 0
    finally:
        for fd in (read_end, go_read, go_write):
            os.close(fd)
        listener.close()


def test_a_signal_to_a_forked_child_ends_it_and_writes_into_none_of_its_files(tmp_path: Path) -> None:
    """A child forked under trio's loop kept trio's signal handlers and its wake-up
    descriptor's number: with its sockets closed, a file the child opened took that number,
    and a SIGTERM (``systemctl stop`` signals the whole group) wrote its byte into the file.
    Now the signal ends the child, as it ends any process, and the file holds what was written."""
    import trio

    from zabby.server.process.children import fork_child

    written = tmp_path / "written"

    def write_then_get_a_signal() -> None:
        with open(written, "wb", buffering=0) as out:
            out.write(b"A" * 8)
            os.kill(os.getpid(), signal.SIGTERM)
            out.write(b"B" * 8)

    async def fork_under_trio() -> int:
        with trio.open_signal_receiver(signal.SIGTERM):
            return fork_child(write_then_get_a_signal)

    pid = trio.run(fork_under_trio)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
    assert written.read_bytes() == b"A" * 8
