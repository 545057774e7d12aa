"""Real zabby server processes on 127.0.0.1: free ports, a server's zoo.cfg and myid, its launch
(``python -m zabby.server.main``), the wait until it serves, and its stop.

The one place for what running a local server takes, for ``zabby.testing``'s users, zabby's own
tests, the demo's ensemble and the repository's harness: ``write_config``, ``write_myid`` and
``local_settings`` (its files), ``launch_server`` (its process), ``wait_serving`` (srvr until
it answers with a Mode), ``stop_pids``/``stop_processes`` and ``kill_pids``/``kill_processes``
(SIGTERM, a wait, SIGKILL; a zombie counts as ended).  ``ServerProcess`` is one server in a
folder of its own.

After ``use_fork_server()``, servers are forked from a process that has imported the server
already (``zabby.testing.forkserver``): a start then costs a tenth of the CPU.  zabby's own
tests do so; a launch the template cannot stand for (another checkout's code, another
environment) still runs the command.

A server runs the zabby this interpreter imports (``code_root``), whether installed or a
checkout's; ``launch_server(root=...)`` runs another one's (an older checkout, say).  Ports are
picked free below the kernel's ephemeral range (``free_port``), so a server that restarts finds
its ports free.  ``ServerProcess`` reserves 1 MB of log ahead instead of ZooKeeper's 64 MB
(``preAllocSize``: a test run starts hundreds of servers).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import random
import resource
import signal
import site
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Protocol

import zabby
from zabby.client.fourletter import four_letter, mntr, server_mode, srvr_zxid
from zabby.testing.forkserver import ForkServer, ForkServerGone, Launch, environment_key

SERVING_MODES = ("leader", "follower", "observer", "standalone")  # read-only is not counted
LEADING_MODES = ("leader", "standalone")
KILL_WAIT_S = 10.0  # how long a SIGKILLed process may take to end
PORT_LOW = 20000
_PORTS_TAKEN: set[int] = set()


class ServerHandle(Protocol):
    """A launched server process: a ``subprocess.Popen``, or a ``forkserver.ForkedProcess``."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, signum: int, /) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


# --- ports, processes, waits ----------------------------------------------------------------


def free_port() -> int:
    """A free port below the kernel's ephemeral range, so no outgoing connection can take it
    while a server that will listen on it is down (a restart must find its ports free).
    Ports handed out once are not handed out again by this process.  Under pytest-xdist each
    worker draws from its own residue class (port % workers == its index), so two workers of a
    run never hand out the same port; other processes that pick ports side by side seldom meet,
    as ports are drawn at random."""
    rng = random.Random()
    high = min(_ephemeral_low(), 32768)
    index, workers = xdist_worker()
    for _ in range(1000):
        port = rng.randrange(PORT_LOW + index, high, workers)
        if port in _PORTS_TAKEN:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PORTS_TAKEN.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range")


def xdist_worker() -> tuple[int, int]:
    """(this process's worker index, the number of workers) under pytest-xdist, which sets
    PYTEST_XDIST_WORKER=gw<N> in its workers (their subprocesses inherit it); (0, 1) elsewhere."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (name.startswith("gw") and name[2:].isdigit() and count.isdigit() and int(name[2:]) < int(count)):
        return 0, 1
    return int(name[2:]), int(count)


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def process_alive(pid: int) -> bool:
    """Running, not a zombie.  A server killed but not yet reaped (because it is not our child,
    or its parent does not reap) lingers as a zombie, which ``kill(pid, 0)`` misses."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc: trust kill(pid, 0)
    return state not in ("Z", "X")


def poll_until(predicate: Callable[[], object], timeout_s: float, interval_s: float = 0.01) -> bool:
    """Whether ``predicate`` turned true within ``timeout_s`` (checked every ``interval_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())


def wait_until(predicate: Callable[[], object], timeout_s: float = 10.0, what: str = "condition") -> None:
    """Bounded polling: raise AssertionError (a test's failure) if ``predicate`` is not true
    within ``timeout_s``."""
    if not poll_until(predicate, timeout_s):
        raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


# --- zoo.cfg and myid ---------------------------------------------------------------------


def local_settings(data_dir: Path, client_port: int, admin_port: int, tick_ms: int) -> dict[str, object]:
    """The zoo.cfg settings of a server on 127.0.0.1 (its admin console too; every
    four-letter word allowed)."""
    return {
        "tickTime": tick_ms, "dataDir": data_dir,
        "clientPort": client_port, "clientPortAddress": "127.0.0.1",
        "admin.serverPort": admin_port, "admin.serverAddress": "127.0.0.1",
        "4lw.commands.whitelist": "*",
    }  # fmt: skip


def write_config(path: Path, settings: Mapping[str, object]) -> Path:
    """``path`` (a zoo.cfg) with one ``key=value`` line per setting."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


def write_myid(data_dir: Path, sid: int) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "myid").write_text(f"{sid}\n")


