from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from zabby.testing import ServerProcess

# kazoo logs every reconnect attempt at WARNING; the tests provoke many on purpose
logging.getLogger("kazoo").setLevel(logging.ERROR)


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One standalone server for a whole test module (tests use distinct paths)."""
    server = ServerProcess(Path(tmp_path_factory.mktemp("jute")))
    server.start()
    try:
        yield server
    finally:
        server.kill()


def start_kazoo(hosts: str, **kwargs: object) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=kwargs.pop("timeout", 4.0), **kwargs)  # type: ignore[arg-type]
    client.start(timeout=10)
    return client


def stop_kazoo(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()


@pytest.fixture
def kz(shared_server: ServerProcess) -> Iterator[KazooClient]:
    client = start_kazoo(shared_server.hosts)
    try:
        yield client
    finally:
        stop_kazoo(client)
