"""The systems under test of scripts/bench.py: zabby and Apache ZooKeeper 3.8, standalone or
a 3-server ensemble on 127.0.0.1, each in its own folder of a temporary directory.

Both expose the same small surface: ``start()``, ``stop()``, ``hosts`` (every client
address), ``pids()`` (for CPU seconds), ``mntr(sid)``, ``srvr(sid)``, ``leader()``,
``kill(sid)`` and ``launch(sid)`` (a follower restarted for the resync workload).  Every
server is stopped (SIGKILL) by ``stop()``, which the harness calls in a ``finally``.

zabby's servers run from ``zabby_root`` (default: this checkout), so the same harness can
measure an older commit checked out elsewhere (``git worktree add /tmp/old <commit>``).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any


from harness import CHECKOUT
from zabby.client.fourletter import four_letter, mntr, server_mode, srvr
from harness.local.zookeeper import ensure_zookeeper, ZooKeeperEnsemble
from zabby.testing import Ensemble, ServerProcess

# The same settings for both systems wherever both have them.
COMMON: dict[str, Any] = {
    "tickTime": 2000,
    "initLimit": 10,
    "syncLimit": 5,
    "maxClientCnxns": 0,  # the watch fan-out opens hundreds of connections from 127.0.0.1
    "snapCount": 100000,
    "4lw.commands.whitelist": "*",
    "admin.enableServer": "false",
    "forceSync": "yes",
}
# The settings the harness gives each server itself: --setting may not change them.
PER_SERVER_KEYS = ("dataDir", "dataLogDir", "clientPort", "clientPortAddress", "secureClientPort", "dynamicConfigFile")
PER_SERVER_PREFIXES = ("server.", "group.", "weight.")  # the ensemble's membership lines


def setting_problem(key: str) -> str | None:
    """Why ``key`` may not be set with --setting (None: it may)."""
    if not key or any(c.isspace() for c in key):
        return f"{key!r} is no zoo.cfg key"
    if key in PER_SERVER_KEYS or key.startswith(PER_SERVER_PREFIXES):
        return f"{key} is set per server by the harness"
    return None


def cpu_of(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds; 0 when it is gone."""
    return sum(cpu_split_of(pid))


