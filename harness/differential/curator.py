"""Apache Curator's recipes (Debian's ``libcurator-*-java`` 5.4) as a compatibility suite:
``curator/CuratorSuite.java`` runs each recipe with real checks and prints one JSON line per
scenario; this module installs and compiles it, starts the servers (ZooKeeper 3.8 or zabby,
standalone or 3 servers), runs it, kills a server halfway through every scenario of a
3-server layout, and judges what the clients saw.

A client's SUSPENDED or LOST has a cause when the server it was connected to was killed
before it, or the leader was (every follower then drops its clients until a new leader is
elected), or the scenario brought it about itself (``planned``: the PersistentNode scenario
closes its owner's session); a leadership loss has a cause when its client had such a
SUSPENDED or LOST just before.  Anything else is a failure, as is a check the scenario made.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.differential.servers import REAP_INTERVAL_MS, zabby_server, zookeeper_server
from harness.jepsen.cluster import Cluster, ClusterSpec
from harness import CHECKOUT
from harness.local.javac import JAVA_DIR, classpath, compile_java
from harness.local.zookeeper import ensure_zookeeper

SOURCE = Path(__file__).with_name("CuratorSuite.java")
INSTALL_SCRIPT = CHECKOUT / "scripts" / "install_curator.sh"
APT_UNAVAILABLE = 3
JARS = [JAVA_DIR / name for name in ("curator-recipes.jar", "curator-framework.jar", "curator-client.jar", "guava.jar",
                                      "slf4j-api.jar", "zookeeper.jar", "zookeeper-jute.jar")]  # fmt: skip
LOGGER = JAVA_DIR / "slf4j-simple.jar"  # warnings and errors to the client's log file

SCENARIOS = ("leader_latch", "leader_selector", "mutex", "semaphore", "rw_lock", "curator_cache", "tree_cache", "path_children_cache",
             "node_cache", "atomic_long", "queue", "persistent_node", "persistent_ttl_node", "shared_count", "transaction", "hold")  # fmt: skip
SYSTEMS = ("zookeeper", "zabby")
LAYOUTS = ("standalone", "3 servers, follower killed", "3 servers, leader killed")
DISCONNECTED = ("SUSPENDED", "LOST")
LOSS_SLACK_MS = 1000  # a leadership loss this long after its client's SUSPENDED is that SUSPENDED's


class CuratorUnavailable(RuntimeError):
    """Curator, ZooKeeper's jars or java cannot be installed here (no apt-get, no root)."""


