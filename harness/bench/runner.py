"""Running one workload: spawn the client processes, barrier (READY ... GO), collect results,
server and client CPU seconds; the Java generator's build; py-spy around a window.

A client process is either ``java ZkLoad`` (ZooKeeper's own async client) or
``python -m harness.bench.pyload`` (kazoo or zabby's msgpack Client); both speak the same
READY / GO / (STOP) / RESULT line protocol on stdin/stdout.
"""

from __future__ import annotations

import bisect
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any

from harness import checkout_env
from harness.bench.systems import System, cpu_split_of, total_watches
from harness.local.javac import JAVA_DIR, JavaUnavailable, classpath, compile_java
from harness.local.zookeeper import ZK_JAR

HERE = Path(__file__).resolve().parent
JAVA_SOURCE = HERE / "ZkLoad.java"
PYLOAD = "harness.bench.pyload"  # run as a module, with this checkout first on its path (see ClientProcess)
DRIVERS = ("java", "kazoo", "zabby-msgpack")


@dataclass
class Workload:
    name: str
    mode: str
    kind: str  # throughput | latency | fanout
    size: int = 100
    unit: str = "ops/s"
    description: str = ""


WORKLOADS: dict[str, Workload] = {w.name: w for w in [
    Workload("getData", "get", "throughput", description="getData of a 100 B znode (one per lane)"),
    Workload("exists", "exists", "throughput", description="exists of a 100 B znode"),
    Workload("getChildren-1000", "children", "throughput", description="getChildren of a node with 1,000 children"),
    Workload("setData", "set", "throughput", description="setData 100 B (fsynced)"),
    Workload("mix-90/10", "mix", "throughput", description="90% getData / 10% setData, 100 B"),
    Workload("create-100B", "create", "throughput", description="create, 100 B values (fsynced)"),
    Workload("create-1KB", "create", "throughput", size=1024, description="create, 1 KB values (fsynced)"),
    Workload("latency-read", "latency-read", "latency", description="getData one at a time (1 connection, 1 outstanding)"),
    Workload("latency-write", "latency-write", "latency", description="create 100 B one at a time (1 connection, 1 outstanding)"),
    Workload("latency-set", "latency-set", "latency", description="setData 100 B one at a time (1 connection, 1 outstanding)"),
    Workload("session-churn", "churn", "throughput", unit="sessions/s", description="connect, create an ephemeral, close"),
    Workload("watch-fanout", "watch", "fanout", description="N clients watch one node; setData; time until all N got the event"),
]}  # fmt: skip


@dataclass
class Shape:
    """A layout of the load: processes x connections each x requests outstanding per connection.
    ``spread`` empty: connection i of process p is pinned to server (p * conns + i) mod n;
    ``rotate``: every connection gets the whole server list, starting at that server, and keeps
    to it in order; ``shuffle``: the client library shuffles the list (ZooKeeper's own client)."""

    procs: int
    conns: int
    inflight: int
    spread: str = ""

    def label(self) -> str:
        return f"{self.procs}×{self.conns}×{self.inflight}" + (f" spread ({self.spread})" if self.spread else "")


# Default load per driver: several processes x several connections x pipelined requests.
# The Java generator costs least CPU per op, so fewer processes drive the servers hardest.
SHAPES = {
    "java": Shape(2, 4, 16),
    "kazoo": Shape(4, 2, 16),
    "zabby-msgpack": Shape(4, 2, 16),
}
# The layout: ZooKeeper's async Java client, 4 processes x 32 requests in flight, each
# process with one connection, the connections spread over every server as an application's
# connect string spreads them.  Measured beside the default layout for these workloads.
SPREAD = Shape(4, 1, 32, "rotate")
SPREAD_WORKLOADS = ("create-100B", "setData", "getData")


@dataclass
class Limits:
    seconds: float = 8.0
    ops: int = 200_000
    create_ops: int = 100_000
    latency_ops: int = 5000
    latency_seconds: float = 20.0
    rounds: int = 1  # of each row a target reads (bench.py's measure_rounds)
    churn_threads: int = 4
    watchers: int = 200
    watch_rounds: int = 50


def py_spy() -> str | None:
    """py-spy on PATH, or next to this interpreter (a virtualenv run without activating it)."""
    beside = Path(sys.executable).with_name("py-spy")
    return shutil.which("py-spy") or (str(beside) if beside.exists() else None)


# -- the Java generator -------------------------------------------------------------------


def java_classpath(build: Path) -> str:
    return classpath(build, ZK_JAR, JAVA_DIR / "slf4j-nop.jar")


