"""The leader's SNAP stream: the frames a forked child writes, relayed in queue order."""

from __future__ import annotations

import io

from zabby.core.messages import SnapChunk, decode
from zabby.server.node import SNAP_CHUNK_RECORDS, write_snapshot_frames
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
