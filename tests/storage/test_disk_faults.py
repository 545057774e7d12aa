"""The disk's failure policy in the storage layer: reserved log space, a full disk that only
refuses (nothing half-written), and fsync failures that are never retried."""

from __future__ import annotations

import json
import logging
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tmpfs import fill, small_tmpfs
from zabby.storage import faults
from zabby.storage.epochs import read_epoch, write_epoch
from zabby.storage.files import DiskFailure, DiskFull
from zabby.storage.txnlog import TxnLog

RESERVE_BYTES = 1 << 20


def records(first: int, count: int, size: int = 100) -> list[tuple[int, bytes]]:
    return [(zxid, bytes([zxid % 256]) * size) for zxid in range(first, first + count)]


@pytest.fixture
def fault_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "faults.json"
    monkeypatch.setattr(faults, "FAULTS", faults.DiskFaults(path))
    monkeypatch.setattr(faults, "REREAD_S", 0.0)
    return path


def allocated_bytes(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def synced_log(tmp_path: Path, count: int) -> tuple[TxnLog, Path]:
    """A log with a reserve, ``count`` records appended and synced, and its one segment."""
    log = TxnLog(tmp_path / "log", reserve_bytes=RESERVE_BYTES)
    log.open()
    log.append(records(1, count))
    log.sync()
    [segment] = log.segments()
    return log, segment


def test_the_log_reserves_space_past_its_end_inside_the_file_and_gives_it_back_at_close(tmp_path: Path) -> None:
    log, segment = synced_log(tmp_path, 10)
    records_end = 8 + 10 * (16 + 100)
    assert os.stat(segment).st_size >= records_end + RESERVE_BYTES // 2  # an append changes no size
    assert allocated_bytes(segment) >= RESERVE_BYTES
    assert segment.read_bytes()[records_end:] == bytes(os.stat(segment).st_size - records_end)
    log.close()
    assert os.stat(segment).st_size == records_end
    reopened = TxnLog(tmp_path / "log")
    reopened.open()
    assert [zxid for zxid, _ in reopened.read_from(0)] == list(range(1, 11))
    reopened.close()


def test_a_crash_with_the_reserve_in_place_recovers_every_record_and_appends_after_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _log, segment = synced_log(tmp_path, 10)
    crashed_size = os.stat(segment).st_size  # no close: the reserve stays, as after kill -9
    with caplog.at_level(logging.WARNING, logger="zabby.storage"):
        reopened = TxnLog(tmp_path / "log", reserve_bytes=RESERVE_BYTES)
        reopened.open()
    assert caplog.text == ""  # the zeros of a reserve are the log's end, not a torn tail
    assert [zxid for zxid, _ in reopened.read_from(0)] == list(range(1, 11))
    reopened.append(records(11, 2))
    reopened.sync()
    assert os.stat(segment).st_size >= crashed_size
    reopened.close()
    assert os.stat(segment).st_size == 8 + 12 * (16 + 100)
    with TxnLog(tmp_path / "log") as again:
        assert [zxid for zxid, _ in again.read_from(0)] == list(range(1, 13))


def test_a_record_after_a_zero_header_is_never_read_back(tmp_path: Path) -> None:
    """A torn write can leave a record's header unwritten and a later one whole: what follows
    the first zero header was never fsynced (nor acknowledged), so it must not come back."""
    _log, segment = synced_log(tmp_path, 3)
    end = 8 + 3 * (16 + 100)
    stale = b"".join(_record_bytes(zxid, payload) for zxid, payload in records(4, 2))
    with segment.open("r+b") as f:  # record 4's header lost, record 5 intact after it
        f.seek(end)
        f.write(bytes(16) + stale[16:])
    reopened = TxnLog(tmp_path / "log", reserve_bytes=RESERVE_BYTES)
    reopened.open()
    assert [zxid for zxid, _ in reopened.read_from(0)] == [1, 2, 3]
    reopened.append([(7, b"x" * 100)])  # as long as record 4: record 5 would follow it
    reopened.close()
    with TxnLog(tmp_path / "log") as again:
        assert [zxid for zxid, _ in again.read_from(0)] == [1, 2, 3, 7]


def _record_bytes(zxid: int, payload: bytes) -> bytes:
    zxid_bytes = zxid.to_bytes(8, "big")
    crc = zlib.crc32(payload, zlib.crc32(zxid_bytes))
    return len(payload).to_bytes(4, "big") + crc.to_bytes(4, "big") + zxid_bytes + payload


def test_a_failed_reservation_sets_space_low_and_clears_once_space_is_back(tmp_path: Path, fault_file: Path) -> None:
    log = TxnLog(tmp_path / "log", reserve_bytes=RESERVE_BYTES)
    log.open()
    log.append(records(1, 1))
    log.sync()
    assert not log.space_low
    fault_file.write_text(json.dumps({"allocate": "ENOSPC"}))
    assert not log.retry_reserve()
    assert log.space_low
    log.append(records(2, 5))  # what was reserved still takes writes
    log.sync()
    fault_file.unlink()
    assert log.retry_reserve()
    assert not log.space_low
    log.close()


def test_a_write_without_space_leaves_nothing_behind(tmp_path: Path, fault_file: Path) -> None:
    log = TxnLog(tmp_path / "log")
    log.open()
    log.append(records(1, 3))
    fault_file.write_text(json.dumps({"write": "ENOSPC"}))
    with pytest.raises(DiskFull):
        log.append(records(4, 3))
    fault_file.unlink()
    assert log.last_zxid == 3
    log.append(records(4, 1))
    log.close()
    reopened = TxnLog(tmp_path / "log")
    reopened.open()
    assert [zxid for zxid, _ in reopened.read_from(0)] == [1, 2, 3, 4]
    reopened.close()


def test_a_failed_fsync_is_a_disk_failure(tmp_path: Path, fault_file: Path) -> None:
    log = TxnLog(tmp_path / "log")
    log.open()
    log.append(records(1, 3))
    fault_file.write_text(json.dumps({"fsync": "EIO"}))
    with pytest.raises(DiskFailure, match="fsync"):
        log.sync()
    fault_file.write_text(json.dumps({"fsync": "ENOSPC"}))  # even "no space" from fsync: fail-stop
    with pytest.raises(DiskFailure):
        write_epoch(tmp_path / "epoch", 3)


def test_an_epoch_write_without_space_keeps_the_old_value(tmp_path: Path, fault_file: Path) -> None:
    write_epoch(tmp_path / "epoch", 2)
    fault_file.write_text(json.dumps({"write": "ENOSPC"}))
    with pytest.raises(DiskFull):
        write_epoch(tmp_path / "epoch", 3)
    assert read_epoch(tmp_path / "epoch") == 2


def test_a_slow_fsync_waits(tmp_path: Path, fault_file: Path) -> None:
    import time

    log = TxnLog(tmp_path / "log")
    log.open()
    log.append(records(1, 1))
    fault_file.write_text(json.dumps({"fsync_delay_ms": 150}))
    started = time.monotonic()
    log.sync()
    assert time.monotonic() - started >= 0.15
    log.close()


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "tmpfs", "4m") as mount_point:
        yield mount_point


def test_a_real_full_disk_is_noticed_before_a_write_fails(tmpfs: Path) -> None:
    log = TxnLog(tmpfs / "log", reserve_bytes=RESERVE_BYTES)
    log.open()
    log.append(records(1, 10))
    log.sync()
    filler = tmpfs / "filler"
    fill(filler)
    zxid = 11
    while not log.space_low and zxid < 100_000:  # writes eat the reserve until a top-up fails
        log.append(records(zxid, 10, size=1000))
        log.sync()
        zxid += 10
    assert log.space_low
    log.append(records(zxid, 10, size=1000))  # the other half of the reserve still takes writes
    log.sync()
    filler.unlink()
    assert log.retry_reserve()
    log.close()
    reopened = TxnLog(tmpfs / "log")
    reopened.open()
    assert [z for z, _ in reopened.read_from(0)] == list(range(1, zxid + 10))
    reopened.close()