def build_java(cache: Path | None = None) -> Path | str:
    """ZkLoad.java compiled (harness.local.javac caches it by hash); the folder, or why not."""
    try:
        return compile_java("zkload", [JAVA_SOURCE], [ZK_JAR], cache)
    except (JavaUnavailable, RuntimeError) as exc:
        return str(exc)


# -- client processes ---------------------------------------------------------------------


class ClientProcess:
    """One load-generator process and a thread that reads its stdout lines."""

    def __init__(self, argv: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, start_new_session=True,
                                     env=checkout_env())  # fmt: skip  (a Python client runs this checkout)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.result: dict[str, Any] | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(raw.decode(errors="replace").rstrip("\n"))
        self.lines.put(None)

    def expect(self, prefix: str, deadline: float) -> str:
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"client process {self.proc.pid}: no {prefix!r} in time") from None
            if line is None:
                code = self.proc.wait()
                self.log.flush()
                tail = " | ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-6:])
                raise RuntimeError(f"client process {self.proc.pid} exited ({code}) before {prefix!r}: {tail[-600:]}")
            if line.startswith(prefix):
                return line

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self.log.close()


def client_argv(driver: str, cfg: dict[str, Any], java_build: Path | None) -> list[str]:
    if driver == "java":
        assert java_build is not None
        args = [f"{k}={v}" for k, v in cfg.items()]
        return ["java", "-Xmx512m", "-Dzookeeper.sasl.client=false", "-cp", java_classpath(java_build), "ZkLoad", *args]
    return [sys.executable, "-m", PYLOAD, json.dumps({**cfg, "driver": "kazoo" if driver == "kazoo" else "zabby"})]


@dataclass
class Context:
    workdir: Path
    java_build: Path | None
    limits: Limits
    counter: int = 0
    # called with the servers' pids as the measured window starts (the clients told GO) and
    # once their results are in (``harness.bench.window`` signals its hook in the servers)
    window_hooks: tuple[Callable[[list[int]], None], Callable[[list[int]], None]] | None = None

    def next_id(self) -> int:
        self.counter += 1
        return self.counter


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def cdf_points(values: list[float], points: int = 200) -> list[float]:
    ordered = sorted(values)
    if not ordered:
        return []
    return [ordered[min(len(ordered) - 1, int(i / points * len(ordered)))] for i in range(points)] + [ordered[-1]]


def _window_hook(ctx: Context, end: int, pids: list[int]) -> None:
    """The measured window's start (0) or end (1) told to ``ctx.window_hooks``, if any."""
    if ctx.window_hooks is not None:
        ctx.window_hooks[end](pids)


def run_clients(ctx: Context, system: System, driver: str, cfgs: list[dict[str, Any]], during: Any = None,
                timeout_s: float = 120.0, profile: dict[int, Path] | None = None) -> tuple[list[dict[str, Any]], float, float, dict[int, tuple[float, float]]]:
    """Start one process per cfg, barrier, GO; ``during(procs)`` runs after GO (watch rounds,
    then STOP).  ``profile`` maps server pids to py-spy raw outputs: each is sampled for the
    window.  Returns (results, server CPU s, wall s, server CPU s by pid)."""
    procs: list[ClientProcess] = []
    spies: list[subprocess.Popen[bytes]] = []
    try:
        for index, cfg in enumerate(cfgs):
            procs.append(ClientProcess(client_argv(driver, cfg, ctx.java_build), ctx.workdir / f"client-{ctx.counter}-{index}.log"))
        deadline = time.monotonic() + 120
        for proc in procs:
            proc.expect("READY", deadline)
        seconds = max(2, int(cfgs[0].get("seconds", 5)))
        for pid, out in (profile or {}).items():
            # every thread that is not idle (fsync in trio's worker threads shows), and the
            # thread holding the GIL only (where the Python CPU time goes)
            for extra, path in (([], out), (["--gil"], out.with_name(out.stem + "-gil.txt"))):
                spies.append(subprocess.Popen(
                    [py_spy() or "py-spy", "record", "-p", str(pid), "-d", str(seconds), "-r", "200", "-f", "raw", "-o", str(path), "--nonblocking", *extra],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))  # fmt: skip
        if spies:
            time.sleep(0.7)
        pids = system.pids()
        cpu0 = {pid: cpu_split_of(pid) for pid in pids}
        started = time.monotonic()
        for proc in procs:
            proc.send("GO")
        _window_hook(ctx, 0, pids)
        if during is not None:
            during(procs)
        deadline = time.monotonic() + timeout_s
        results = []
        for proc in procs:
            line = proc.expect("RESULT ", deadline)
            results.append(json.loads(line[len("RESULT "):]))
        wall = time.monotonic() - started
        _window_hook(ctx, 1, pids)
        cpu1 = {pid: cpu_split_of(pid) for pid in pids}
        by_pid = {pid: (cpu1[pid][0] - cpu0[pid][0], cpu1[pid][1] - cpu0[pid][1]) for pid in pids}
        for spy in spies:
            try:
                spy.wait(seconds + 60)
            except subprocess.TimeoutExpired:
                os.killpg(spy.pid, signal.SIGKILL)
        return results, sum(user + system for user, system in by_pid.values()), wall, by_pid
    finally:
        for proc in procs:
            proc.kill()
        for spy in spies:
            if spy.poll() is None:
                os.killpg(spy.pid, signal.SIGKILL)
                spy.wait(10)