def cpu_split_of(pid: int) -> tuple[float, float]:
    """utime and stime of a process (all its threads), in seconds; zeros when it is gone.  The
    user time is the interpreter's own work; the system time (sockets, fsync, epoll) swings
    with what else the machine runs, so a regression in the Python code shows in the first."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def mntr_of(port: int) -> dict[str, str]:
    return mntr(port, 5.0)


def srvr_of(port: int, timeout_s: float = 2.0) -> dict[str, str]:
    """srvr's ``Key: value`` lines (Mode, Zxid, Node count); {} while the server is down or
    not serving."""
    try:
        fields = srvr(port, timeout_s)
    except OSError:
        return {}
    return fields if "Mode" in fields else {}


def rss_bytes(pid: int | None) -> int:
    """Resident set size of a process (VmRSS), 0 when it is gone."""
    try:
        line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0
    return int(line.split()[1]) * 1024


def jvm_live_heap(pid: int) -> dict[str, int]:
    """The JVM's live heap: ``jcmd GC.class_histogram`` forces a full GC and sums the live
    objects (``live_bytes``); ``jcmd GC.heap_info`` right after gives the heap's used and
    committed bytes (after that GC)."""
    out: dict[str, int] = {}
    histogram = subprocess.run(["jcmd", str(pid), "GC.class_histogram"], capture_output=True, text=True, timeout=300, check=True).stdout
    total = next((line for line in reversed(histogram.splitlines()) if line.strip().startswith("Total")), "")
    if total:
        out["live_bytes"] = int(total.split()[2])
    info = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=120, check=True).stdout
    match = re.search(r"heap\s+total (\d+)K, used (\d+)K", info)
    if match:
        out["committed_bytes"], out["used_bytes"] = int(match.group(1)) * 1024, int(match.group(2)) * 1024
    return out


def mode_of(port: int) -> str:
    return server_mode(port, 2.0)


def total_watches(ports: list[int]) -> int:
    total = 0
    for port in ports:
        for line in four_letter(port, "wchs", 5.0).splitlines():
            if line.startswith("Total watches:"):
                total += int(line.split(":", 1)[1])
    return total


def zookeeper_missing() -> str | None:
    """None when Debian's zookeeper 3.8 jars are there (installing them with apt when missing),
    else why not."""
    try:
        ensure_zookeeper()
    except RuntimeError as exc:  # ZooKeeperUnavailable too
        return f"Debian's zookeeper package is missing and could not be installed: {exc}"
    return None


class System:
    name = ""
    deployment = ""

    @property
    def hosts(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports.values())

    ports: dict[int, int]

    def host_list(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port in self.ports.values()]

    def pids(self) -> list[int]:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def launch(self, sid: int) -> None:
        raise NotImplementedError

    def kill(self, sid: int) -> None:
        raise NotImplementedError

    def log_tail(self) -> str:
        raise NotImplementedError

    def cpu(self) -> float:
        return sum(cpu_of(pid) for pid in self.pids())

    def mntr(self, sid: int) -> dict[str, str]:
        return mntr_of(self.ports[sid])

    def srvr(self, sid: int) -> dict[str, str]:
        return srvr_of(self.ports[sid])

    def pid(self, sid: int) -> int | None:
        raise NotImplementedError

    def log_path(self, sid: int) -> Path:
        raise NotImplementedError

    def data_dir(self, sid: int) -> Path:
        raise NotImplementedError

    def newest_snapshot_zxid(self, sid: int) -> int:
        """From the file names ``<dataDir>/version-2/snapshot.<hex zxid>`` (both systems' layout)."""
        zxids = [int(path.name.split(".", 1)[1], 16) for path in (self.data_dir(sid) / "version-2").glob("snapshot.*")
                 if all(c in "0123456789abcdefABCDEF" for c in path.name.split(".", 1)[1])]  # fmt: skip
        return max(zxids, default=0)

    def modes(self) -> dict[int, str]:
        return {sid: mode_of(port) for sid, port in self.ports.items()}

    def leader(self, wait_s: float = 60.0) -> int:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            modes = self.modes()
            leaders = [sid for sid, mode in modes.items() if mode in ("leader", "standalone")]
            serving = [sid for sid, mode in modes.items() if mode in ("leader", "follower", "standalone")]
            if len(leaders) == 1 and len(serving) > len(modes) // 2:
                return leaders[0]
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} {self.deployment}: no leader after {wait_s}s: {self.modes()}")

    def wait_all_serving(self, wait_s: float = 60.0) -> None:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if all(mode in ("leader", "follower", "standalone") for mode in self.modes().values()):
                return
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} {self.deployment}: not every server serving after {wait_s}s: {self.modes()}")


class ZabbySystem(System):
    name = "zabby"

    def __init__(self, workdir: Path, servers: int, root: Path = CHECKOUT, settings: dict[str, str] | None = None) -> None:
        self.deployment = "standalone" if servers == 1 else f"{servers}-server"
        self.root = root
        conf: dict[str, Any] = {**COMMON, "commitLogCount": 500, **(settings or {})}
        if servers == 1:
            one = ServerProcess(workdir, **conf)
            self.procs = {1: one}
            self.group = None
        else:
            self.group = Ensemble(workdir, servers, **conf)
            self.procs = self.group.servers
        for proc in self.procs.values():
            proc.root = root  # its servers run that checkout's code
        self.ports = {sid: proc.port for sid, proc in self.procs.items()}

    def start(self) -> None:
        for sid in self.procs:
            self.launch(sid)
        for proc in self.procs.values():
            proc.wait_serving(60)
        self.leader()
        self.wait_all_serving()

    def pids(self) -> list[int]:
        return [proc.proc.pid for proc in self.procs.values() if proc.proc is not None and proc.proc.poll() is None]

    def pid(self, sid: int) -> int | None:
        proc = self.procs[sid].proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def kill(self, sid: int) -> None:
        self.procs[sid].kill()

    def launch(self, sid: int) -> None:
        self.procs[sid].launch()

    def stop(self) -> None:
        for proc in self.procs.values():
            try:
                proc.kill()
            except Exception:  # noqa: BLE001 - stop the others all the same
                pass

    def log_tail(self) -> str:
        return "\n".join(f"[server {sid}]\n{proc.log_tail(40)}" for sid, proc in self.procs.items())

    def log_path(self, sid: int) -> Path:
        return self.procs[sid].log_path

    def data_dir(self, sid: int) -> Path:
        return self.procs[sid].data_dir




