"""The conformance suite's fixtures: every test runs once per client flavor (asyncio, trio,
sync), against one server per module (and one proxy hub for the tests that cut links)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from harness.local.netproxy import ProxyHub
from zabby.testing import ServerProcess

from .adapter import FLAVORS, Zk

CLIENT_TIMEOUT_S = 4.0


@pytest.fixture(scope="module", params=FLAVORS)
def flavor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def anyio_backend(flavor: str) -> str:
    """The framework the test body runs under; the blocking client's tests run under trio."""
    return "trio" if flavor == "sync" else flavor


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(Path(tmp_path_factory.mktemp("conformance")))
    process.start()
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture(scope="module")
def hub() -> Iterator[ProxyHub]:
    proxies = ProxyHub()
    try:
        yield proxies
    finally:
        proxies.close()


MakeClient = Callable[..., Awaitable[Zk]]


@pytest.fixture
async def make_client(flavor: str, server: ServerProcess) -> AsyncIterator[MakeClient]:
    """``await make_client(hosts=..., **options)``: a started client of this flavor, closed
    after the test (within a bound, whatever state it is in)."""
    made: list[Zk] = []

    async def make(hosts: str | None = None, start: bool = True, **options: Any) -> Zk:
        options.setdefault("timeout", CLIENT_TIMEOUT_S)
        zk = Zk(flavor, hosts or server.hosts, **options)
        made.append(zk)
        if start:
            await zk.start(timeout=10)
        return zk

    try:
        yield make
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(30):
            for zk in made:
                try:
                    await zk.close()
                except Exception:
                    pass


@pytest.fixture
async def zk(make_client: MakeClient) -> Zk:
    return await make_client()


@pytest.fixture
def path() -> str:
    """A node of this test's own, so the tests of a module share its server without meeting."""
    return f"/c-{uuid.uuid4().hex[:12]}"