def ensure_curator() -> None:
    """Install Debian's ZooKeeper and Curator packages when missing."""
    ensure_zookeeper()  # raises ZooKeeperUnavailable (a skip) the same way
    if all(jar.exists() for jar in [*JARS, LOGGER]) and shutil.which("javac"):
        return
    done = subprocess.run(["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=900, check=False)
    if done.returncode == APT_UNAVAILABLE:
        raise CuratorUnavailable(done.stderr.strip())
    missing = [str(jar) for jar in [*JARS, LOGGER] if not jar.exists()]
    if done.returncode != 0 or missing:
        raise RuntimeError(f"scripts/install_curator.sh failed ({missing or 'exit ' + str(done.returncode)}): {done.stderr.strip()[-500:]}")
    if not shutil.which("javac"):
        raise CuratorUnavailable("no javac on PATH (apt-get install default-jdk-headless)")


def build() -> Path:
    return compile_java("curator-suite", [SOURCE], JARS)


@dataclass(slots=True)
class Kill:
    sid: int
    port: str
    role: str
    t_ms: int


@dataclass(slots=True)
class Outcome:
    """One scenario on one system and layout, judged."""

    scenario: str
    raw: dict[str, Any]
    kills: list[Kill] = field(default_factory=list)
    uncaused_states: list[dict[str, Any]] = field(default_factory=list)
    uncaused_losses: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.raw.get("passed")) and not self.uncaused_states and not self.uncaused_losses and not self.unexplained_errors

    @property
    def suspended(self) -> int:
        return sum(1 for e in self.raw.get("states", []) if e["state"] == "SUSPENDED")

    @property
    def lost(self) -> int:
        return sum(1 for e in self.raw.get("states", []) if e["state"] == "LOST")

    @property
    def losses(self) -> int:
        return len(self.raw.get("leadership_losses", []))

    @property
    def unexplained_errors(self) -> list[str]:
        """Curator's unhandled errors ("Background retry gave up", ...) in a scenario no kill disturbed."""
        return [] if self.kills else list(self.raw.get("errors", []))

    def cell(self) -> str:
        mark = "pass" if self.passed else "FAIL"
        return f"{mark} S{self.suspended} L{self.losses}" + (f" lost{self.lost}" if self.lost else "")

    def problems(self) -> list[str]:
        found = [f"check: {text}" for text in self.raw.get("failures", [])]
        found += [f"SUSPENDED/LOST without a cause: {e}" for e in self.uncaused_states]
        found += [f"leadership lost without a cause: {e}" for e in self.uncaused_losses]
        found += [f"unhandled error: {text}" for text in self.unexplained_errors]
        return found


def judge(raw: dict[str, Any], kills: list[Kill]) -> Outcome:
    """The causes of the scenario's SUSPENDED/LOST states and leadership losses (see the module's
    docstring)."""
    outcome = Outcome(raw["scenario"], raw, kills)
    caused: dict[str, list[int]] = {}
    for event in raw.get("states", []):
        if event["state"] not in DISCONNECTED:
            continue
        cause = event.get("planned") or next((f"server {k.sid} ({k.role}) killed" for k in kills
                                              if k.t_ms <= event["t"] and (k.port == event["server"] or k.role == "leader")), None)  # fmt: skip
        event["cause"] = cause
        if cause is None:
            outcome.uncaused_states.append(event)
        else:
            caused.setdefault(event["client"], []).append(event["t"])
    for loss in raw.get("leadership_losses", []):
        if loss.get("planned") or any(t <= loss["t"] + LOSS_SLACK_MS for t in caused.get(loss["client"], [])):
            continue
        outcome.uncaused_losses.append(loss)
    return outcome


def run_suite(build_dir: Path, connect: str, scenarios: Iterable[str], *, seconds: int = 3, hold_s: int = 60, reap_ms: int = REAP_INTERVAL_MS,
              on_event: Callable[[dict[str, Any]], str | None] | None = None, plant: bool = False, log: Path | None = None,
              timeout_s: float = 1800.0) -> list[dict[str, Any]]:  # fmt: skip
    """CuratorSuite's result lines for ``scenarios`` on ``connect``; with ``on_event``, it is
    called at each scenario's start, midpoint and step (and the suite waits for it, then reads
    its answer: ``go`` if it returns None; the rolling scenario's steps end at ``end``)."""
    argv = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dorg.slf4j.simpleLogger.showDateTime=true", "-cp", classpath(build_dir, *JARS, LOGGER), "CuratorSuite", connect,
            ",".join(scenarios), f"--seconds={seconds}", f"--hold={hold_s}", f"--reap-ms={reap_ms}"]  # fmt: skip
    if on_event is not None:
        argv.append("--midpoint")
    if plant:
        argv.append("--plant")
    stderr = open(log, "ab") if log is not None else subprocess.DEVNULL
    results: list[dict[str, Any]] = []
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True)
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        try:
            assert proc.stdout is not None and proc.stdin is not None
            for line in proc.stdout:
                if not line.startswith("{"):
                    continue
                record = json.loads(line)
                if "event" in record:
                    answer = on_event(record) if on_event is not None else None
                    proc.stdin.write(f"{answer or 'go'}\n")
                    proc.stdin.flush()
                else:
                    results.append(record)
            proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        if not isinstance(stderr, int):
            stderr.close()
    return results


