"""Real zabby server processes on 127.0.0.1: for the process-level tests, the scripts
(benchmarks, the differential run, the backup drill, ``scripts/ensemble.py``) and the demo's
``zabby.spark.local_ensemble``.

The one place for what running a local server takes: its zoo.cfg and myid
(``write_config``, ``write_myid``, ``local_settings``, ``server_spec``), its launch
(``launch_server``), waiting until it serves (``wait_serving``; the srvr probes are in
``zabby.local``) and its stop (``stop_pids``, ``stop_processes``, ``kill_pids``,
``kill_processes``: SIGTERM, a wait, SIGKILL; a zombie counts as ended).

Every process a test starts is stopped by the fixture that started it; ports are picked free
below the kernel's ephemeral range (see ``free_port``).  The servers run the code of the
checkout this package is in (``CHECKOUT``).  ``ServerProcess`` reserves 1 MB of log ahead
instead of ZooKeeper's 64 MB (``preAllocSize``; a test run starts hundreds of them).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from zabby.local import CHECKOUT, ZOOKEEPER_LOG4J, four_letter, free_port, mntr, process_alive, server_mode, srvr_zxid
from zabby.local.javac import JAVA_DIR
from zabby.local.netproxy import LinkProxy, Mode, ProxyHub
from zabby.tree.acl import digest

__all__ = [
    "Ensemble", "ServerProcess", "ZooKeeperEnsemble", "ZooKeeperProcess", "ZooKeeperUnavailable", "ensure_zookeeper", "kill_pids",
    "kill_processes", "launch_server", "launch_zookeeper", "local_settings", "server_spec", "started_ensemble", "stop_pids",
    "stop_processes", "wait_serving", "wait_until", "write_config", "write_myid", "zookeeper_command",
]  # fmt: skip

QUORUM_LIMITS = {"initLimit": 10, "syncLimit": 5}  # in ticks, in every ensemble's zoo.cfg
SERVING_MODES = ("leader", "follower", "observer", "standalone")  # read-only is not counted
LEADING_MODES = ("leader", "standalone")
KILL_WAIT_S = 10.0  # how long a SIGKILLed process may take to end
ZK_JAR = JAVA_DIR / "zookeeper.jar"  # Debian's; its manifest's Class-Path names jute, netty, slf4j-api, ...
ZK_LOGGING_JARS = (JAVA_DIR / "slf4j-log4j12.jar", JAVA_DIR / "log4j-1.2.jar")
ZK_INSTALL_SCRIPT = CHECKOUT / "scripts" / "install_zookeeper.sh"
APT_UNAVAILABLE = 3  # install_zookeeper.sh's exit code when apt-get (or root) is not there


def poll_until(predicate: Callable[[], object], timeout_s: float, interval_s: float = 0.01) -> bool:
    """Whether ``predicate`` turned true within ``timeout_s`` (checked every ``interval_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())


def wait_until(predicate: Callable[[], object], timeout_s: float = 10.0, what: str = "condition") -> None:
    """Bounded polling: fail the test if ``predicate`` is not true within ``timeout_s``."""
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


LOCAL_ADMIN = ("admin", "zabby-local")  # the administrator of the servers these tools start on this host


def admin_settings() -> dict[str, Any]:
    """zoo.cfg settings that make ``LOCAL_ADMIN`` the administrator (admin.console.auth): the
    admin words, the snapshot stream and the console's session pages ask for it."""
    return {"admin.console.auth": digest(*LOCAL_ADMIN)}