def cpu_by_mode(system: System, modes: dict[int, str], cpu_by_pid: dict[int, tuple[float, float]], user_only: bool = False) -> dict[str, float]:
    """Server CPU seconds of the window (user and system, or ``user_only``) by the servers'
    mode (followers added up)."""
    out: dict[str, float] = {}
    for sid in system.ports:
        pid = system.pid(sid)
        if pid in cpu_by_pid:
            mode = modes.get(sid, "?")
            user, kernel = cpu_by_pid[pid]
            out[mode] = round(out.get(mode, 0.0) + user + (0.0 if user_only else kernel), 2)
    return out


def placement(system: System, modes: dict[int, str], hosts: list[str], cfgs: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, int]:
    """How many connections were on a server of each mode (leader, follower, standalone): as
    the Java client reports them, else the first server of each connection's list."""
    mode_of_port = {port: modes.get(sid, "?") for sid, port in system.ports.items()}
    counts: dict[str, int] = {}
    for cfg, result in zip(cfgs, results):
        ports = result.get("ports") or [int(hosts[(cfg["first"] + i) % len(hosts)].rsplit(":", 1)[1]) for i in range(cfg["conns"])]
        for port in ports:
            mode = mode_of_port.get(port, "?")
            counts[mode] = counts.get(mode, 0) + 1
    return counts


def prepare_children(ctx: Context, system: System, driver: str) -> None:
    """/bench/children1000 with 1,000 children, once per system (created by the driver at hand).
    (The mark lives on the system object: an id() could be reused by a later system.)"""
    if getattr(system, "children_ready", False):
        return
    cfg = {"hosts": system.hosts, "mode": "fill", "conns": 1, "inflight": 32, "count": 1000, "seconds": 120, "size": 10, "path": "/bench/children1000"}
    results, *_ = run_clients(ctx, system, driver, [cfg])
    if results[0]["ops"] < 1000 or results[0]["errors"]:
        raise RuntimeError(f"could not create the 1,000 children: {results[0]}")
    system.children_ready = True  # type: ignore[attr-defined]


def host_order(system: System, modes: dict[int, str], workload: Workload) -> list[str]:
    """Every server's address; a latency workload's one connection goes to a follower, where
    2 of 3 connections of an application land."""
    hosts = system.host_list()
    if workload.kind == "latency" and len(hosts) > 1:
        by_port = {port: modes[sid] for sid, port in system.ports.items()}
        hosts.sort(key=lambda host: by_port[int(host.rsplit(":", 1)[1])] != "follower")
    return hosts


def layout_name(workload: Workload, shape: Shape | None) -> str:
    """The layout a record is filed under: "spread" for a spread shape's throughput run."""
    return "spread" if shape and shape.spread and workload.kind == "throughput" else "default"


