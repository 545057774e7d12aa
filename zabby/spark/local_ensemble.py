"""A throw-away zabby ensemble on 127.0.0.1 for the demo: generated configs, free ports,
``python -m zabby.server.main`` subprocesses, and a stop that always runs.

Built on ``zabby.testing.Ensemble`` (the servers the tests start), each server in a
session of its own, so a Ctrl-C in the terminal reaches the demo, whose stop then ends them.
"""

from __future__ import annotations

from pathlib import Path

from zabby.testing import Ensemble


class LocalEnsemble:
    """``size`` servers under ``workdir``/server<N>; ports picked free at construction."""

    def __init__(self, workdir: str | Path, size: int = 3, tick_ms: int = 200) -> None:
        self.workdir = Path(workdir)
        self.ensemble = Ensemble(self.workdir, size, tickTime=tick_ms)
        self.servers = self.ensemble.servers
        for server in self.servers.values():
            server.new_session = True

    @property
    def hosts(self) -> str:
        return self.ensemble.hosts

    def start(self, wait_s: float = 60.0) -> None:
        """Launch every server and wait until all serve with a leader elected; on failure,
        stop what was launched."""
        try:
            self.ensemble.start(wait_s)
            self.wait_serving(wait_s)
        except BaseException:
            self.stop()
            raise

    def modes(self) -> dict[int, str]:
        return self.ensemble.modes()

    def leader(self) -> int | None:
        return self.ensemble.leader()

    def wait_serving(self, wait_s: float = 60.0, quorum_only: bool = False) -> dict[int, str]:
        """Until a leader is elected and every server serves (a server that exited fails the
        wait at once), or with ``quorum_only`` a majority; the modes then."""
        self.ensemble.wait_leader(wait_s, everyone=not quorum_only)
        return self.modes()

    def stop(self) -> None:
        """SIGTERM every server, SIGKILL those not ended within 10 s."""
        self.ensemble.stop_all()

    def __enter__(self) -> LocalEnsemble:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
