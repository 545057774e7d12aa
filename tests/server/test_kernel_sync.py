"""The log's fdatasync by the kernel (Linux AIO, ``KernelSync``): what it does with a file, a
file it cannot sync and a failure, and when the server's ``_persist`` takes it instead of
the disk thread."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.server.test_driver import create_txn, logging_persist, make_server
from zabby.server.process.kernel_sync import KernelSync, SubmitRefused
from zabby.server.node import ZabbyServer
from zabby.storage import faults
from zabby.storage.files import DiskFailure
from zabby.storage.txnlog import TxnLog
from zabby.tree.txns import make_zxid


@pytest.fixture
def kernel_sync() -> Iterator[KernelSync]:
    sync = KernelSync.open()
    assert sync is not None, "Linux AIO is there on the machines zabby runs on (x86-64, arm64)"
    yield sync
    sync.close()


def test_a_file_is_synced_and_the_context_serves_the_next_sync(tmp_path: Path, kernel_sync: KernelSync) -> None:
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT)
    try:

        async def twice() -> None:
            for _ in range(2):
                os.write(fd, b"x" * 150)
                await kernel_sync.fdatasync(fd, "a segment")

        trio.run(twice)
    finally:
        os.close(fd)
    assert (tmp_path / "segment").read_bytes() == b"x" * 300


def test_a_file_the_kernel_cannot_sync_is_refused_and_nothing_waits(kernel_sync: KernelSync) -> None:
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(SubmitRefused):
            trio.run(kernel_sync.fdatasync, read_end, "a pipe")
    finally:
        os.close(read_end)
        os.close(write_end)


def test_an_fd_that_is_not_open_is_a_disk_failure(kernel_sync: KernelSync) -> None:
    fd = max(int(name) for name in os.listdir("/proc/self/fd")) + 1000  # trio.run opens a few
    with pytest.raises(DiskFailure, match="Bad file descriptor"):
        trio.run(kernel_sync.fdatasync, fd, "a closed segment")


def test_a_failed_sync_is_a_disk_failure_with_its_errno(tmp_path: Path, kernel_sync: KernelSync, monkeypatch: pytest.MonkeyPatch) -> None:
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT)
    real_reap = kernel_sync._reap
    monkeypatch.setattr(kernel_sync, "_reap", lambda: real_reap() or -errno.EIO)  # the kernel's own end, then EIO
    try:
        with pytest.raises(DiskFailure, match="Input/output error"):
            trio.run(kernel_sync.fdatasync, fd, "a segment")
    finally:
        os.close(fd)


# ----------------------------------------------------------------- the log's part
def test_the_log_hands_out_its_segment_only_when_an_fdatasync_is_all_its_sync_needs(tmp_path: Path) -> None:
    log = TxnLog(tmp_path, reserve_bytes=1 << 20)
    log.open()
    assert log.segment_to_sync() is None  # nothing written
    log.append([(1, b"first")])
    assert log.segment_to_sync() is None  # a new segment: its directory entry too
    log.sync()
    assert log.segment_to_sync() is None  # all synced
    log.append([(2, b"second")])
    point = log.segment_to_sync()
    assert point is not None
    fd, writes = point
    log.append([(3, b"third")])  # written while the kernel syncs: that sync does not cover it
    os.fdatasync(fd)
    log.segment_synced(writes)
    assert log.segment_to_sync() == (fd, writes + 1)
    log.segment_synced(writes + 1)
    assert log.segment_to_sync() is None
    log.append([(4, b"x" * (600 << 10))])  # past half the reservation: sync tops it up itself
    assert log.segment_to_sync() is None
    log.sync()
    log.append([(5, b"fifth")])
    assert log.segment_to_sync() is not None
    log.close()


# ----------------------------------------------------------------- the server's choice
def _recording(server: ZabbyServer, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """How each of the server's log syncs was done: "kernel" or "disk thread"."""
    calls: list[str] = []
    real_run = server.io.disk.run
    assert server.io.kernel_sync is not None
    real_fdatasync = server.io.kernel_sync.fdatasync

    async def disk_run(fn: Any, *args: Any) -> Any:
        calls.append("disk thread")
        return await real_run(fn, *args)

    async def kernel_fdatasync(fd: int, what: str) -> None:
        calls.append("kernel")
        await real_fdatasync(fd, what)

    monkeypatch.setattr(server.io.disk, "run", disk_run)
    monkeypatch.setattr(server.io.kernel_sync, "fdatasync", kernel_fdatasync)
    return calls


def _persist_pipelined(server: ZabbyServer, counters: range) -> None:
    server.engine.outstanding = 5  # writes in flight: the fsync leaves the loop

    async def persist_each() -> None:
        for counter in counters:
            await server.executor._persist(logging_persist([create_txn(counter)]))

    trio.run(persist_each)


def test_under_pipelined_writes_the_kernel_syncs_the_segment_once_its_entry_is_durable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = make_server(tmp_path)
    calls = _recording(server, monkeypatch)
    _persist_pipelined(server, range(1, 4))
    assert calls == ["disk thread", "kernel", "kernel"]  # the first made the segment
    server.close()
    reopened = TxnLog(server.datadir.log_dir)
    reopened.open()
    assert [zxid for zxid, _ in reopened.read_from(0)] == [make_zxid(1, c) for c in range(1, 4)]
    reopened.close()


def test_a_refusing_kernel_leaves_the_syncs_to_the_disk_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = make_server(tmp_path)
    calls = _recording(server, monkeypatch)

    async def refuse(fd: int, what: str) -> None:
        calls.append("refused")
        raise SubmitRefused("Invalid argument")

    monkeypatch.setattr(server.io.kernel_sync, "fdatasync", refuse)
    _persist_pipelined(server, range(1, 4))
    assert calls == ["disk thread", "refused", "disk thread", "disk thread"]
    assert server.io.kernel_sync is None
    assert server.log.segment_to_sync() is None  # every append synced


def test_syncs_stay_on_the_disk_thread_while_a_disk_fault_is_injected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fault harness acts in the storage primitives the disk thread calls; with its file
    set but asking for nothing (a Jepsen run between faults), the kernel syncs."""
    server = make_server(tmp_path)
    calls = _recording(server, monkeypatch)
    spec = tmp_path / "faults.json"
    spec.write_text('{"fsync_delay_ms": 1}')
    monkeypatch.setattr(faults, "FAULTS", faults.DiskFaults(spec))
    _persist_pipelined(server, range(1, 4))
    assert calls == ["disk thread"] * 3
    spec.unlink()
    monkeypatch.setattr(faults, "FAULTS", faults.DiskFaults(spec))  # read afresh, not after REREAD_S
    _persist_pipelined(server, range(4, 6))
    assert calls == ["disk thread"] * 3 + ["kernel"] * 2
