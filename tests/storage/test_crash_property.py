"""Property: after a crash that cuts the log anywhere, recovery yields exactly a prefix, with
or without the zeros of a reserve after the cut (kill -9 leaves the txn log's reserve)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.storage.helpers import TxnMaker, as_records, tree_of
from zabby.storage import DataDir, TxnLog
from zabby.tree.txns import Txn

FILE_HEADER_BYTES = 8
RECORD_HEADER_BYTES = 16


def record_ends(segments: list[Path]) -> tuple[list[int], int]:
    """Global end offsets of every record (segments laid end to end), and the total size."""
    ends, base = [], 0
    for path in segments:
        raw = path.read_bytes()
        offset = FILE_HEADER_BYTES
        while offset < len(raw):
            offset += RECORD_HEADER_BYTES + int.from_bytes(raw[offset : offset + 4], "big")
            ends.append(base + offset)
        base += len(raw)
    return ends, base


def crash_at(segments: list[Path], cut: int, reserve_bytes: int) -> int:
    """Keep the first ``cut`` bytes of the log: later segments vanish, one is cut short and
    followed by ``reserve_bytes`` of zeros.  Returns where that segment ended before."""
    base = 0
    for path in segments:
        size = path.stat().st_size
        if cut < base + size:
            path.write_bytes(path.read_bytes()[: max(0, cut - base)] + bytes(reserve_bytes))
            for later in segments[segments.index(path) + 1 :]:
                later.unlink()
            return base + size
        base += size
    return base


def write_history(
    root: Path, batch_sizes: list[int], segment_bytes_max: int, snapshot_after: int | None
) -> tuple[list[Txn], int, list[Path]]:
    maker, txns, snapshot_count = TxnMaker(), [], 0
    data_dir = DataDir(root)
    tree, log = data_dir.recover(segment_bytes_max=segment_bytes_max)
    for index, size in enumerate(batch_sizes):
        batch = maker.some(size, data_bytes=20 + 13 * index)
        log.append(as_records(batch))
        log.sync()
        for txn in batch:
            tree.apply(txn)
        txns += batch
        if index == snapshot_after:
            data_dir.take_snapshot(tree.records(), tree.last_zxid)
            snapshot_count = len(txns)
    segments = log.segments()
    data_dir.close()
    return txns, snapshot_count, segments


@settings(max_examples=60, deadline=None)
@given(
    batch_sizes=st.lists(st.integers(1, 12), min_size=1, max_size=10),
    segment_bytes_max=st.sampled_from([100, 400, 1500, 2**20]),
    snapshot_after=st.none() | st.integers(0, 9),
    cut_fraction=st.floats(0, 1),
    reserve_bytes=st.sampled_from([0, 0, 5, 16, 300, 4096]),
)
def test_recovery_after_a_cut_is_exactly_a_prefix(
    batch_sizes: list[int], segment_bytes_max: int, snapshot_after: int | None, cut_fraction: float, reserve_bytes: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        txns, snapshot_count, segments = write_history(root, batch_sizes, segment_bytes_max, snapshot_after)
        ends, total_bytes = record_ends(segments)
        assert len(ends) == len(txns)
        cut = round(cut_fraction * total_bytes)
        raw = b"".join(path.read_bytes() for path in segments)
        segment_end = crash_at(segments, cut, reserve_bytes)

        def survives(end: int) -> bool:  # whole, or cut only where the zeros put back what was there
            return end <= cut or (end <= min(cut + reserve_bytes, segment_end) and not any(raw[cut:end]))

        survivors = sum(1 for end in ends if survives(end))

        data_dir = DataDir(root)
        tree, log = data_dir.recover(segment_bytes_max=segment_bytes_max)
        assert list(log.read_from(0)) == as_records(txns[:survivors])
        assert log.last_zxid == (txns[survivors - 1].zxid if survivors else 0)
        assert tree.content_hash() == tree_of(txns[: max(survivors, snapshot_count)]).content_hash()
        data_dir.close()
        with TxnLog(data_dir.log_dir, segment_bytes_max=segment_bytes_max) as reopened:  # the cut is durable
            assert list(reopened.read_from(0)) == as_records(txns[:survivors])
