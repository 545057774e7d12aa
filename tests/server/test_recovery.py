"""Recovery at the process level: a damaged snapshot falls back to an older one plus the log;
containers and TTL nodes are reaped by the server."""

from __future__ import annotations

import time
from pathlib import Path

from tests.server.wire import OPEN_ACL, raw_session
from zabby.testing import ServerProcess


def test_corrupt_newest_snapshot_falls_back(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, snapCount=100)
    server.start()
    try:
        session = raw_session(server.port)
        snap_dir = tmp_path / "data" / "version-2"
        written = 0
        deadline = time.monotonic() + 60  # a loaded machine skips snapshots while a child still writes
        while written < 600 or (len(list(snap_dir.glob("snapshot.*[0-9a-f]"))) < 3 and time.monotonic() < deadline):
            for index in range(written, written + 100):
                assert session.call(1, f"/n{index}", str(index).encode(), OPEN_ACL, 0, 0)[2] == 0
            written += 100
        time.sleep(0.5)  # the last snapshot child may still be writing
        server.kill()
        snapshots = sorted(snap_dir.glob("snapshot.*[0-9a-f]"))
        assert len(snapshots) >= 2
        newest = snapshots[-1]
        raw = bytearray(newest.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        newest.write_bytes(bytes(raw))
        server.start()
        assert "skipping damaged snapshot" in server.log_tail(200)
        session = raw_session(server.port)
        names = set(session.call(8, "/", False)[3])
        assert {f"n{index}" for index in range(written)} <= names
        assert session.call(4, f"/n{written - 1}", False)[3] == str(written - 1).encode()
    finally:
        server.kill()


def test_containers_and_ttl_nodes_are_reaped(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, **{"znode.container.checkIntervalMs": 100})
    server.start()
    try:
        session = raw_session(server.port)
        assert session.call(19, "/box", b"", OPEN_ACL, 4, 0)[2] == 0
        assert session.create("/box/item")[2] == 0
        assert session.call(21, "/ttl", b"", OPEN_ACL, 5, 200)[2] == 0
        assert session.call(21, "/ttl-never-used", b"", OPEN_ACL, 4, 0)[2] != 0  # wrong mode for createTTL
        assert session.call(2, "/box/item", -1)[2] == 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if session.call(3, "/box", False)[3] is None and session.call(3, "/ttl", False)[3] is None:
                break
            time.sleep(0.05)
        assert session.call(3, "/box", False)[3] is None, "an emptied container is removed"
        assert session.call(3, "/ttl", False)[3] is None, "an unmodified, childless TTL node is removed"
    finally:
        server.kill()
