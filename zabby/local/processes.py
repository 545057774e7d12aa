"""Real zabby server processes on 127.0.0.1: for the process-level tests and the scripts
(benchmarks, the differential run, the backup drill).

Every process a test starts is stopped by the fixture that started it; ports are picked free
below the kernel's ephemeral range (see ``free_port``).  The servers run the code of the
checkout this package is in (``CHECKOUT``), with 1 MB of log reserved ahead instead of
ZooKeeper's 64 MB (``preAllocSize``; a test run starts hundreds of them).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from zabby.local import CHECKOUT, four_letter, free_port
from zabby.local.netproxy import LinkProxy

__all__ = ["Ensemble", "ServerProcess", "started_ensemble", "wait_until"]


def wait_until(predicate: Callable[[], object], timeout_s: float = 10.0, what: str = "condition") -> None:
    """Bounded polling: fail the test if ``predicate`` is not true within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


class ServerProcess:
    """One standalone server: its config file, data dir and process."""

    def __init__(self, workdir: Path, *, port: int | None = None, **overrides: object) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.admin_port = free_port()
        self.data_dir = workdir / "data"
        self.log_path = workdir / "server.log"
        settings: dict[str, object] = {
            "tickTime": 200,
            "preAllocSize": 1024,  # KB: a test run starts hundreds of servers; 64 MB each filled CI's disk
            "dataDir": self.data_dir,
            "clientPort": self.port,
            "clientPortAddress": "127.0.0.1",
            "admin.serverPort": self.admin_port,
            "admin.serverAddress": "127.0.0.1",
            "4lw.commands.whitelist": "*",
        }
        settings.update(overrides)
        self.config_path = workdir / "zoo.cfg"
        self.config_path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        self.proc: subprocess.Popen[bytes] | None = None
        self.environment: dict[str, str] = {}  # added to the server's environment at launch
        self.options: list[str] = []  # zabby-server options before the config file (e.g. --log-format json)

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, wait_s: float = 20.0) -> None:
        self.launch()
        try:
            self.wait_serving(wait_s)
        except BaseException:
            self.kill()  # never leave a process behind a failed start
            raise

    def launch(self) -> None:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "zabby.server.main", *self.options, str(self.config_path)],
            stdout=log, stderr=subprocess.STDOUT, cwd=CHECKOUT, env={**os.environ, **self.environment},
        )  # fmt: skip
        log.close()

    def wait_serving(self, wait_s: float = 20.0) -> None:
        """Until the server answers srvr with a Mode line (it is serving clients)."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if "Mode: " in four_letter(self.port, "srvr", 1.0):
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"server on {self.port} not serving after {wait_s}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL: no chance to flush or close anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def four_letter(self, word: str) -> str:
        return four_letter(self.port, word)

    def mode(self) -> str:
        """srvr's Mode (leader, follower, observer, standalone), "not serving", or "down"."""
        try:
            text = self.four_letter("srvr")
        except OSError:
            return "down"
        return next((line[6:] for line in text.splitlines() if line.startswith("Mode: ")), "not serving")

    def wait_mode(self, modes: set[str], wait_s: float = 20.0) -> str:
        deadline = time.monotonic() + wait_s
        mode = ""
        while time.monotonic() < deadline:
            mode = self.mode()
            if mode in modes:
                return mode
            time.sleep(0.05)
        raise AssertionError(f"server on {self.port}: mode {mode!r}, expected one of {sorted(modes)}")


