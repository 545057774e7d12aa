"""The disk's failure policy in the storage layer: reserved log space, a full disk that only
refuses (nothing half-written), and fsync failures that are never retried."""

from __future__ import annotations

import json
import os
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


def test_the_log_reserves_space_past_its_end_without_growing_the_file(tmp_path: Path) -> None:
    log = TxnLog(tmp_path / "log", reserve_bytes=RESERVE_BYTES)
    log.open()
    log.append(records(1, 10))
    log.sync()
    [segment] = log.segments()
    assert os.stat(segment).st_size == 8 + 10 * (16 + 100)
    assert allocated_bytes(segment) >= RESERVE_BYTES
    log.close()
    reopened = TxnLog(tmp_path / "log")
    reopened.open()
    assert [zxid for zxid, _ in reopened.read_from(0)] == list(range(1, 11))
    reopened.close()


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
