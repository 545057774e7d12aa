"""N real server processes of zabby or of Apache ZooKeeper 3.8 on 127.0.0.1, every peer link
and every client connection through a proxy of ``harness.local.netproxy``.

Layout: every server's zoo.cfg names every server's real quorum and election ports (one
membership for all, as a reconfig hands out), and server i runs with ``redirect.c``
preloaded: its connect() to server j's quorum or election port goes to the proxy of the
directed link (i -> j) instead (one proxy per directed link and port kind), so each server
reaches each other one only through a link the nemesis controls, before and after any
reconfig.  Spare servers (``spares``, for the reconfig nemesis) have their ports, folders and
links from the start, and run only while they are members.  Clients reach server i through
client proxy i (so their connections can be reset mid-request); the harness's own checks
(four-letter words, per-server reads), and the hostile clients of the ``clients`` family,
go to the real client ports.

Every server runs in its own process group (a zabby server forks to stream snapshots), so
SIGKILL, SIGSTOP and SIGCONT reach all of it.  ``stop()`` kills every group; call it in a
``finally``.  ``atexit`` kills whatever a crashed harness left behind.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.local.netproxy import LinkProxy, ProxyHub
from harness.local.zookeeper import launch_zookeeper, zookeeper_command
from zabby.client.fourletter import mntr, server_mode, srvr_zxid
from zabby.membership import Membership
from zabby.testing.ensembles import Member
from zabby.testing.processes import ServerHandle, launch_server, write_config, write_myid

SERVING_MODES = frozenset({"leader", "follower", "observer"})
FOUR_LETTER_TIMEOUT_S = 2.0
PROCESS_WAIT_S = 10.0
RESTARTS_MAX = 5  # per server and run, for servers that died on their own
ZK_HEAP = "256m"
REDIRECT_SOURCE = Path(__file__).with_name("redirect.c")
REDIRECT_ENV = "ZABBY_JEPSEN_REDIRECT"

TRACEBACK_MARKERS = {
    "zabby": ("Traceback (most recent call last)", " CRITICAL "),
    # Java logs stack traces of ordinary network errors at WARN; only these mean a crash
    "zookeeper": (" FATAL ", "Unexpected exception, exiting abnormally", "java.lang.OutOfMemoryError"),
}
ERROR_MARKER = " ERROR "
# a server whose tree digest differs from its leader's: ZooKeeper's DataTree.compareDigest (its
# first mismatch at ERROR, then rate-limited), zabby's DigestCheck (then it resyncs by SNAP)
DIGEST_MISMATCH = re.compile(r"digest mismatch|Digests are not matching|the tree digest at 0x[0-9a-f]+ is", re.IGNORECASE)
# the line that ends a Python traceback: "[  | ]pkg.module.SomeError: message"
EXCEPTION_LINE = re.compile(r"^[\s|+]*((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)\b(?::.*)?)$")

_live_clusters: "weakref.WeakSet[Cluster]" = weakref.WeakSet()


@atexit.register
def _kill_leftovers() -> None:
    for cluster in list(_live_clusters):
        cluster.stop()


MIXED = "mixed"  # the system of an ensemble of both kinds (``ClusterSpec.kinds``)
SERVER_KINDS = ("zabby", "zookeeper")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    system: str  # "zabby" | "zookeeper" | "mixed"
    servers: int
    workdir: Path
    tick_ms: int = 2000
    init_limit: int = 10
    sync_limit: int = 5
    snap_count: int = 2000  # small, so snapshots (and SNAP syncs) happen during a run
    reconfig: bool = False  # reconfigEnabled=true and skipACL=yes (every session a superuser)
    spares: int = 0  # servers n+1.. that only run while a reconfig made them members
    max_client_cnxns: int = 0  # maxClientCnxns, per client IP (0: no cap); hostile clients' runs set one to flood past
    quorum_auth: bool = False  # zabby: quorum.auth on every peer link, with a secret file in the run's folder
    extended_types: bool = False  # extendedTypesEnabled=true (TTL nodes; zabby's default, not ZooKeeper's)
    reap_interval_ms: int | None = None  # the container/TTL reaper's interval (ZooKeeper: a system property only)
    kinds: tuple[str, ...] = ()  # "mixed": server i's kind is kinds[i - 1]; its zabby servers speak ZooKeeper's peer protocol

    def __post_init__(self) -> None:
        if (self.system == MIXED) != bool(self.kinds) or any(kind not in SERVER_KINDS for kind in self.kinds):
            raise ValueError(f"a mixed ensemble names each server's kind ({' or '.join(SERVER_KINDS)}), and only a mixed one: {self.system} {self.kinds}")
        if self.kinds and (len(self.kinds) != self.servers + self.spares or self.reconfig or self.quorum_auth):
            raise ValueError("a mixed ensemble has one kind per server, no spares, no reconfig and no quorum.auth (ZooKeeper's peer protocol has neither)")

    def kind(self, sid: int) -> str:
        """Server ``sid``'s kind: "zabby" or "zookeeper"."""
        return self.kinds[sid - 1] if self.kinds else self.system


