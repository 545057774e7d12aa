"""A throw-away zabby ensemble on 127.0.0.1 for the demo: generated configs, free ports,
``python -m zabby.server.main`` subprocesses, and a stop that always runs."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from zabby.local import four_letter


def free_ports(n: int) -> list[int]:
    """n distinct free ports (all bound at once, so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


class LocalServer:
    def __init__(self, sid: int, folder: Path, client_port: int, settings: dict[str, object]) -> None:
        self.sid = sid
        self.folder = folder
        self.port = client_port
        (folder / "data").mkdir(parents=True, exist_ok=True)
        (folder / "data" / "myid").write_text(f"{sid}\n")
        self.config = folder / "zoo.cfg"
        self.config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        self.log_path = folder / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "zabby.server.main", str(self.config)], stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip

    def mode(self) -> str:
        try:
            text = four_letter(self.port, "srvr", 1.0)
        except OSError:
            return "down"
        modes = [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("Mode: ")]
        return modes[0] if modes else "not serving"

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, grace_s: float = 5.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


class LocalEnsemble:
    """``size`` servers under ``workdir``/server<N>; ports picked free at construction."""

    def __init__(self, workdir: str | Path, size: int = 3, tick_ms: int = 200) -> None:
        self.workdir = Path(workdir)
        ports = free_ports(4 * size)
        quorum = {sid: (ports[4 * (sid - 1)], ports[4 * (sid - 1) + 1]) for sid in range(1, size + 1)}
        clients = {sid: ports[4 * (sid - 1) + 2] for sid in quorum}  # named in the lines: the web console asks each server
        lines = {f"server.{sid}": f"127.0.0.1:{q}:{e};127.0.0.1:{clients[sid]}" for sid, (q, e) in quorum.items()} if size > 1 else {}
        self.servers: dict[int, LocalServer] = {}
        for sid in range(1, size + 1):
            folder = self.workdir / f"server{sid}"
            settings: dict[str, object] = {
                "tickTime": tick_ms, "initLimit": 10, "syncLimit": 5, "dataDir": folder / "data",
                "clientPort": ports[4 * (sid - 1) + 2], "clientPortAddress": "127.0.0.1",
                "admin.serverAddress": "127.0.0.1", "admin.serverPort": ports[4 * (sid - 1) + 3],
                "4lw.commands.whitelist": "*", **lines,
            }  # fmt: skip
            self.servers[sid] = LocalServer(sid, folder, ports[4 * (sid - 1) + 2], settings)

    @property
    def hosts(self) -> str:
        return ",".join(s.host for s in self.servers.values())

    def start(self, wait_s: float = 60.0) -> None:
        for server in self.servers.values():
            server.start()
        self.wait_serving(wait_s)

    def modes(self) -> dict[int, str]:
        return {sid: s.mode() for sid, s in self.servers.items()}

    def leader(self) -> int | None:
        leaders = [sid for sid, m in self.modes().items() if m in ("leader", "standalone")]
        return leaders[0] if len(leaders) == 1 else None

    def wait_serving(self, wait_s: float = 60.0, quorum_only: bool = False) -> dict[int, str]:
        deadline = time.monotonic() + wait_s
        while True:
            for s in self.servers.values():
                if s.proc is not None and s.proc.poll() is not None and not quorum_only:
                    tail = s.log_path.read_text(errors="replace").splitlines()[-20:] if s.log_path.exists() else []
                    raise RuntimeError(f"server {s.sid} exited with {s.proc.returncode}:\n" + "\n".join(tail))
            modes = self.modes()
            serving = [m for m in modes.values() if m in ("leader", "follower", "observer", "standalone")]
            enough = len(serving) > len(modes) // 2 if quorum_only else len(serving) == len(modes)
            if enough and self.leader() is not None:
                return modes
            if time.monotonic() > deadline:
                raise TimeoutError(f"ensemble not serving after {wait_s}s: {modes}")
            time.sleep(0.05)

    def stop(self) -> None:
        for s in self.servers.values():
            try:
                s.stop()
            except Exception:
                s.kill()

    def __enter__(self) -> LocalEnsemble:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