# --- launch, wait, stop ---------------------------------------------------------------------


def code_root() -> Path:
    """The folder the running ``zabby`` package was imported from (site-packages, or a checkout)."""
    return Path(zabby.__file__).resolve().parents[1]


def _python_path(root: Path | None) -> str:
    """The server's PYTHONPATH: ``root`` (or ``code_root()``) first, unless it is a folder the
    interpreter reads anyway (site-packages), then ours."""
    first = root or code_root()
    site_dirs = {Path(p).resolve() for p in [*site.getsitepackages(), site.getusersitepackages()]}
    own = [] if root is None and first in site_dirs else [str(first)]
    return os.pathsep.join(filter(None, [*own, os.environ.get("PYTHONPATH", "")]))


def launch_server(
    config: Path, log_path: Path, *, options: Iterable[str] = (), environment: Mapping[str, str] | None = None,
    new_session: bool = False, root: Path | None = None, cwd: Path | None = None, descriptors_max: int | None = None,
) -> ServerHandle:  # fmt: skip
    """``python -m zabby.server.main [options] config``, running the zabby found in ``root``
    (default: the one this interpreter imported, see ``code_root``), from ``cwd`` (default the
    config's folder), its output appended to ``log_path``; ``environment`` is added to ours
    last.  With ``new_session`` in a session of its own (a Ctrl-C in the terminal does not
    reach it; it may outlive its parent; ``os.killpg`` reaches all of it).  With
    ``descriptors_max``, its RLIMIT_NOFILE (soft and hard) is that.  Forked from the fork
    server's template where ``use_fork_server()`` was called and the template can stand for it."""
    env = _environment(root, environment)
    launch = Launch([*options, str(config)], str(cwd or config.parent), str(log_path), env, new_session, descriptors_max)
    forked = _forked(launch)
    if forked is not None:
        return forked
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "zabby.server.main", *launch.arguments], stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, cwd=launch.cwd, env=env, start_new_session=new_session,
            preexec_fn=None if descriptors_max is None else functools.partial(_limit_descriptors, descriptors_max),
        )  # fmt: skip


_forking = False
_fork_servers: dict[frozenset[tuple[str, str]], ForkServer] = {}  # by environment_key


def use_fork_server() -> None:
    """Fork the servers launched from now on (``launch_server``) from a template process that
    has imported the server (``zabby.testing.forkserver``): one for this process's environment,
    started now, and one more whenever that environment has changed at a launch; each ended
    with this interpreter."""
    global _forking
    _forking = True
    _fork_server_for(_environment(None))


def _environment(root: Path | None, environment: Mapping[str, str] | None = None) -> dict[str, str]:
    """A server's environment: ours, its PYTHONPATH (see ``_python_path``), then ``environment``."""
    return {**os.environ, "PYTHONPATH": _python_path(root), **(environment or {})}


def _fork_server_for(environment: Mapping[str, str]) -> ForkServer:
    key = environment_key(environment)
    if key not in _fork_servers:
        _fork_servers[key] = ForkServer(environment, process_alive)
        atexit.register(_fork_servers[key].close)
    return _fork_servers[key]


def _forked(launch: Launch) -> ServerHandle | None:
    """The server forked, or None where it is to be launched as a command: no fork server in
    use, a launch with variables of its own or another checkout's code (its environment is
    not ours), or a template that has ended (a server is not forked from a new one for the
    same environment: whatever ended it may end that one too)."""
    if not _forking or environment_key(launch.environment) != environment_key(_environment(None)):
        return None
    fork_server = _fork_server_for(launch.environment)
    if fork_server.ended:
        return None
    try:
        return fork_server.launch(launch)
    except ForkServerGone:
        return None