class ZooKeeperSystem(System):
    """Apache ZooKeeper 3.8 (Debian's jars) run as our own JVMs: QuorumPeerMain + zoo.cfg."""

    name = "zookeeper"

    def __init__(self, workdir: Path, servers: int, heap: str = "512m", settings: dict[str, str] | None = None) -> None:
        self.deployment = "standalone" if servers == 1 else f"{servers}-server"
        self.heap = heap
        properties = {"zookeeper.admin.enableServer": "false", "zookeeper.jmx.log4j.disable": "true"}
        conf: dict[str, Any] = {**COMMON, **(settings or {})}
        self.group = ZooKeeperEnsemble(workdir, servers, heap=heap, properties=properties, **conf)
        self.procs = self.group.servers
        self.ports = {sid: proc.port for sid, proc in self.procs.items()}
        self.dirs = {sid: proc.workdir for sid, proc in self.procs.items()}

    def launch(self, sid: int) -> None:
        self.procs[sid].launch()

    def start(self) -> None:
        self.group.start(60)
        self.leader()

    def pids(self) -> list[int]:
        return [proc.proc.pid for proc in self.procs.values() if proc.proc is not None and proc.running()]

    def pid(self, sid: int) -> int | None:
        proc = self.procs[sid]
        return proc.proc.pid if proc.proc is not None and proc.running() else None

    def kill(self, sid: int) -> None:
        self.procs[sid].kill()

    def stop(self) -> None:
        self.group.kill_all()

    def log_tail(self) -> str:
        parts = []
        for sid, folder in self.dirs.items():
            for name in ("zookeeper.log", "stdout.log"):
                try:
                    lines = (folder / name).read_text(errors="replace").splitlines()[-10:]
                except OSError:
                    continue
                parts.append(f"[server {sid} {name}]\n" + "\n".join(lines))
        return "\n".join(parts)

    def log_path(self, sid: int) -> Path:
        return self.dirs[sid] / "zookeeper.log"

    def data_dir(self, sid: int) -> Path:
        return self.dirs[sid] / "data"

    def learner_sync_modes(self, sid: int) -> list[str]:
        """DIFF/SNAP/TRUNC lines a learner logged ("Getting a diff from the leader ...")."""
        try:
            text = (self.dirs[sid] / "zookeeper.log").read_text(errors="replace")
        except OSError:
            return []
        found = []
        for line in text.splitlines():
            if "Getting a diff from the leader" in line:
                found.append("DIFF")
            elif "Getting a snapshot from leader" in line:
                found.append("SNAP")
            elif "Truncating log to get in sync" in line:
                found.append("TRUNC")
        return found


def make_system(name: str, workdir: Path, servers: int, *, zabby_root: Path = CHECKOUT, zk_heap: str = "512m",
                settings: dict[str, str] | None = None) -> System:  # fmt: skip
    """``settings``: zoo.cfg lines over COMMON, for every server of either system."""
    if name == "zabby":
        return ZabbySystem(workdir, servers, zabby_root, settings)
    return ZooKeeperSystem(workdir, servers, zk_heap, settings)
