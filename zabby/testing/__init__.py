"""Real zabby servers for your tests, without Java: a standalone server or an ensemble on
127.0.0.1, in a temporary folder, on free ports, killed (and its folder removed) at the end.

    import zabby.testing

    def test_my_lock() -> None:
        with zabby.testing.ensemble(3) as ens:          # three servers, a leader elected
            zk = zabby.SyncClient(ens.hosts)            # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
            ...
            ens.servers[ens.leader()].kill()            # fail the leader over

The same objects serve ``async with`` under asyncio or trio (the processes start and stop in a
worker thread).  ``server()`` is one standalone server (``.hosts``, ``.port``).  The settings
given are zoo.cfg lines (``tickTime=2000``, ``maxClientCnxns=10``...); by default a tick is 200 ms,
so sessions and elections go fast.  The servers run the zabby this interpreter imports.

The pytest plugin (``zabby.testing.pytest_plugin``, loaded by pytest wherever zabby is
installed) gives the fixtures ``zabby_server`` and ``zabby_ensemble``.

``ServerProcess`` and ``Ensemble`` are the classes behind them, for tests that restart, kill or
reconfigure servers; ``free_port`` and ``wait_until`` are the helpers they use.
``use_fork_server()`` has the servers started from then on forked from a process that has
imported the server: a start takes a tenth of the CPU (``zabby.testing.forkserver``).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Generic, TypeVar

import anyio

from zabby.testing.ensembles import Ensemble, Member
from zabby.testing.processes import ServerProcess, free_port, use_fork_server, wait_until

__all__ = ["Ensemble", "Member", "Running", "ServerProcess", "ensemble", "free_port", "server", "use_fork_server", "wait_until"]

STOP_S_MAX = 60.0  # an async exit waits this long at most for the servers to stop
Servers = TypeVar("Servers", bound=ServerProcess | Ensemble)


class Running(Generic[Servers]):
    """Servers started on entry (``with`` or ``async with``) and killed on exit, in a temporary
    folder of their own unless ``workdir`` was given."""

    def __init__(self, start: Callable[[Path], Servers], workdir: str | Path | None) -> None:
        self._start: Callable[[Path], Servers] = start
        self._workdir = Path(workdir) if workdir is not None else None
        self._temporary: Path | None = None
        self._servers: Servers | None = None

    def __enter__(self) -> Servers:
        if self._servers is not None:
            raise RuntimeError("these servers are running already")
        folder = self._workdir
        if folder is None:
            folder = self._temporary = Path(tempfile.mkdtemp(prefix="zabby-testing-"))
        try:
            self._servers = self._start(folder)
        except BaseException:
            self._remove_folder()
            raise
        return self._servers

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        servers, self._servers = self._servers, None
        try:
            if isinstance(servers, Ensemble):
                servers.kill_all()
            elif servers is not None:
                servers.kill()
        finally:
            self._remove_folder()

    def _remove_folder(self) -> None:
        if self._temporary is not None:
            shutil.rmtree(self._temporary, ignore_errors=True)
            self._temporary = None

    async def __aenter__(self) -> Servers:
        return await anyio.to_thread.run_sync(self.__enter__)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_S_MAX):  # stop them even when cancelled
            await anyio.to_thread.run_sync(self.__exit__, exc_type, exc, tb)


def server(*, workdir: str | Path | None = None, wait_s: float = 20.0, **settings: object) -> Running[ServerProcess]:
    """One standalone server: ``with zabby.testing.server() as zk_server: ... zk_server.hosts``."""

    def start(folder: Path) -> ServerProcess:
        one = ServerProcess(folder, port=None, **settings)
        one.start(wait_s)
        return one

    return Running(start, workdir)


def ensemble(size: int = 3, *, workdir: str | Path | None = None, wait_s: float = 30.0, **settings: object) -> Running[Ensemble]:
    """``size`` servers that elect a leader: ``with zabby.testing.ensemble(3) as ens: ... ens.hosts``;
    on entry every server serves and one leads."""
    if size < 1:
        raise ValueError(f"an ensemble has one server or more, not {size}")

    def start(folder: Path) -> Ensemble:
        group = Ensemble(folder, size, observers=0, client_ports=None, **settings)
        group.start(wait_s)
        try:
            group.wait_leader(wait_s, everyone=True)
        except BaseException:
            group.kill_all()
            raise
        return group

    return Running(start, workdir)