@dataclass(frozen=True, slots=True, kw_only=True)
class Death:
    sid: int
    exit_code: int | None
    time_s: float


class Server:
    """One server: its folder, ports, config, log and process."""

    def __init__(self, spec: ClusterSpec, sid: int) -> None:
        self.spec = spec
        self.sid = sid
        self.kind = spec.kind(sid)
        self.dir = spec.workdir / f"server{sid}"
        self.data_dir = self.dir / "data"
        write_myid(self.data_dir, sid)
        self.member = Member.on_free_ports(sid)
        self.client_port, self.quorum_port, self.election_port = self.member.client_port, self.member.quorum_port, self.member.election_port
        self.config_path = self.dir / "zoo.cfg"
        self.disk_faults_path = self.dir / "disk-faults.json"
        self.proc: ServerHandle | None = None  # a zabby server, or a ZooKeeper JVM
        self.down_by_nemesis = False  # killed on purpose: not a death
        self.paused = False
        self.restarts_after_death = 0
        self.removed = False  # stopped because a reconfig took it out: only a rejoin restarts it
        self.redirect: dict[int, int] = {}  # real peer port -> the port of this server's link proxy
        self.redirect_library: Path | None = None

    @property
    def log_paths(self) -> list[Path]:
        if self.kind == "zabby":
            return [self.dir / "server.log"]
        return [self.dir / "zookeeper.log", self.dir / "stdout.log"]

    def member_spec(self, observer: bool = False, client: bool = False) -> str:
        """This server's ``server.N=`` line (real ports; the redirect library finds the proxies);
        ``client``: with its client address, which ZooKeeper requires in a reconfig's joining."""
        return self.member.line("observer" if observer else "participant", client=client)

    def write_config(self, members: list[str]) -> None:
        """A fresh zoo.cfg whose membership is ``members`` (``server.N=...`` lines); any
        dynamicConfigFile a reconfig made the server write is forgotten."""
        settings: dict[str, object] = {
            "tickTime": self.spec.tick_ms, "initLimit": self.spec.init_limit, "syncLimit": self.spec.sync_limit,
            "dataDir": self.data_dir, "clientPort": self.client_port, "clientPortAddress": "127.0.0.1",
            "maxClientCnxns": self.spec.max_client_cnxns, "snapCount": self.spec.snap_count, "4lw.commands.whitelist": "*",
            "admin.enableServer": "false", "forceSync": "yes",
        }  # fmt: skip
        if self.spec.reconfig:
            settings.update({"reconfigEnabled": "true", "skipACL": "yes"})
        if self.spec.extended_types:
            settings["extendedTypesEnabled"] = "true"
        if self.spec.reap_interval_ms is not None and self.kind == "zabby":
            settings["znode.container.checkIntervalMs"] = self.spec.reap_interval_ms
        if self.spec.system == MIXED and self.kind == "zabby":
            settings["quorum.protocol"] = "zookeeper"
        if self.spec.quorum_auth and self.kind == "zabby":
            secret = self.spec.workdir / "quorum.secret"
            if not secret.exists():
                secret.write_text(os.urandom(24).hex())
            settings.update({"quorum.auth.enabled": "true", "quorum.auth.secretFile": secret})
        write_config(self.config_path, {**settings, **dict(line.split("=", 1) for line in members)})

    def zookeeper_command(self) -> list[str]:
        reaping = {"znode.container.checkIntervalMs": self.spec.reap_interval_ms} if self.spec.reap_interval_ms is not None else {}
        return zookeeper_command(self.dir, self.config_path, heap=ZK_HEAP, jvm_options=("-XX:+UseG1GC", "-Djava.net.preferIPv4Stack=true"),
                                 properties={"zookeeper.admin.enableServer": "false", "zookeeper.jmx.log4j.disable": "true", **reaping})  # fmt: skip

    def launch(self) -> None:
        env = {"ZABBY_DISK_FAULTS": str(self.disk_faults_path), REDIRECT_ENV: ",".join(f"{a}={b}" for a, b in sorted(self.redirect.items()))}
        if self.redirect_library is not None:
            env["LD_PRELOAD"] = " ".join(filter(None, [str(self.redirect_library), os.environ.get("LD_PRELOAD", "")]))
        if self.kind == "zabby":
            self.proc = launch_server(self.config_path, self.dir / "server.log", environment=env, new_session=True, cwd=self.dir)
        else:
            self.proc = launch_zookeeper(self.dir, self.zookeeper_command(), environment=env, cwd=self.dir)
        self.down_by_nemesis = False
        self.paused = False
        self.removed = False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal_group(self, signum: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self) -> None:
        """SIGKILL the whole group and reap the server."""
        if self.proc is None:
            return
        self.signal_group(signal.SIGCONT)  # (a stopped process dies the same, but be plain)
        self.signal_group(signal.SIGKILL)
        try:
            self.proc.wait(PROCESS_WAIT_S)
        except subprocess.TimeoutExpired:
            pass

    def mode(self) -> str:
        """srvr's Mode, "not serving" or "down"."""
        return server_mode(self.client_port, FOUR_LETTER_TIMEOUT_S)

    def srvr_zxid(self) -> int | None:
        return srvr_zxid(self.client_port, FOUR_LETTER_TIMEOUT_S)

    def mntr(self) -> dict[str, str]:
        try:
            return mntr(self.client_port, FOUR_LETTER_TIMEOUT_S)
        except OSError:
            return {}

    def log_findings(self) -> tuple[list[str], int]:
        """(what the crash, traceback and digest mismatch lines say, count of ERROR lines) over
        this server's logs.  A Python traceback is summed up by its exception line, e.g.
        ``InvariantError: ...``."""
        markers = TRACEBACK_MARKERS[self.kind]
        crashes, errors = [], 0
        for path in self.log_paths:
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            in_traceback = False
            for line in lines:
                errors += ERROR_MARKER in line
                if DIGEST_MISMATCH.search(line):
                    crashes.append(f"{path.name}: {line.strip()[:300]}")
                elif any(marker in line for marker in markers):
                    in_traceback = "Traceback" in line
                    if not in_traceback:
                        crashes.append(f"{path.name}: {line.strip()[:300]}")
                elif in_traceback and (found := EXCEPTION_LINE.match(line)):
                    crashes.append(f"{path.name}: {found.group(1)[:300]}")
                    in_traceback = False
        return crashes, errors

    def dynamic_membership(self) -> Membership | None:
        """The membership in this server's files: the dynamicConfigFile its zoo.cfg names (as a
        reconfig rewrites them), or else the zoo.cfg's own server lines; None if unreadable."""
        try:
            text = self.config_path.read_text()
            names = [line.split("=", 1)[1].strip() for line in text.splitlines() if line.startswith("dynamicConfigFile=")]
            if not names:
                return Membership.parse(text)
            path = Path(names[-1]) if Path(names[-1]).is_absolute() else self.dir / names[-1]
            membership = Membership.parse(path.read_text())
            if "version=" not in path.read_text():  # ZooKeeper's file carries it in its name only
                membership = membership.with_version(int(path.name.rsplit(".", 1)[1], 16))
            return membership
        except (OSError, ValueError):  # (MembershipError is a ValueError)
            return None

    def set_slow_disk(self, fsync_delay_ms: int) -> None:
        """The zabby server rereads this file at most every ~100 ms (ZABBY_DISK_FAULTS)."""
        if fsync_delay_ms > 0:
            self.disk_faults_path.write_text(json.dumps({"fsync_delay_ms": fsync_delay_ms}))
        else:
            self.disk_faults_path.unlink(missing_ok=True)




