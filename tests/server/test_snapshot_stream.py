"""The leader's SNAP stream: the frames a forked child writes, relayed in queue order."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests import ROOT
from zabby.core.messages import SnapChunk, decode
from zabby.local import process_alive
from zabby.local.processes import wait_until
from zabby.server.forks import SNAP_CHUNK_RECORDS, SNAPSHOT_NICENESS, ForkFreezer, write_snapshot_frames
from zabby.storage.snapshot import read_snapshot
from zabby.tree.datatree import DataTree
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


def test_an_empty_tree_is_one_last_chunk() -> None:
    pipe = io.BytesIO()
    write_snapshot_frames(pipe, iter(()))
    [chunk] = [decode(frame) for frame in FrameDecoder().receive_data(pipe.getvalue())]
    assert chunk == SnapChunk(records=(), last=True)


def test_a_forked_child_dies_with_the_server(tmp_path: Path) -> None:
    """A snapshot child must not outlive a killed server (it holds the server's listening
    sockets, so a restart could not bind them)."""
    parent = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time\n"
            "from zabby.server.forks import fork_child\n"
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


def test_a_snapshot_file_is_written_by_a_child_below_the_servers_priority(tmp_path: Path) -> None:
    """The child's CPU (about 1 s per million znodes) must not be taken from the requests."""

    class NicenessProbe:  # a tree whose records say the niceness they were produced at
        last_zxid = 7

        def records(self) -> Iterator[tuple[str, int]]:
            yield ("niceness", os.nice(0))

    image = ForkFreezer(tmp_path).image_for_disk(NicenessProbe())  # type: ignore[arg-type]
    _, status = os.waitpid(image.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    zxid, records = read_snapshot(tmp_path / "snapshot.0000000000000007")
    assert zxid == 7 and list(records) == [("niceness", min(os.nice(0) + SNAPSHOT_NICENESS, 19))]
