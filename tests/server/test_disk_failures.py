"""Only storage failures stop a server, and then cleanly (process level):

- a failed fsync is fail-stop: one CRITICAL line, exit code 74, nothing acknowledged lost;
- a full disk refuses writes with a clear error while reads and sessions go on, and writes
  resume once space is free, with nothing lost or half-written (through the injection hook,
  and for real on a small tmpfs where this machine lets a test mount one);
- a write that fails for want of space after all restarts the core in place: the process
  lives on and serves again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tmpfs import fill, small_tmpfs
from zabby import SyncClient
from zabby.errors import ConnectionLoss, SystemZookeeperError
from zabby.server.process.disk import EXIT_DISK_FAILURE
from zabby.testing import ServerProcess, wait_until


@pytest.fixture
def faulty_server(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    server = ServerProcess(tmp_path / "server", preAllocSize=64, snapCount=1_000_000)
    faults = tmp_path / "faults.json"
    server.environment = {"ZABBY_DISK_FAULTS": str(faults)}
    server.start()
    try:
        yield server, faults
    finally:
        server.kill()


def inject(faults: Path, spec: dict[str, object]) -> None:
    faults.write_text(json.dumps(spec))
    time.sleep(0.25)  # the server rereads the file at most every 100 ms


def client_of(server: ServerProcess) -> SyncClient:
    client = SyncClient(server.hosts, timeout=6.0)
    client.start(timeout=20)
    return client


def assert_all_there(server: ServerProcess, paths: list[str]) -> None:
    client = client_of(server)
    try:
        missing = [path for path in paths if client.exists(path) is None]
        assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:3]}"
    finally:
        client.stop()


def test_a_failed_fsync_stops_the_server_with_exit_74_and_loses_nothing(faulty_server: tuple[ServerProcess, Path]) -> None:
    server, faults = faulty_server
    client = client_of(server)
    acked = []
    for index in range(20):
        client.create(f"/k{index}", b"v")
        acked.append(f"/k{index}")
    inject(faults, {"fsync": "EIO"})
    with pytest.raises((ConnectionLoss, SystemZookeeperError, Exception)):
        client.create("/doomed", b"x")
    assert server.proc is not None and server.proc.wait(15) == EXIT_DISK_FAILURE
    client.stop()
    log = server.log_path.read_text()
    critical = [line for line in log.splitlines() if " CRITICAL " in line]
    assert len(critical) == 1 and "disk failure, stopping this server (exit 74)" in critical[0], critical
    assert "Input/output error" in critical[0] and "Traceback" not in log
    faults.unlink()
    server.start()
    assert_all_there(server, acked)


def test_a_full_disk_refuses_writes_and_they_resume_once_space_is_free(faulty_server: tuple[ServerProcess, Path]) -> None:
    server, faults = faulty_server
    client = client_of(server)
    acked = []
    try:
        client.create("/before", b"v")
        acked.append("/before")
        inject(faults, {"allocate": "ENOSPC"})
        refused = write_until_refused(client, acked)
        assert "disk" in str(refused) and "full" in str(refused)
        assert client.get("/before")[0] == b"v"  # reads go on
        other = client_of(server)  # new sessions too
        assert other.exists("/before") is not None
        other.stop()
        faults.unlink()
        wait_until(lambda: try_create(client, "/after", acked), 15.0, "writes to resume")
    finally:
        client.stop()
    server.kill()
    server.start()
    assert_all_there(server, acked)
    assert "Traceback" not in server.log_path.read_text()


def write_until_refused(client: SyncClient, acked: list[str], attempts_max: int = 5000) -> SystemZookeeperError:
    """Write 1 kB nodes until the server refuses one (it notices when its reserve runs low)."""
    for index in range(attempts_max):
        path = f"/w{index}"
        try:
            client.create(path, b"x" * 1000)
        except SystemZookeeperError as exc:
            return exc
        acked.append(path)
    raise AssertionError(f"no write refused after {attempts_max}")


def try_create(client: SyncClient, prefix: str, acked: list[str]) -> bool:
    """One create under a fresh name; False if refused or cut off (the server is restarting)."""
    path = f"{prefix}-{len(acked)}-{time.monotonic_ns()}"
    try:
        client.create(path, b"v")
    except (SystemZookeeperError, ConnectionLoss):
        return False
    acked.append(path)
    return True


def test_a_write_that_finds_no_space_restarts_the_core_and_the_server_lives_on(faulty_server: tuple[ServerProcess, Path]) -> None:
    server, faults = faulty_server
    client = client_of(server)
    acked = []
    try:
        client.create("/before", b"v")
        acked.append("/before")
        inject(faults, {"write": "ENOSPC"})
        with pytest.raises((ConnectionLoss, SystemZookeeperError)):
            client.create("/refused", b"x")
        faults.unlink()
        wait_until(lambda: server.mode() == "standalone", 15.0, "the server to serve again")
        wait_until(lambda: try_create(client, "/after", acked), 20.0, "writes to work again")
    finally:
        client.stop()
    assert server.proc is not None and server.proc.poll() is None
    log = server.log_path.read_text()
    assert "DiskFull" in log and "restarting the core from disk" in log and "Traceback" not in log
    server.kill()
    server.start()
    assert_all_there(server, acked)


@pytest.fixture
def tmpfs_server(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    """A server whose dataDir is an 8 MiB tmpfs (skipped where mounting is not allowed)."""
    with small_tmpfs(tmp_path / "tmpfs", "8m") as mount_point:
        server = ServerProcess(tmp_path / "server", dataDir=mount_point / "data", preAllocSize=256, snapCount=1_000_000)
        try:
            server.start()
            yield server, mount_point
        finally:
            server.kill()


def test_a_real_full_disk_refuses_writes_until_space_is_freed(tmpfs_server: tuple[ServerProcess, Path]) -> None:
    server, mount_point = tmpfs_server
    client = client_of(server)
    acked: list[str] = []
    filler = mount_point / "filler"
    try:
        client.create("/before", b"v")
        acked.append("/before")
        fill(filler)
        refused = write_until_refused(client, acked)
        assert "full" in str(refused)
        assert client.get("/before")[0] == b"v"
        filler.unlink()
        wait_until(lambda: try_create(client, "/after", acked), 15.0, "writes to resume")
    finally:
        client.stop()
    server.kill()
    server.start()
    assert_all_there(server, acked)
    assert "Traceback" not in server.log_path.read_text()