class Ensemble:
    """N servers on 127.0.0.1, each with its own folder, myid and config (server.N lines)."""

    def __init__(self, workdir: Path, size: int, *, observers: int = 0, proxied: bool = False, **overrides: object) -> None:
        """With ``proxied``, server j reaches server i through ``self.proxies[(j, i)]`` (quorum and
        election port each), so a test can cut any directed link."""
        self.servers: dict[int, ServerProcess] = {}
        self.proxies: dict[tuple[int, int], tuple[LinkProxy, LinkProxy]] = {}
        self.workdir = workdir
        self.overrides = overrides
        total = size + observers
        ports = {sid: (free_port(), free_port()) for sid in range(1, total + 1)}
        clients = {sid: free_port() for sid in ports}  # in the server lines: the web console asks each server
        self.ports = {sid: (q, e, clients[sid]) for sid, (q, e) in ports.items()}  # each server's own (unproxied) ports
        role = {sid: ":observer" if sid > size else "" for sid in ports}
        for sid in range(1, total + 1):
            lines = {}
            for other, (q, e) in ports.items():
                if proxied and other != sid:
                    pair = self.proxies[(sid, other)] = (LinkProxy(q), LinkProxy(e))
                    q, e = pair[0].port, pair[1].port
                lines[f"server.{other}"] = f"127.0.0.1:{q}:{e}{role[other]};127.0.0.1:{clients[other]}"
            folder = workdir / f"server{sid}"
            (folder / "data").mkdir(parents=True, exist_ok=True)
            (folder / "data" / "myid").write_text(f"{sid}\n")
            self.servers[sid] = ServerProcess(folder, port=clients[sid], **{"initLimit": 10, "syncLimit": 5, **lines, **overrides})

    def spec(self, sid: int, observer: bool = False) -> str:
        """Server ``sid``'s line of a dynamic configuration (its own ports, never a proxy's)."""
        quorum, election, client = self.ports[sid]
        return f"server.{sid}=127.0.0.1:{quorum}:{election}:{'observer' if observer else 'participant'};127.0.0.1:{client}"

    def new_server(self, sid: int, members: set[int]) -> ServerProcess:
        """A server that is to join: its config lists ``members`` and itself (as ZooKeeper's
        joining servers do; it syncs without voting until a reconfig adds it).  Not started."""
        self.ports[sid] = (free_port(), free_port(), free_port())
        folder = self.workdir / f"server{sid}"
        (folder / "data").mkdir(parents=True, exist_ok=True)
        (folder / "data" / "myid").write_text(f"{sid}\n")
        lines = dict(self.spec(other).split("=", 1) for other in sorted(members | {sid}))
        server = self.servers[sid] = ServerProcess(folder, port=self.ports[sid][2], **{"initLimit": 10, "syncLimit": 5, **lines, **self.overrides})
        return server

    def partition(self, group: set[int], cut: bool = True) -> None:
        """Cut (or heal) every link between ``group`` and the other servers, both ways."""
        for (source, target), pair in self.proxies.items():
            if (source in group) != (target in group):
                for proxy in pair:
                    proxy.set_cut(cut)

    def blackhole(self, group: set[int], on: bool = True) -> None:
        """Drop (or stop dropping) what every link between ``group`` and the others carries,
        both ways, keeping the connections up: the servers notice only by their timeouts."""
        for (source, target), pair in self.proxies.items():
            if (source in group) != (target in group):
                for proxy in pair:
                    proxy.set_blackhole(on)

    @property
    def hosts(self) -> str:
        return ",".join(s.hosts for s in self.servers.values())

    def start(self, wait_s: float = 30.0) -> None:
        try:
            for server in self.servers.values():
                server.launch()
            for server in self.servers.values():
                server.wait_serving(wait_s)
        except BaseException:
            self.kill_all()  # never leave processes behind a failed start
            raise

    def modes(self) -> dict[int, str]:
        return {sid: server.mode() for sid, server in self.servers.items()}

    def leader(self) -> int | None:
        leaders = [sid for sid, mode in self.modes().items() if mode == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    def wait_leader(self, wait_s: float = 30.0, excluding: int | None = None) -> int:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            sid = self.leader()
            serving = [s for s, m in self.modes().items() if m in ("leader", "follower", "observer")]
            if sid is not None and sid != excluding and len(serving) > len(self.servers) // 2:
                return sid
            time.sleep(0.05)
        raise TimeoutError(f"no leader after {wait_s}s: {self.modes()}")

    def kill_all(self) -> None:
        for server in self.servers.values():
            server.kill()
        for pair in self.proxies.values():
            for proxy in pair:
                proxy.close()


@contextlib.contextmanager
def started_ensemble(folder: Path, size: int, **settings: object) -> Iterator[Ensemble]:
    """``size`` servers with a leader elected; every process killed afterwards."""
    group = Ensemble(folder, size, **settings)
    group.start()
    try:
        group.wait_leader()
        yield group
    finally:
        group.kill_all()
