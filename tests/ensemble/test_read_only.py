"""Read-only mode, real servers: with ``readonlymode.enabled``, a server cut off from its
quorum serves reads to clients that accept it (kazoo's ``read_only=True``, zabby's client,
``zabby-cli -r``); writes get NOTREADONLY; ``isro`` answers ``ro``; and when the quorum is
back the clients move to a read-write server and write again."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import ROOT
from zabby import SyncClient
from zabby.client.states import KeeperState
from zabby.errors import NotReadOnlyCallError
from zabby.testing import Ensemble, wait_until

TICK_MS = 200


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[Ensemble]:
    group = Ensemble(tmp_path, 3, tickTime=TICK_MS, **{"readonlymode.enabled": "true"})
    group.start()
    try:
        yield group
    finally:
        group.kill_all()


def cut_off(ensemble: Ensemble) -> int:
    """Kill two servers; the third loses its quorum and turns read-only."""
    survivor = 1
    writer = SyncClient(ensemble.hosts, timeout=10.0)
    writer.start()
    writer.create("/x", b"before")
    writer.stop()
    for sid in (2, 3):
        ensemble.servers[sid].kill()
    wait_until(lambda: ensemble.servers[survivor].four_letter("isro") == "ro", 20, "read-only mode")
    return survivor


def test_zabby_client_reads_in_read_only_mode_and_moves_back_to_read_write(ensemble: Ensemble) -> None:
    survivor = cut_off(ensemble)
    assert "Mode: read-only" in ensemble.servers[survivor].four_letter("srvr")
    client = SyncClient(ensemble.hosts, timeout=10.0, read_only=True)
    client.start(timeout=20)
    try:
        assert client.client_state == KeeperState.CONNECTED_RO
        assert client.get("/x")[0] == b"before"
        with pytest.raises(NotReadOnlyCallError):
            client.create("/y", b"no")
        for sid in (2, 3):
            ensemble.servers[sid].start()
        wait_until(lambda: client.client_state == KeeperState.CONNECTED, 30, "the client to find a read-write server")
        client.retry(client.create, "/y", b"after")
        assert client.get("/y")[0] == b"after"
    finally:
        client.stop()


def test_a_client_that_does_not_accept_read_only_is_refused(ensemble: Ensemble) -> None:
    survivor = cut_off(ensemble)
    strict = SyncClient(ensemble.servers[survivor].hosts, timeout=4.0)
    with pytest.raises(Exception):
        strict.start(timeout=3)


def test_kazoo_reads_in_read_only_mode(ensemble: Ensemble) -> None:
    from kazoo.client import KazooClient
    from kazoo.exceptions import NotReadOnlyCallError as KazooNotReadOnly

    survivor = cut_off(ensemble)
    kazoo = KazooClient(hosts=ensemble.servers[survivor].hosts, read_only=True, timeout=10.0)
    kazoo.start(timeout=20)
    try:
        assert kazoo.get("/x")[0] == b"before"
        with pytest.raises(KazooNotReadOnly):
            kazoo.create("/y", b"no")
    finally:
        kazoo.stop()
        kazoo.close()


def test_zabby_cli_with_r_reads_from_a_read_only_server(ensemble: Ensemble) -> None:
    survivor = cut_off(ensemble)
    hosts = ensemble.servers[survivor].hosts
    cli = [sys.executable, "-m", "zabby.cli.main", "-server", hosts, "-r"]
    read = subprocess.run([*cli, "get", "/x"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert read.returncode == 0 and read.stdout.strip() == "before", read.stderr
    write = subprocess.run([*cli, "create", "/y", "v"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert write.returncode != 0 and "Not a read-only call" in (write.stdout + write.stderr)