def run_workload(ctx: Context, system: System, driver: str, workload: Workload, shape: Shape | None = None,  # noqa: C901 -- one branch per workload kind and mode
                 profile: dict[int, Path] | None = None) -> dict[str, Any]:
    """One measured run; the JSON-able record."""
    lim = ctx.limits
    shape = shape or SHAPES[driver]
    run_id = ctx.next_id()
    procs, conns, inflight = shape.procs, shape.conns, shape.inflight
    seconds, ops = lim.seconds, lim.ops
    if workload.kind == "latency":
        procs, conns, inflight, seconds, ops = 1, 1, 1, lim.latency_seconds, lim.latency_ops
    elif workload.mode == "churn":
        conns, inflight = lim.churn_threads, 1
    elif workload.mode == "watch":
        conns, inflight, seconds = max(1, lim.watchers // procs), 1, 600
    elif workload.mode == "create":
        ops = lim.create_ops
    if workload.mode == "children":
        prepare_children(ctx, system, driver)
    modes = system.modes()
    hosts = host_order(system, modes, workload)
    cfgs = []
    for index in range(procs):
        cfgs.append({
            "hosts": ",".join(hosts), "first": index * conns, "spread": shape.spread, "mode": workload.mode, "conns": conns,
            "inflight": inflight, "ops": max(1, ops // procs), "seconds": seconds, "size": workload.size,
            "prefix": f"/bench/r{run_id}/w{index}", "path": "/bench/children1000" if workload.mode == "children" else f"/bench/watch{run_id}",
            "expect": 1000 if workload.mode == "children" else 0,
        })  # fmt: skip
    rounds: list[int] = []
    missed = 0

    def watch_rounds(clients: list[ClientProcess]) -> None:
        from kazoo.client import KazooClient

        nonlocal missed
        ports = list(system.ports.values())
        expected = conns * procs
        writer = KazooClient(hosts=hosts[0], timeout=30.0)
        writer.start(timeout=30)
        try:
            for _ in range(lim.watch_rounds):
                armed_by = time.monotonic() + 30
                while total_watches(ports) < expected and time.monotonic() < armed_by:
                    time.sleep(0.005)
                if total_watches(ports) < expected:
                    missed += 1
                time.sleep(0.02)
                rounds.append(time.monotonic_ns())
                writer.set(cfgs[0]["path"], b"w" * 100)
            time.sleep(1.0)
        finally:
            writer.stop()
            writer.close()
            for client in clients:
                client.send("STOP")

    timeout_s = seconds + 120 if workload.mode != "watch" else lim.watch_rounds * 35 + 60
    results, server_cpu, wall, cpu_by_pid = run_clients(ctx, system, driver, cfgs, watch_rounds if workload.mode == "watch" else None, timeout_s, profile)
    record: dict[str, Any] = {
        "system": system.name, "deployment": system.deployment, "driver": driver, "workload": workload.name,
        "kind": workload.kind, "unit": workload.unit, "procs": procs, "conns": conns, "inflight": inflight,
        "layout": layout_name(workload, shape),
        "placement": placement(system, modes, hosts, cfgs, results),
        "value_bytes": workload.size, "ops": sum(r["ops"] for r in results), "errors": sum(r["errors"] for r in results),
        "elapsed_s": round(max(r["elapsed_s"] for r in results), 3), "wall_s": round(wall, 3),
        "server_cpu_s": round(server_cpu, 2), "client_cpu_s": round(sum(r["cpu_s"] for r in results), 2),
        "server_cpu_by_mode": cpu_by_mode(system, modes, cpu_by_pid),
        "server_user_cpu_by_mode": cpu_by_mode(system, modes, cpu_by_pid, user_only=True),
    }  # fmt: skip
    if workload.kind == "throughput":
        record["rate"] = round(record["ops"] / max(record["elapsed_s"], 1e-9), 1)
    elif workload.kind == "latency":
        samples = [x / 1000.0 for r in results for x in r.get("lat_us", [])]
        record.update(samples=len(samples), p50_ms=round(percentile(samples, 0.5), 4), p99_ms=round(percentile(samples, 0.99), 4),
                      p999_ms=round(percentile(samples, 0.999), 4), cdf_ms=[round(x, 4) for x in cdf_points(samples)])  # fmt: skip
        record["rate"] = round(record["ops"] / max(record["elapsed_s"], 1e-9), 1)
    else:
        times = [sorted(watcher) for r in results for watcher in r.get("events_ns", [])]
        fanout = []
        for number, sent in enumerate(rounds):
            until = rounds[number + 1] if number + 1 < len(rounds) else float("inf")
            latest = 0
            got = 0
            for watcher in times:
                at = bisect.bisect_left(watcher, sent)
                if at < len(watcher) and watcher[at] < until:
                    latest = max(latest, watcher[at])
                    got += 1
            if got == len(times) and got:
                fanout.append((latest - sent) / 1e6)
            else:
                missed += 1
        record.update(watchers=len(times), rounds=len(rounds), missed_rounds=missed)
        if fanout:
            record.update(p50_ms=round(percentile(fanout, 0.5), 3), p99_ms=round(percentile(fanout, 0.99), 3), max_ms=round(max(fanout), 3))
    return record