def admin_json(admin_port: int, command: str, credentials: tuple[str, str] = LOCAL_ADMIN, method: str = "GET") -> Any:
    """``/commands/<command>`` of a server on this host, as the administrator."""
    token = base64.b64encode(":".join(credentials).encode()).decode("ascii")
    request = urllib.request.Request(f"http://127.0.0.1:{admin_port}/commands/{command}", method=method,
                                     headers={"Authorization": f"Basic {token}"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


def digest_at(admin_port: int, zxid: int) -> int | None:
    """The server's tree digest right after ``zxid`` (``/commands/hash``), if still listed."""
    digests = admin_json(admin_port, "hash")["digests"]
    return next((entry["digest"] for entry in digests if entry["zxid"] == zxid), None)


def server_spec(quorum: int, election: int, client: int, role: str = "") -> str:
    """The value of a ``server.N=`` line for a server on 127.0.0.1 (``role``: observer,
    participant or none)."""
    return f"127.0.0.1:{quorum}:{election}{':' + role if role else ''};127.0.0.1:{client}"


def write_config(path: Path, settings: Mapping[str, object]) -> Path:
    """``path`` (a zoo.cfg) with one ``key=value`` line per setting."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


def write_myid(data_dir: Path, sid: int) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "myid").write_text(f"{sid}\n")


# --- launch, wait, stop ---------------------------------------------------------------------


def launch_server(
    config: Path, log_path: Path, *, options: Iterable[str] = (), environment: Mapping[str, str] | None = None,
    new_session: bool = False, root: Path = CHECKOUT, cwd: Path | None = None, descriptors_max: int | None = None,
) -> subprocess.Popen[bytes]:  # fmt: skip
    """``python -m zabby.server.main [options] config`` with the checkout ``root`` first on its
    path (so it runs that checkout's code, not whatever one the interpreter has installed), run
    from ``cwd`` (default ``root``), its output appended to ``log_path``; ``environment`` is
    added to ours last.  With ``new_session`` in a session of its own (a Ctrl-C in the terminal
    does not reach it; it may outlive its parent; ``os.killpg`` reaches all of it).  With
    ``descriptors_max``, its RLIMIT_NOFILE (soft and hard) is that."""
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH", "")]))
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "zabby.server.main", *options, str(config)], stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, cwd=cwd or root, env={**os.environ, "PYTHONPATH": path, **(environment or {})},
            start_new_session=new_session, preexec_fn=None if descriptors_max is None else functools.partial(_limit_descriptors, descriptors_max),
        )  # fmt: skip


def _limit_descriptors(count: int) -> None:
    """In the child, before exec: at most ``count`` open files."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))


def zookeeper_command(
    folder: Path, config: Path, *, heap: str = "256m", jvm_options: Iterable[str] = ("-XX:+UseG1GC",),
    properties: Mapping[str, object] | None = None,
) -> list[str]:  # fmt: skip
    """``java ... QuorumPeerMain config`` for Debian's ZooKeeper 3.8 jars, logging to
    ``folder``/zookeeper.log (``folder``/log4j.properties, see ``ZOOKEEPER_LOG4J``);
    ``properties`` become ``-Dkey=value`` options (settings ZooKeeper reads only so)."""
    classpath = ":".join(str(entry) for entry in (folder, ZK_JAR, *ZK_LOGGING_JARS))
    return [
        "java", f"-Xmx{heap}", *jvm_options, f"-Dzookeeper.log.dir={folder}", f"-Dlog4j.configuration=file:{folder / 'log4j.properties'}",
        *(f"-D{key}={value}" for key, value in (properties or {}).items()),
        "-cp", classpath, "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config),
    ]  # fmt: skip


def launch_zookeeper(folder: Path, command: list[str], *, environment: Mapping[str, str] | None = None,
                     cwd: Path | None = None) -> subprocess.Popen[bytes]:  # fmt: skip
    """Run ``command`` (``zookeeper_command``) in a session of its own (``os.killpg`` reaches
    the whole JVM), its output appended to ``folder``/stdout.log; the log4j.properties it reads
    written first."""
    (folder / "log4j.properties").write_text(ZOOKEEPER_LOG4J)
    with open(folder / "stdout.log", "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd,
                                env={**os.environ, **(environment or {})}, start_new_session=True)  # fmt: skip


class ZooKeeperUnavailable(RuntimeError):
    """Debian's zookeeper package or java is missing and cannot be installed here."""


def ensure_zookeeper() -> None:
    """Install Debian's zookeeper package when its jar is missing; raise ZooKeeperUnavailable
    when that cannot be done on this machine (no apt-get, no root), RuntimeError when the
    install failed."""
    if ZK_JAR.exists() and shutil.which("java"):
        return
    try:
        done = subprocess.run(["bash", str(ZK_INSTALL_SCRIPT)], capture_output=True, text=True, timeout=900, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError("scripts/install_zookeeper.sh did not finish in 15 minutes") from exc
    if done.returncode == APT_UNAVAILABLE:
        raise ZooKeeperUnavailable(done.stderr.strip())
    if done.returncode != 0 or not ZK_JAR.exists():
        raise RuntimeError(f"scripts/install_zookeeper.sh failed: {done.stderr.strip()[-500:]}")
    if not shutil.which("java"):
        raise ZooKeeperUnavailable("no java on PATH")


def zookeeper_unavailable() -> str | None:
    """None when ZooKeeper 3.8 can run here (installed now if need be), else why not: a
    script's exit 2."""
    try:
        ensure_zookeeper()
    except ZooKeeperUnavailable as exc:
        return str(exc)
    return None


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
        time.sleep(0.05)
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


def _unreaped(procs: Iterable[subprocess.Popen[bytes] | None]) -> list[subprocess.Popen[bytes]]:
    """The children not yet reaped: their pids are still theirs, safe to signal."""
    return [proc for proc in procs if proc is not None and proc.poll() is None]


def stop_processes(procs: Iterable[subprocess.Popen[bytes] | None], grace_s: float = 10.0) -> None:
    """``stop_pids`` for child processes, all at once, then reap them."""
    children = _unreaped(procs)
    stop_pids([proc.pid for proc in children], grace_s)
    for proc in children:
        proc.wait(KILL_WAIT_S)


def kill_processes(procs: Iterable[subprocess.Popen[bytes] | None]) -> None:
    """``kill_pids`` for child processes, all at once, then reap them."""
    children = _unreaped(procs)
    kill_pids([proc.pid for proc in children])
    for proc in children:
        proc.wait(KILL_WAIT_S)


class ServerProcess:
    """One server: its config file, data dir and process."""

    def __init__(self, workdir: Path, *, port: int | None = None, **overrides: object) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.admin_port = free_port()
        self.data_dir = workdir / "data"
        self.log_path = workdir / "server.log"
        settings = {
            **local_settings(self.data_dir, self.port, self.admin_port, tick_ms=200),
            "preAllocSize": 1024,  # KB: a test run starts hundreds of servers; 64 MB each filled CI's disk
            **overrides,
        }
        self.config_path = write_config(workdir / "zoo.cfg", settings)
        self.proc: subprocess.Popen[bytes] | None = None
        self.environment: dict[str, str] = {}  # added to the server's environment at launch
        self.options: list[str] = []  # zabby-server options before the config file (e.g. --log-format json)
        self.new_session = False  # launch it in a session of its own (see launch_server)
        self.root = CHECKOUT  # the checkout whose code it runs (see launch_server)
        self.descriptors_max: int | None = None  # its RLIMIT_NOFILE (see launch_server); None: ours

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
        """mntr's ``key<TAB>value`` lines (raises OSError while the server does not answer)."""
        return mntr(self.port)

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

    def __init__(self, workdir: Path, size: int, *, observers: int = 0, proxied: bool = False,
                 client_ports: Mapping[int, int] | None = None, **overrides: object) -> None:  # fmt: skip
        """With ``proxied``, server j reaches server i through ``self.proxies[(j, i)]`` (quorum and
        election port each), so a test can cut any directed link.  ``client_ports``: server id
        -> its client port (others' are free ones): servers that take over another ensemble's."""
        self.servers: dict[int, ServerProcess] = {}
        self.proxies: dict[tuple[int, int], tuple[LinkProxy, LinkProxy]] = {}
        self.hub = ProxyHub() if proxied else None
        self.workdir = workdir
        self.overrides = overrides
        total = size + observers
        ports = {sid: (free_port(), free_port()) for sid in range(1, total + 1)}
        clients = {sid: (client_ports or {}).get(sid) or free_port() for sid in ports}  # in the server lines: the web console asks each server
        self.ports = {sid: (q, e, clients[sid]) for sid, (q, e) in ports.items()}  # each server's own (unproxied) ports
        role = {sid: "observer" if sid > size else "" for sid in ports}
        for sid in range(1, total + 1):
            lines = {}
            for other, (q, e) in ports.items():
                if self.hub is not None and other != sid:
                    pair = self.proxies[(sid, other)] = (self.hub.add(q, port=free_port()), self.hub.add(e, port=free_port()))
                    q, e = pair[0].port, pair[1].port
                lines[f"server.{other}"] = server_spec(q, e, clients[other], role[other])
            folder = workdir / f"server{sid}"
            write_myid(folder / "data", sid)
            self.servers[sid] = ServerProcess(folder, port=clients[sid], **{**QUORUM_LIMITS, **lines, **overrides})

    def spec(self, sid: int, observer: bool = False) -> str:
        """Server ``sid``'s line of a dynamic configuration (its own ports, never a proxy's)."""
        return f"server.{sid}={server_spec(*self.ports[sid], 'observer' if observer else 'participant')}"

    def new_server(self, sid: int, members: set[int]) -> ServerProcess:
        """A server that is to join: its config lists ``members`` and itself (as ZooKeeper's
        joining servers do; it syncs without voting until a reconfig adds it).  Not started."""
        self.ports[sid] = (free_port(), free_port(), free_port())
        folder = self.workdir / f"server{sid}"
        write_myid(folder / "data", sid)
        lines = dict(self.spec(other).split("=", 1) for other in sorted(members | {sid}))
        server = self.servers[sid] = ServerProcess(folder, port=self.ports[sid][2], **{**QUORUM_LIMITS, **lines, **self.overrides})
        return server

    def links_across(self, group: set[int]) -> list[LinkProxy]:
        """The proxies of every link between ``group`` and the other servers, both ways."""
        return [proxy for (source, target), pair in self.proxies.items() if (source in group) != (target in group) for proxy in pair]

    def partition(self, group: set[int], cut: bool = True) -> None:
        """Cut (or heal) every link between ``group`` and the other servers, both ways."""
        for proxy in self.links_across(group):
            if cut:
                proxy.set_mode(Mode.CUT)
            else:
                proxy.heal()

    def blackhole(self, group: set[int], on: bool = True) -> None:
        """Stop (or restart) every byte on the links between ``group`` and the others, both
        ways, keeping the connections up: the servers notice only by their timeouts.  Turning
        it off closes the connections it stalled: the servers connect again."""
        for proxy in self.links_across(group):
            if on:
                proxy.set_mode(Mode.BLACKHOLE)
            else:
                proxy.set_mode(Mode.CUT)
                proxy.heal()

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

    def leader(self, modes: dict[int, str] | None = None) -> int | None:
        """The one server leading (or standalone), if there is exactly one."""
        leaders = [sid for sid, mode in (modes or self.modes()).items() if mode in LEADING_MODES]
        return leaders[0] if len(leaders) == 1 else None

    def wait_leader(self, wait_s: float = 30.0, excluding: int | None = None, everyone: bool = False) -> int:
        """Until a leader (not ``excluding``) is elected and a majority serves; with ``everyone``,
        until every server serves (one that exited fails the wait at once)."""
        deadline = time.monotonic() + wait_s
        needed = len(self.servers) if everyone else len(self.servers) // 2 + 1
        while time.monotonic() < deadline:
            for server in self.servers.values() if everyone else ():
                server.check_running()
            modes = self.modes()
            sid = self.leader(modes)
            if sid is not None and sid != excluding and sum(m in SERVING_MODES for m in modes.values()) >= needed:
                return sid
            time.sleep(0.05)
        raise TimeoutError(f"no leader after {wait_s}s: {self.modes()}")

    def stop_all(self) -> None:
        """SIGTERM every server at once, SIGKILL those not ended within 10 s."""
        stop_processes(server.proc for server in self.servers.values())
        self.close_proxies()

    def kill_all(self) -> None:
        kill_processes(server.proc for server in self.servers.values())
        self.close_proxies()

    def close_proxies(self) -> None:
        if self.hub is not None:
            self.hub.close()


ZOOKEEPER, ZABBY, ZABBY_NATIVE = "zookeeper", "zabby", "zabby-native"


class MixedEnsemble(Ensemble):
    """ZooKeeper 3.8 servers and zabby servers in one ensemble, on 127.0.0.1: ``kinds`` maps
    each server id to ``"zookeeper"``, ``"zabby"`` (speaking ZooKeeper's peer protocol:
    ``quorum.protocol=zookeeper``) or ``"zabby-native"`` (zabby's own, as an ensemble of zabby
    servers switches to); ``observers``: the ids that observe.  Every kind has the same zoo.cfg
    server lines, tickTime, initLimit and syncLimit (``zk_settings`` and ``zk_properties`` go to
    the ZooKeeper servers only, ``overrides`` to the zabby ones)."""

    def __init__(self, workdir: Path, kinds: Mapping[int, str], *, observers: Iterable[int] = (), tick_ms: int = 200,
                 zk_settings: Mapping[str, object] | None = None, zk_properties: Mapping[str, object] | None = None,
                 **overrides: object) -> None:  # fmt: skip
        self.servers: dict[int, ServerProcess | ZooKeeperProcess] = {}  # type: ignore[assignment]
        self.proxies = {}
        self.hub = None
        self.workdir = workdir
        self.overrides = overrides
        self.kinds = dict(kinds)
        self.ports = {sid: (free_port(), free_port(), free_port()) for sid in sorted(kinds)}
        watching = set(observers)
        lines = {f"server.{sid}": f"127.0.0.1:{q}:{e}" + (":observer" if sid in watching else "") for sid, (q, e, _) in self.ports.items()}
        self.common = {"tickTime": tick_ms, **QUORUM_LIMITS, **lines}
        self.zk_settings = dict(zk_settings or {})
        self.zk_properties = dict(zk_properties or {})  # -D options of the ZooKeeper JVMs
        for sid, kind in self.kinds.items():
            folder = workdir / f"server{sid}"
            write_myid(folder / "data", sid)
            self.servers[sid] = self._server(folder, kind, sid)

    def _server(self, folder: Path, kind: str, sid: int) -> ServerProcess | ZooKeeperProcess:
        client = self.ports[sid][2]
        if kind == ZOOKEEPER:
            settings: dict[str, Any] = {"4lw.commands.whitelist": "*", "admin.enableServer": "false", **self.common, **self.zk_settings}
            return ZooKeeperProcess(folder, port=client, properties=self.zk_properties, **settings)
        if kind not in (ZABBY, ZABBY_NATIVE):
            raise ValueError(f"server {sid}: kind {kind!r} is none of {ZOOKEEPER!r}, {ZABBY!r}, {ZABBY_NATIVE!r}")
        protocol = {"quorum.protocol": "zookeeper"} if kind == ZABBY else {}
        return ServerProcess(folder, port=client, **{**self.common, **protocol, **self.overrides})

    def replace(self, sid: int, kind: str) -> tuple[ServerProcess | ZooKeeperProcess, Path]:
        """Server ``sid`` as another kind (not started): same id, ports and server lines, in a
        fresh folder holding only its myid; its old folder kept aside as ``server<sid>.<n>``
        (returned, with the new server): the caller moves its data."""
        folder = self.workdir / f"server{sid}"
        aside = 1
        while folder.with_name(f"server{sid}.{aside}").exists():
            aside += 1
        old = folder.rename(folder.with_name(f"server{sid}.{aside}"))
        write_myid(folder / "data", sid)
        self.kinds[sid] = kind
        server = self.servers[sid] = self._server(folder, kind, sid)
        return server, old

    def switch_protocol(self, sid: int, kind: str) -> ServerProcess:
        """Zabby server ``sid`` (not running) on the other peer protocol: ``kind`` ZABBY for
        ZooKeeper's, ZABBY_NATIVE for zabby's own; its folder and data kept."""
        if self.kinds[sid] not in (ZABBY, ZABBY_NATIVE) or kind not in (ZABBY, ZABBY_NATIVE):
            raise ValueError(f"server {sid} is {self.kinds[sid]}: only a zabby server switches between {ZABBY!r} and {ZABBY_NATIVE!r}, not to {kind!r}")
        self.kinds[sid] = kind
        server = self.servers[sid] = self._server(self.workdir / f"server{sid}", kind, sid)
        assert isinstance(server, ServerProcess)
        return server


@contextlib.contextmanager
def started_ensemble(folder: Path, size: int, **settings: Any) -> Iterator[Ensemble]:
    """``size`` servers with a leader elected; every process killed afterwards."""
    group = Ensemble(folder, size, **settings)
    group.start()
    try:
        group.wait_leader()
        yield group
    finally:
        group.kill_all()


class ZooKeeperProcess:
    """One Apache ZooKeeper 3.8 JVM (Debian's jars; ``ensure_zookeeper``) in its own folder and
    process group: its zoo.cfg (``settings``, then its own dataDir and client port, then the
    ``members`` lines), log4j.properties, zookeeper.log and stdout.log."""

    def __init__(
        self, workdir: Path, *, port: int | None = None, heap: str = "256m", jvm_options: Iterable[str] = ("-XX:+UseG1GC",),
        properties: Mapping[str, object] | None = None, members: Mapping[str, str] | None = None, **settings: object,
    ) -> None:  # fmt: skip
        self.workdir = workdir
        self.port = port or free_port()
        self.data_dir = workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "zookeeper.log"
        own = {"dataDir": self.data_dir, "clientPort": self.port, "clientPortAddress": "127.0.0.1"}
        self.config_path = write_config(workdir / "zoo.cfg", {**settings, **own, **(members or {})})
        self.command = zookeeper_command(workdir, self.config_path, heap=heap, jvm_options=jvm_options, properties=properties)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def launch(self) -> None:
        self.proc = launch_zookeeper(self.workdir, self.command)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_running(self) -> None:
        """Raises RuntimeError, with the log's tail, if the JVM was launched and has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"zookeeper on {self.port} exited with {self.proc.returncode}:\n{self.log_tail()}")

    def start(self, wait_s: float = 90.0) -> None:
        self.launch()
        self.wait_serving(wait_s)

    def wait_serving(self, wait_s: float = 90.0) -> None:
        """Until the server answers srvr with a Mode line; killed if it does not in ``wait_s``.

        Raises:
            RuntimeError: it exited first (the message has its log's tail).
            TimeoutError: not serving within ``wait_s``.
        """
        try:
            wait_serving(self.port, self.running, wait_s)
        except RuntimeError:
            code = self.proc.returncode if self.proc is not None else None
            raise RuntimeError(f"zookeeper on {self.port} exited with {code}:\n{self.log_tail()}") from None
        except TimeoutError as exc:
            self.kill()
            raise TimeoutError(f"{exc}:\n{self.log_tail()}") from None

    def kill(self) -> None:
        """SIGKILL the JVM's whole process group and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(KILL_WAIT_S)

    def log_tail(self, lines: int = 20) -> str:
        parts = []
        for path in (self.log_path, self.workdir / "stdout.log"):
            try:
                parts.append("\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
            except OSError:
                continue
        return "\n".join(parts)

    def four_letter(self, word: str) -> str:
        return four_letter(self.port, word)

    def mode(self) -> str:
        return server_mode(self.port)


class ZooKeeperEnsemble:
    """N ZooKeeper JVMs on 127.0.0.1 (one: standalone), each in its own folder with a myid and a
    ``server.N=127.0.0.1:quorum:election`` line per server; ``settings`` go to every zoo.cfg."""

    def __init__(self, workdir: Path, size: int, *, heap: str = "256m", jvm_options: Iterable[str] = ("-XX:+UseG1GC",),
                 properties: Mapping[str, object] | None = None, **settings: object) -> None:  # fmt: skip
        clients = {sid: free_port() for sid in range(1, size + 1)}
        quorum = {sid: (free_port(), free_port()) for sid in clients}
        members = {f"server.{sid}": f"127.0.0.1:{q}:{e}" for sid, (q, e) in quorum.items()} if size > 1 else {}
        self.servers: dict[int, ZooKeeperProcess] = {}
        for sid, port in clients.items():
            folder = workdir / f"server{sid}"
            if size > 1:
                write_myid(folder / "data", sid)
            self.servers[sid] = ZooKeeperProcess(folder, port=port, heap=heap, jvm_options=jvm_options, properties=properties,
                                                 members=members, **settings)  # fmt: skip

    @property
    def hosts(self) -> str:
        return ",".join(s.hosts for s in self.servers.values())

    def start(self, wait_s: float = 60.0) -> None:
        """Launch every server, then wait until each serves (``wait_s`` for all of them)."""
        for server in self.servers.values():
            server.launch()
        deadline = time.monotonic() + wait_s
        for server in self.servers.values():
            server.wait_serving(max(deadline - time.monotonic(), 0.1))

    def kill_all(self) -> None:
        for server in self.servers.values():
            with contextlib.suppress(Exception):
                server.kill()