def standalone(system: str, workdir: Path, build_dir: Path, scenarios: Iterable[str], **options: Any) -> list[Outcome]:
    """The suite on one standalone server of ``system``; no server is killed."""
    server = zookeeper_server(workdir / "server") if system == "zookeeper" else zabby_server(workdir / "server")
    try:
        if system == "zookeeper":
            server.start()
        else:
            server.start(60)
        raw = run_suite(build_dir, server.hosts, scenarios, log=workdir / "client.log", **options)
    finally:
        server.kill()
    return [judge(record, []) for record in raw]


def ensemble(system: str, workdir: Path, build_dir: Path, scenarios: Iterable[str], kill_role: str, **options: Any) -> list[Outcome]:
    """The suite on 3 servers of ``system``; halfway through each scenario the leader or a
    follower (``kill_role``) is SIGKILLed, and restarted before the next scenario starts."""
    cluster = Cluster(ClusterSpec(system=system, servers=3, workdir=workdir, extended_types=True, reap_interval_ms=REAP_INTERVAL_MS))
    kills: dict[str, list[Kill]] = {}
    down: list[int] = []

    def on_event(event: dict[str, Any]) -> None:
        if event["event"] == "start":
            for sid in down:
                cluster.restart(sid)
            down.clear()
            if not cluster.wait_all_serving(90):
                raise RuntimeError(f"{system}: the ensemble did not recover: {cluster.modes()}")
            return
        leader = cluster.leader()
        modes = cluster.modes()
        if kill_role == "leader" and leader is not None:
            sid = leader
        else:
            sid = min(s for s, mode in modes.items() if mode == "follower")
        role = modes[sid]
        kills.setdefault(event["scenario"], []).append(Kill(sid, str(cluster.every[sid].client_port), role, int(time.time() * 1000)))
        cluster.kill(sid)
        down.append(sid)

    try:
        if not cluster.start(120):
            raise RuntimeError(f"{system}: 3 servers did not start: {cluster.modes()}")
        connect = ",".join(cluster.direct_hosts(sid) for sid in sorted(cluster.servers))
        raw = run_suite(build_dir, connect, scenarios, on_event=on_event, log=workdir / "client.log", **options)
    finally:
        cluster.stop()
    return [judge(record, kills.get(record["scenario"], [])) for record in raw]


def run_layout(system: str, layout: str, workdir: Path, build_dir: Path, scenarios: Iterable[str], **options: Any) -> list[Outcome]:
    workdir.mkdir(parents=True, exist_ok=True)
    if layout == "standalone":
        return standalone(system, workdir, build_dir, scenarios, **options)
    return ensemble(system, workdir, build_dir, scenarios, "leader" if "leader" in layout else "follower", **options)


def fact_differences(ours: list[Outcome], theirs: list[Outcome]) -> list[str]:
    """Scenario facts (values both systems must agree on) that differ, and verdicts that do."""
    by_name = {o.scenario: o for o in theirs}
    found = []
    for outcome in ours:
        other = by_name.get(outcome.scenario)
        if other is None:
            found.append(f"{outcome.scenario}: not run on the reference")
            continue
        if outcome.passed != other.passed:
            found.append(f"{outcome.scenario}: {'passed' if outcome.passed else 'failed'} on zabby, {'passed' if other.passed else 'failed'} on ZooKeeper")
        if outcome.raw.get("facts") != other.raw.get("facts"):
            found.append(f"{outcome.scenario}: facts differ: zabby {outcome.raw.get('facts')} vs ZooKeeper {other.raw.get('facts')}")
    return found


def table(results: dict[tuple[str, str], list[Outcome]], layouts: Iterable[str]) -> str:
    """Scenario rows, a (ZooKeeper | zabby) pair of columns per layout: pass/FAIL, SUSPENDED
    count (S), leadership losses (L)."""
    layouts = list(layouts)
    names: list[str] = []
    for outcomes in results.values():
        names += [o.scenario for o in outcomes if o.scenario not in names]
    header = ["scenario"] + [f"{layout} / {system}" for layout in layouts for system in SYSTEMS]
    rows = [header]
    for name in names:
        row = [name]
        for layout in layouts:
            for system in SYSTEMS:
                found = [o for o in results.get((system, layout), []) if o.scenario == name]
                row.append(found[0].cell() if found else "-")
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)