class Cluster:
    """The servers, their peer-link proxies ``links[(i, j)] = (quorum, election)`` and client
    proxies ``client_proxies[i]``."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.hub = ProxyHub()
        _live_clusters.add(self)
        every = {sid: Server(spec, sid) for sid in range(1, spec.servers + spec.spares + 1)}
        self.servers = {sid: every[sid] for sid in range(1, spec.servers + 1)}  # the servers in play (members, or removed ones)
        self.spares = {sid: server for sid, server in every.items() if sid not in self.servers}  # not in play, not running
        self.original = tuple(sorted(self.servers))  # the voters every heal restores
        self.links: dict[tuple[int, int], tuple[LinkProxy, LinkProxy]] = {}
        self.client_proxies: dict[int, LinkProxy] = {}
        self.deaths: list[Death] = []
        self.clock: Callable[[], float] = time.monotonic  # the runner sets its history's clock
        self._lock = threading.RLock()  # the nemesis, the monitor and the runner all change processes
        library = build_redirect()
        members = [server.member_spec() for server in self.servers.values()]
        for sid, server in every.items():
            server.redirect_library = library
            for other, target in every.items():
                if other == sid:
                    continue
                pair = (self.hub.add(target.quorum_port, f"{sid}->{other} quorum"), self.hub.add(target.election_port, f"{sid}->{other} election"))
                self.links[(sid, other)] = pair
                server.redirect[target.quorum_port], server.redirect[target.election_port] = pair[0].port, pair[1].port
            server.write_config(members if sid in self.servers else [*members, server.member_spec()])
            self.client_proxies[sid] = self.hub.add(server.client_port, f"clients->{sid}")

    # -- addresses -----------------------------------------------------------------------------

    @property
    def every(self) -> dict[int, Server]:
        return {**self.servers, **self.spares}

    @property
    def hosts(self) -> str:
        """Every server (spares too), through its client proxy (what the workload's clients use)."""
        return ",".join(f"127.0.0.1:{proxy.port}" for proxy in self.client_proxies.values())

    def direct_hosts(self, sid: int) -> str:
        return f"127.0.0.1:{self.every[sid].client_port}"

    def pids(self) -> dict[int, int]:
        return {sid: s.proc.pid for sid, s in self.every.items() if s.proc is not None and s.alive()}

    def log_paths(self) -> dict[int, list[Path]]:
        return {sid: s.log_paths for sid, s in self.every.items()}

    # -- life cycle ----------------------------------------------------------------------------

    def start(self, wait_s: float = 90.0) -> bool:
        """Launch every server; whether all serve (one leader) within ``wait_s``."""
        for server in self.servers.values():
            server.launch()
        return self.wait_all_serving(wait_s)

    def wait_all_serving(self, wait_s: float) -> bool:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            modes = self.modes()
            if all(mode in SERVING_MODES for mode in modes.values()) and list(modes.values()).count("leader") == 1:
                return True
            if any(s.proc is not None and not s.alive() and not s.down_by_nemesis for s in self.servers.values()):
                break
            time.sleep(0.1)
        return False

    def modes(self) -> dict[int, str]:
        return {sid: server.mode() for sid, server in self.servers.items()}

    def leader(self) -> int | None:
        leaders = [sid for sid, mode in self.modes().items() if mode == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    def kill(self, sid: int) -> None:
        with self._lock:
            self.reap_deaths()  # a server that died before the nemesis came is a death
            server = self.servers[sid]
            server.kill()
            server.down_by_nemesis = True

    def restart(self, sid: int) -> None:
        with self._lock:
            server = self.servers[sid]
            if not server.alive():
                server.launch()

    def pause(self, sid: int) -> None:
        with self._lock:
            self.servers[sid].signal_group(signal.SIGSTOP)
            self.servers[sid].paused = True

    def resume(self, sid: int) -> None:
        with self._lock:
            self.servers[sid].signal_group(signal.SIGCONT)
            self.servers[sid].paused = False

    def remove(self, sid: int) -> None:
        """Stop a server a reconfig took out: no heal restarts it, only ``rejoin``."""
        with self._lock:
            self.kill(sid)
            self.every[sid].removed = True

    def rejoin(self, sid: int, members: list[str]) -> None:
        """(Re)start a server with a zoo.cfg listing ``members`` (the current members plus
        itself, as a joining server is started); a spare comes into play."""
        with self._lock:
            server = self.every[sid]
            server.kill()
            server.write_config(members)
            self.servers[sid] = self.spares.pop(sid, server)
            server.launch()

    def retire(self, sid: int) -> None:
        """A spare that left the membership: stopped and out of play again."""
        with self._lock:
            if sid in self.original:
                return
            self.remove(sid)
            self.spares[sid] = self.servers.pop(sid)

    def reap_deaths(self) -> list[Death]:
        """Servers that exited without the nemesis killing them: record each death once and
        start the server again (a supervisor would), at most RESTARTS_MAX times."""
        found = []
        with self._lock:
            for sid, server in self.every.items():
                if server.proc is None or server.alive() or server.down_by_nemesis:
                    continue
                death = Death(sid=sid, exit_code=server.proc.returncode, time_s=self.clock())
                found.append(death)
                self.deaths.append(death)
                server.down_by_nemesis = True  # recorded: not again until it runs again
                if server.restarts_after_death < RESTARTS_MAX:
                    server.restarts_after_death += 1
                    server.launch()
        return found

    def heal(self) -> None:
        """Every link passes, every server runs (stopped ones continue, killed ones restart),
        no disk is slow."""
        self.hub.heal_all()
        with self._lock:
            for sid, server in self.servers.items():
                server.set_slow_disk(0)
                if server.paused:
                    self.resume(sid)
                if server.down_by_nemesis and not server.removed and not server.alive():
                    server.launch()

    def stop(self) -> None:
        """Kill every server and close every proxy.  Bounded; safe to call twice."""
        with self._lock:
            for server in self.every.values():
                try:
                    server.kill()
                except Exception:  # noqa: BLE001 - stop the others all the same
                    pass
                server.down_by_nemesis = True  # stopped on purpose: a later heal must not relaunch
        self.hub.close()
        _live_clusters.discard(self)


def build_redirect() -> Path:
    """``redirect.c`` compiled once per source version (cached in the temp dir)."""
    digest = hashlib.sha256(REDIRECT_SOURCE.read_bytes()).hexdigest()[:16]
    library = Path(tempfile.gettempdir()) / f"zabby-jepsen-redirect-{digest}.so"
    if not library.exists():
        partial = library.with_name(f"{library.name}.{os.getpid()}")
        subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(partial), str(REDIRECT_SOURCE), "-ldl"], check=True, capture_output=True, timeout=60)
        os.replace(partial, library)
    return library
