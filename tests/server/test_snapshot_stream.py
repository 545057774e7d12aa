"""The leader's SNAP stream: the frames a forked child writes, relayed in queue order."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from tests import ROOT
from zabby.core.messages import SnapChunk, decode
from zabby.local import process_alive
from zabby.local.processes import wait_until
from zabby.server.forks import SNAP_CHUNK_RECORDS, write_snapshot_frames
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
