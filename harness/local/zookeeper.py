"""Apache ZooKeeper 3.8 on 127.0.0.1 (Debian's jars, installed by ``scripts/install_zookeeper.sh``
when missing): one JVM (``ZooKeeperProcess``) or an ensemble (``ZooKeeperEnsemble``), for the
differential tests, the fault harness and the benchmarks."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from harness import CHECKOUT
from harness.local.javac import JAVA_DIR
from zabby.client.fourletter import four_letter, server_mode
from zabby.testing.ensembles import Member, server_lines
from zabby.testing.processes import KILL_WAIT_S, free_port, wait_serving, write_config, write_myid

ZK_JAR = JAVA_DIR / "zookeeper.jar"  # Debian's; its manifest's Class-Path names jute, netty, slf4j-api, ...
ZK_LOGGING_JARS = (JAVA_DIR / "slf4j-log4j12.jar", JAVA_DIR / "log4j-1.2.jar")
ZK_INSTALL_SCRIPT = CHECKOUT / "scripts" / "install_zookeeper.sh"
APT_UNAVAILABLE = 3  # install_zookeeper.sh's exit code when apt-get (or root) is not there

# ZooKeeper 3.8 logs to one file in its log dir: the fault harness and the benchmarks read it.
ZOOKEEPER_LOG4J = """\
log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File=${zookeeper.log.dir}/zookeeper.log
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
"""


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
        every = [Member.on_free_ports(sid) for sid in range(1, size + 1)]
        members = server_lines(every, client=False) if size > 1 else {}
        self.servers: dict[int, ZooKeeperProcess] = {}
        for member in every:
            folder = workdir / f"server{member.sid}"
            if size > 1:
                write_myid(folder / "data", member.sid)
            self.servers[member.sid] = ZooKeeperProcess(folder, port=member.client_port, heap=heap, jvm_options=jvm_options,
                                                        properties=properties, members=members, **settings)  # fmt: skip

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