def _limit_descriptors(count: int) -> None:
    """In the child, before exec: at most ``count`` open files."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))


def wait_serving(port: int, running: Callable[[], bool], wait_s: float = 20.0) -> str:
    """Until the server on ``port`` answers srvr with a Mode (it serves clients); that mode.

    Raises:
        RuntimeError: ``running()`` turned false first (the server ended).
        TimeoutError: not serving within ``wait_s``.
    """
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not running():
            raise RuntimeError(f"server on {port} exited")
        mode = server_mode(port, 1.0)
        if mode not in ("down", "not serving"):
            return mode
        time.sleep(0.01)
    raise TimeoutError(f"server on {port} not serving after {wait_s}s")


def signal_running(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        if process_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)


def ended(pids: Iterable[int], timeout_s: float) -> bool:
    """Whether every process ended within ``timeout_s`` (a zombie counts as ended)."""
    pids = list(pids)
    return poll_until(lambda: not any(process_alive(pid) for pid in pids), timeout_s)


def kill_pids(pids: Iterable[int]) -> None:
    """SIGKILL each running process (no chance to flush or close anything) and wait for it to end."""
    pids = list(pids)
    signal_running(pids, signal.SIGKILL)
    ended(pids, KILL_WAIT_S)


def stop_pids(pids: Iterable[int], grace_s: float = 10.0) -> None:
    """SIGTERM each running process, wait up to ``grace_s`` for all to end, SIGKILL those left."""
    pids = list(pids)
    signal_running(pids, signal.SIGTERM)
    if not ended(pids, grace_s):
        kill_pids(pids)


def _unreaped(procs: Iterable[ServerHandle | None]) -> list[ServerHandle]:
    """The children not yet reaped: their pids are still theirs, safe to signal."""
    return [proc for proc in procs if proc is not None and proc.poll() is None]


def stop_processes(procs: Iterable[ServerHandle | None], grace_s: float = 10.0) -> None:
    """``stop_pids`` for child processes, all at once, then reap them."""
    children = _unreaped(procs)
    stop_pids([proc.pid for proc in children], grace_s)
    for proc in children:
        proc.wait(KILL_WAIT_S)


def kill_processes(procs: Iterable[ServerHandle | None]) -> None:
    """``kill_pids`` for child processes, all at once, then reap them."""
    children = _unreaped(procs)
    kill_pids([proc.pid for proc in children])
    for proc in children:
        proc.wait(KILL_WAIT_S)


class ServerProcess:
    """One server: its folder (``workdir``: zoo.cfg, data/, server.log), ports and process.
    ``settings`` are zoo.cfg lines over the local defaults (tickTime 200 ms)."""

    def __init__(self, workdir: Path, *, port: int | None = None, **settings: object) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.admin_port = free_port()
        self.data_dir = workdir / "data"
        self.log_path = workdir / "server.log"
        self.settings: dict[str, object] = {
            **local_settings(self.data_dir, self.port, self.admin_port, tick_ms=200),
            "preAllocSize": 1024,  # KB: a test run starts hundreds of servers; 64 MB each filled CI's disk
            **settings,
        }
        self.config_path = workdir / "zoo.cfg"
        self.write_config()
        self.proc: ServerHandle | None = None
        self.environment: dict[str, str] = {}  # added to the server's environment at launch
        self.options: list[str] = []  # zabby-server options before the config file (e.g. --log-format json)
        self.new_session = False  # launch it in a session of its own (see launch_server)
        self.root: Path | None = None  # the folder whose zabby it runs (see launch_server); None: ours
        self.descriptors_max: int | None = None  # its RLIMIT_NOFILE (see launch_server); None: ours

    def write_config(self) -> None:
        """(Re)write its zoo.cfg from ``settings``: change them, write, restart."""
        write_config(self.config_path, self.settings)

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
        self.proc = launch_server(self.config_path, self.log_path, options=self.options, environment=self.environment,
                                  new_session=self.new_session, root=self.root, descriptors_max=self.descriptors_max)  # fmt: skip

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_running(self) -> None:
        """Raises RuntimeError, with the log's tail, if the server was launched and has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")

    def wait_serving(self, wait_s: float = 20.0) -> None:
        """Until the server answers srvr with a Mode line (it is serving clients)."""
        try:
            wait_serving(self.port, lambda: self.proc is None or self.running(), wait_s)
        except RuntimeError:
            self.check_running()  # raises it again with the exit code and the log's tail
            raise
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}:\n{self.log_tail()}") from None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL: no chance to flush or close anything."""
        kill_processes([self.proc])

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not ended within 10 s."""
        stop_processes([self.proc])

    def restart(self) -> None:
        self.kill()
        self.start()

    def four_letter(self, word: str) -> str:
        return four_letter(self.port, word)

    def mode(self) -> str:
        """srvr's Mode (leader, follower, observer, standalone), "not serving", or "down"."""
        return server_mode(self.port)

    def zxid(self) -> int | None:
        """srvr's Zxid, None while the server does not serve or does not answer."""
        return srvr_zxid(self.port)

    def mntr(self) -> dict[str, str]:
        """mntr's figures, keyed ``zk_...`` (raises OSError while the server does not answer)."""
        return mntr(self.port)

    def wait_mode(self, modes: set[str], wait_s: float = 20.0) -> str:
        deadline = time.monotonic() + wait_s
        mode = ""
        while time.monotonic() < deadline:
            mode = self.mode()
            if mode in modes:
                return mode
            time.sleep(0.02)
        raise AssertionError(f"server on {self.port}: mode {mode!r}, expected one of {sorted(modes)}")
