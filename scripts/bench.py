#!/usr/bin/env python3
"""zabby vs Apache ZooKeeper 3.8: the same workloads, the same machine, the same run.

    python scripts/bench.py --quick     # standalone, a few workloads, short windows (< 5 min)
    python scripts/bench.py --full      # everything; rewrites docs/benchmarks.md and docs/bench/

The script starts every system under test itself, in a temporary folder, on free 127.0.0.1
ports: zabby standalone and a 3-server zabby ensemble (python -m zabby.server.main), and
Apache ZooKeeper 3.8 standalone and 3-server from Debian's `zookeeper` package (installed
with apt-get by scripts/install_zookeeper.sh when missing; JVMs run as
`java -Xmx512m -cp zookeeper.jar:... QuorumPeerMain zoo.cfg` with our own config: forceSync
on, 4lw enabled, AdminServer off).  Both systems get the same tickTime, snapCount and limits.

Load comes from several client processes, each with several connections and pipelined
requests, bounded by op count and wall time, and always through ZooKeeper's wire protocol
(zabby's jute codec) for the comparison: ZooKeeper's own async Java client (a small
generator, scripts/bench/ZkLoad.java, compiled at run time with javac against Debian's
jars) and kazoo; zabby alone is also measured through its msgpack Client.  Every run
records the CPU seconds of the servers (/proc/<pid>/stat) and of the client processes.

Output: one JSON line per run (<out>/results.jsonl), the side-by-side Markdown table with
zabby/ZooKeeper ratios (printed, and <out>/../benchmarks.md with --full), PNG plots
(throughput vs client count, latency CDFs, ratios) and, with --full, py-spy profiles of the
zabby server on the two workloads where zabby trails most.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts" / "bench"))
sys.path.insert(0, str(ROOT))

import bench_report as report  # noqa: E402
from bench_runner import DRIVERS, SHAPES, WORKLOADS, Context, Limits, Shape, build_java, py_spy, run_clients, run_workload  # noqa: E402
from bench_systems import System, ensure_zookeeper, make_system  # noqa: E402

QUICK_WORKLOADS = ["getData", "mix-90/10", "create-100B", "latency-read", "latency-write"]
QUICK_LIMITS = Limits(seconds=3.0, ops=100_000, create_ops=60_000, latency_ops=1000, latency_seconds=4.0, watchers=50, watch_rounds=15)
FULL_LIMITS = Limits(seconds=5.0, latency_seconds=10.0, watch_rounds=40)
SCALING_PROCS = (1, 2, 4)
SCALING_WORKLOADS = ("create-100B", "getData")
RESYNC_BEHIND = (300, 10_000, 100_000)


class Run:
    """The records of this run, appended to results.jsonl as they come."""

    def __init__(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.path = out_dir / "results.jsonl"
        self.path.write_text("")
        self.records: list[dict[str, Any]] = []

    def add(self, record: dict[str, Any]) -> None:
        record = {"ts": round(time.time(), 1), **record}
        self.records.append(record)
        with self.path.open("a") as out:
            out.write(json.dumps(record) + "\n")
        brief = {k: v for k, v in record.items() if k not in ("cdf_ms", "ts")}
        print("  " + json.dumps(brief), flush=True)


def measure(ctx: Context, run: Run, system: System, driver: str, workload: str, series: str = "main", shape: Shape | None = None,
            profile: Path | None = None) -> dict[str, Any]:  # fmt: skip
    try:
        record = run_workload(ctx, system, driver, WORKLOADS[workload], shape, profile)
    except Exception as exc:  # noqa: BLE001 - one failed run must not lose the others
        traceback.print_exc()
        record = {"system": system.name, "deployment": system.deployment, "driver": driver, "workload": workload,
                  "kind": WORKLOADS[workload].kind, "error": f"{type(exc).__name__}: {exc}"[:900], "server_modes": system.modes()}  # fmt: skip
        failure = run.path.with_name(f"failure-{ctx.counter}.log")
        failure.write_text(f"{record['error']}\nmodes: {record['server_modes']}\n\n{system.log_tail()}\n")
        print(f"  server state: {record['server_modes']}; server logs: {failure}", flush=True)
    record["series"] = series
    run.add(record)
    return record


def resync(ctx: Context, run: Run, system: System, behind: int, driver: str) -> None:
    """Kill a follower, write ``behind`` 1 KB znodes, restart it; time until its znode count
    reaches the leader's, and whether the leader sent a DIFF or a SNAP."""
    record: dict[str, Any] = {"system": system.name, "deployment": system.deployment, "kind": "resync", "behind": behind, "series": "resync"}
    try:
        leader = system.leader()
        follower = next(sid for sid in system.ports if sid != leader)
        # first a follower that is in sync and has recent txns (as in production): 1,000 small
        # writes, then wait until its znode count is the leader's
        warm = {"hosts": system.hosts, "mode": "fill", "conns": 2, "inflight": 32, "count": 1000, "seconds": 120, "size": 100,
                "path": f"/resync-warm{behind}"}  # fmt: skip
        run_clients(ctx, system, driver, [warm], timeout_s=200)
        wait_synced(system, follower, int(system.mntr(leader)["zk_znode_count"]), 120)
        before = system.mntr(leader)
        system.kill(follower)
        live = [f"127.0.0.1:{port}" for sid, port in system.ports.items() if sid != follower]
        cfg = {"hosts": ",".join(live), "mode": "fill", "conns": 4, "inflight": 32, "count": behind, "seconds": 600, "size": 1024,
               "path": f"/resync{behind}"}  # fmt: skip
        results, *_ = run_clients(ctx, system, driver, [cfg], timeout_s=700)
        record["fill_rate"] = round(results[0]["ops"] / max(results[0]["elapsed_s"], 1e-9), 1)
        target = int(system.mntr(leader)["zk_znode_count"])
        cpu0 = system.cpu()
        started = time.monotonic()
        system.launch(follower)
        caught_up = wait_synced(system, follower, target, 600)
        record["seconds"] = round(time.monotonic() - started, 3)
        if not caught_up:
            raise TimeoutError(f"follower {follower} not caught up after 600 s")
        total_cpu = system.cpu()
        follower_pid = system.pid(follower)  # type: ignore[attr-defined]
        from bench_systems import cpu_of

        follower_cpu = cpu_of(follower_pid) if follower_pid else 0.0
        record["follower_cpu_s"] = round(follower_cpu, 2)
        record["leader_cpu_s"] = round(total_cpu - follower_cpu - cpu0, 2)  # the other (live) servers
        after = system.mntr(leader)
        snaps = int(after.get("zk_snap_count", 0)) - int(before.get("zk_snap_count", 0))
        diffs = int(after.get("zk_diff_count", 0)) - int(before.get("zk_diff_count", 0))
        record["mode"] = "SNAP" if snaps > 0 else "DIFF" if diffs > 0 else "?"
        record["leader_counts"] = {"snap": snaps, "diff": diffs}
        if hasattr(system, "learner_sync_modes"):
            logged = system.learner_sync_modes(follower)  # type: ignore[attr-defined]
            record["follower_log"] = logged[-1] if logged else None
        record["target_znodes"] = target
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        record["error"] = f"{type(exc).__name__}: {exc}"[:400]
    run.add(record)


def wait_synced(system: System, sid: int, target: int, wait_s: float) -> bool:
    """Until server ``sid`` is a follower whose znode count reached ``target``."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            stats = system.mntr(sid)
            if stats.get("zk_server_state") == "follower" and int(stats.get("zk_znode_count", -1)) >= target:
                return True
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.01)
    return False


def wait_quiet(minutes: float, threshold: float) -> tuple[bool, float]:
    deadline = time.monotonic() + minutes * 60
    load = report.loadavg()
    while load >= threshold and time.monotonic() < deadline:
        print(f"waiting for a quiet machine: 1-minute load {load:.2f} >= {threshold}", flush=True)
        time.sleep(30)
        load = report.loadavg()
    return load < threshold, load


def pick_trailing(records: list[dict[str, Any]], count: int = 2) -> list[str]:
    """The workloads where zabby trails ZooKeeper most (standalone, Java client)."""
    by = {(r["system"], r["workload"]): r for r in report.main_records(records) if r["deployment"] == "standalone" and r["driver"] == "java"}
    scored = []
    for workload in WORKLOADS:
        r = report.ratio(by.get(("zabby", workload)), by.get(("zookeeper", workload)))
        if r is not None and workload != "watch-fanout":
            scored.append((r, workload))
    return [w for _, w in sorted(scored)[:count]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="standalone only, a few workloads, short windows (the default)")
    size.add_argument("--full", action="store_true", help="everything: both deployments, every workload, scaling, resync, profiles")
    parser.add_argument("--out", type=Path, help="folder for results.jsonl, plots and profiles (default: docs/bench with --full, run/bench-quick otherwise)")
    parser.add_argument("--report", type=Path, help="the Markdown report (default: docs/benchmarks.md with --full, <out>/benchmarks.md otherwise)")
    parser.add_argument("--systems", default="zabby,zookeeper")
    parser.add_argument("--deployments", help="standalone,3-server (default: standalone with --quick, both with --full)")
    parser.add_argument("--drivers", default=",".join(DRIVERS), help=f"subset of {','.join(DRIVERS)}")
    parser.add_argument("--workloads", help=f"comma-separated subset of: {', '.join(WORKLOADS)}")
    parser.add_argument("--seconds", type=float, help="measuring window of the throughput workloads")
    parser.add_argument("--latency-ops", type=int, help="requests of the one-at-a-time latency workloads")
    parser.add_argument("--watchers", type=int, help="connections watching the node in watch-fanout")
    parser.add_argument("--resync-behind", help="comma-separated znode counts a restarted follower is behind by (default 10000,100000)")
    parser.add_argument("--no-scaling", action="store_true")
    parser.add_argument("--no-resync", action="store_true")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--wait-quiet", type=float, help="minutes to wait for the 1-minute load average to fall below --quiet-load (default 20 with --full, 0 otherwise)")
    parser.add_argument("--quiet-load", type=float, default=0.7)
    parser.add_argument("--from-records", type=Path, help="measure nothing: rebuild the table, plots and report from this results.jsonl (and its profile-*.json)")
    parser.add_argument("--java-cache", type=Path, help="where ZkLoad.java is compiled (default ~/.cache/zabby-bench)")
    args = parser.parse_args(argv)
    full = bool(args.full)
    limits = replace(FULL_LIMITS if full else QUICK_LIMITS)
    if args.seconds:
        limits.seconds = args.seconds
    if args.latency_ops:
        limits.latency_ops = args.latency_ops
    if args.watchers:
        limits.watchers = args.watchers
    resync_behind = tuple(int(n) for n in args.resync_behind.split(",")) if args.resync_behind else RESYNC_BEHIND
    out_dir = args.out or (ROOT / "docs" / "bench" if full else ROOT / "run" / "bench-quick")
    report_path = args.report or (ROOT / "docs" / "benchmarks.md" if full else out_dir / "benchmarks.md")
    systems = [s for s in args.systems.split(",") if s]
    deployments = (args.deployments or ("standalone,3-server" if full else "standalone")).split(",")
    drivers = [d for d in args.drivers.split(",") if d]
    workloads = args.workloads.split(",") if args.workloads else (list(WORKLOADS) if full else QUICK_WORKLOADS)
    for workload in workloads:
        if workload not in WORKLOADS:
            parser.error(f"unknown workload {workload!r}")
    notes: list[str] = []
    if args.from_records:
        return rebuild(args.from_records, args.out or args.from_records.parent, report_path)

    if "zookeeper" in systems:
        why = ensure_zookeeper()
        if why:
            notes.append(f"ZooKeeper was not measured: {why}")
            print(notes[-1], file=sys.stderr)
            systems.remove("zookeeper")
    java_build = None
    if "java" in drivers:
        built = build_java(args.java_cache)
        if isinstance(built, str):
            notes.append(f"The Java client was not used: {built}")
            print(notes[-1], file=sys.stderr)
            drivers.remove("java")
        else:
            java_build = built

    if full and not args.no_profile and py_spy() is None:
        parser.error("--full profiles the server with py-spy, which is not installed: "
                     "pip install -e '.[bench]' (or pass --no-profile)")

    quiet_minutes = args.wait_quiet if args.wait_quiet is not None else (20.0 if full else 0.0)
    quiet, load_start = wait_quiet(quiet_minutes, args.quiet_load) if quiet_minutes > 0 else (report.loadavg() < args.quiet_load, report.loadavg())
    machine = report.machine_info()
    machine["load_at_start"] = load_start
    command = "python scripts/bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    print(f"{command}\nmachine: {json.dumps(machine)}", flush=True)
    started = time.monotonic()
    run = Run(out_dir)
    live: list[System] = []

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous_handler = signal.signal(signal.SIGTERM, on_term)
    profiles: dict[str, dict[str, Any]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="zabby-bench-") as tmp:
            workdir = Path(tmp)
            ctx = Context(workdir, java_build, limits)

            def bring_up(name: str, deployment: str, tag: str) -> System:
                servers = 1 if deployment == "standalone" else 3
                system = make_system(name, workdir / f"{name}-{deployment}-{tag}", servers)
                live.append(system)
                print(f"starting {name} {deployment} ({tag})", flush=True)
                system.start()
                return system

            def bring_down(system: System) -> None:
                system.stop()
                live.remove(system)

            for deployment in deployments:
                for driver in drivers:
                    # both systems up side by side, each workload run on one then the other, so a
                    # change of background load hits both alike (an idle server costs ~nothing)
                    group = [bring_up(name, deployment, driver) for name in systems if not (name == "zookeeper" and driver == "zabby-msgpack")]
                    try:
                        for workload in workloads:
                            for system in group:
                                print(f"{system.name} {deployment} {driver} {workload}", flush=True)
                                measure(ctx, run, system, driver, workload)
                    finally:
                        for system in group:
                            bring_down(system)
                if full and not args.no_scaling and "java" in drivers:
                    group = [bring_up(name, deployment, "scaling") for name in systems]
                    try:
                        for workload in SCALING_WORKLOADS:
                            for procs in SCALING_PROCS:
                                for system in group:
                                    print(f"{system.name} {deployment} scaling {workload} x{procs}", flush=True)
                                    measure(ctx, run, system, "java", workload, "scaling", Shape(procs, 4, 16))
                    finally:
                        for system in group:
                            bring_down(system)
                if deployment != "standalone" and full and not args.no_resync:
                    fill_driver = "java" if "java" in drivers else "kazoo"
                    for name in systems:
                        system = bring_up(name, deployment, "resync")
                        try:
                            for behind in resync_behind:
                                print(f"{name} {deployment} resync behind {behind}", flush=True)
                                resync(ctx, run, system, behind, fill_driver)
                        finally:
                            bring_down(system)
            if full and not args.no_profile and "zabby" in systems and "zookeeper" in systems and "java" in drivers:
                for workload in pick_trailing(run.records):
                    system = bring_up("zabby", "standalone", "profile")
                    try:
                        raw = out_dir / f"profile-{workload.replace('/', '-')}.txt"
                        print(f"profiling zabby standalone on {workload}", flush=True)
                        measure(ctx, run, system, "java", workload, "profile", profile=raw)
                        if raw.exists():
                            profiles[workload] = report.summarise_profile(raw)
                            gil = raw.with_name(raw.stem + "-gil.txt")
                            if gil.exists():
                                profiles[workload]["gil"] = report.summarise_profile(gil)
                            (out_dir / f"profile-{workload.replace('/', '-')}.json").write_text(json.dumps(profiles[workload], indent=1))
                    finally:
                        bring_down(system)
    except KeyboardInterrupt:
        notes.append("The run was interrupted; the tables hold what finished.")
        print(notes[-1], file=sys.stderr)
    finally:
        for system in list(live):
            system.stop()
        signal.signal(signal.SIGTERM, previous_handler)
    machine["load_at_end"] = report.loadavg()
    machine["quiet"] = quiet
    minutes = (time.monotonic() - started) / 60
    run.add({"kind": "meta", "command": command, "machine": machine, "workloads": workloads, "notes": notes,
             "limits": vars(limits), "minutes": round(minutes, 1)})  # fmt: skip
    print(f"\nzabby vs ZooKeeper 3.8 ({machine.get('cores')} cores, {machine.get('ram_gib')} GiB, kernel {machine.get('kernel')}), {minutes:.1f} min")
    table = report.print_side_by_side(run.records, workloads)
    resync_md = report.resync_table(run.records)
    if resync_md:
        print("\n" + resync_md)
    plots = report.plots(run.records, out_dir)
    write_report(report_path, out_dir, command, machine, run.records, workloads, table, resync_md, plots, profiles, notes, limits, minutes)
    print(f"\nrecords: {run.path}\nreport: {report_path}")
    return 0 if not any("error" in r for r in run.records) else 1


def rebuild(records_path: Path, out_dir: Path, report_path: Path) -> int:
    """The table, plots and report again from a run's records (e.g. after editing docs/bench/notes.md)."""
    records = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]
    meta = next((r for r in reversed(records) if r.get("kind") == "meta"), None)
    if meta is None:
        print(f"{records_path} has no meta record (an interrupted run?)", file=sys.stderr)
        return 2
    profiles = {}
    for path in sorted(records_path.parent.glob("profile-*.json")):
        workload = next((w for w in WORKLOADS if f"profile-{w.replace('/', '-')}.json" == path.name), None)
        if workload:
            raw = path.with_suffix(".txt")
            profiles[workload] = report.summarise_profile(raw) if raw.exists() else json.loads(path.read_text())
            gil = raw.with_name(raw.stem + "-gil.txt")
            if gil.exists():
                profiles[workload]["gil"] = report.summarise_profile(gil)
            path.write_text(json.dumps(profiles[workload], indent=1))
    workloads = meta["workloads"]
    table = report.print_side_by_side(records, workloads)
    resync_md = report.resync_table(records)
    plots = report.plots(records, out_dir)
    write_report(report_path, out_dir, "\n".join(meta.get("commands", [meta["command"]])), meta["machine"], records, workloads, table, resync_md, plots, profiles,
                 meta["notes"], Limits(**meta["limits"]), meta["minutes"])  # fmt: skip
    print(f"report: {report_path}")
    return 0


def write_report(path: Path, out_dir: Path, command: str, machine: dict[str, Any], records: list[dict[str, Any]], workloads: list[str],
                 table: str, resync_md: str, plots: list[str], profiles: dict[str, dict[str, Any]], notes: list[str], limits: Limits,
                 minutes: float) -> None:  # fmt: skip
    try:
        plot_prefix = out_dir.relative_to(path.parent).as_posix()
    except ValueError:
        plot_prefix = out_dir.as_posix()
    leads, trails, _ = report.leads_and_trails(records, workloads)
    lines = [
        "# Benchmarks: zabby vs Apache ZooKeeper 3.8",
        "",
        "<!-- generated by scripts/bench.py; hand-written commentary lives in docs/bench/notes.md and is included below -->",
        "",
        f"Produced by `{command.splitlines()[0]}` ({minutes:.0f} minutes)" + (" and a second run (see the notes on this run)" if "\n" in command else "")
        + f", zabby {machine.get('zabby_commit', '?')}.",
        "",
        "## Machine",
        "",
        f"* {machine.get('cores')} cores ({machine.get('cpu', '?')}), {machine.get('ram_gib')} GiB RAM, Linux {machine.get('kernel')}",
        f"* Python {machine.get('python')}; {machine.get('java', 'java ?')}; Debian zookeeper {machine.get('zookeeper', '?')}",
        f"* 1-minute load average {machine.get('load_at_start', -1):.2f} at the start, {machine.get('load_at_end', -1):.2f} at the end"
        + ("" if machine.get("quiet") else " — **the machine was not quiet** (other work was running; absolute numbers are low and noisy, the ratios less so since both systems ran side by side, alternating workload by workload)"),
        "",
        "## Method",
        "",
        "* Every system is started by the script on 127.0.0.1 in a temporary folder: zabby "
        "(`python -m zabby.server.main zoo.cfg`) and ZooKeeper (`java -Xmx512m -cp zookeeper.jar:... QuorumPeerMain zoo.cfg`, "
        "Debian's jars), standalone and 3-server, the same zoo.cfg settings for both: `tickTime=2000`, `snapCount=100000`, "
        "`forceSync=yes` (every write fsynced before it is acknowledged), `maxClientCnxns=0`, 4lw enabled, AdminServer off.",
        "* Both systems run side by side, fresh for each client library; each workload runs on one and then the other.",
        f"* Throughput: several client processes × connections × outstanding requests (Java client "
        f"{SHAPES['java'].procs}×{SHAPES['java'].conns}×{SHAPES['java'].inflight}, kazoo and zabby's msgpack Client "
        f"{SHAPES['kazoo'].procs}×{SHAPES['kazoo'].conns}×{SHAPES['kazoo'].inflight}), each run bounded by "
        f"{limits.seconds:g} s and {limits.ops:,} ops ({limits.create_ops:,} for creates); value 100 B unless said. "
        "The processes meet at a barrier after their set-up, so the window holds load only.",
        f"* Latency: one connection, one request at a time, {limits.latency_ops:,} requests (at most {limits.latency_seconds:g} s): p50 / p99 / p999.",
        f"* Session churn: {limits.churn_threads} threads per client process, each connecting, creating an ephemeral and closing, in a loop.",
        f"* Watch fan-out: {limits.watchers} connections each hold a data watch on one node (re-armed after every event); "
        f"{limits.watch_rounds} times, once `wchs` shows every watch armed, another client sets the node; the time from the "
        "setData call until the last watcher got its event (monotonic clock shared by all processes): p50 / p99 over the rounds.",
        "* Resync: in a 3-server ensemble (`commitLogCount=500` in zabby, ZooKeeper's default 500 and `snapshotSizeFactor` 0.33) "
        "1,000 small znodes are written and the follower is let catch up, then it is killed (SIGKILL), N 1 KB znodes are written, "
        "the follower is restarted; "
        "the time until its `mntr` znode count reaches the leader's. DIFF or SNAP from the leader's `zk_diff_count`/`zk_snap_count`.",
        "* The clients all speak ZooKeeper's wire protocol to both systems (zabby's jute codec): ZooKeeper's own async Java client "
        "(`scripts/bench/ZkLoad.java`, compiled at run time against Debian's `libzookeeper-java`) and kazoo; zabby is also "
        "measured through its own msgpack Client (no ZooKeeper column there).",
        "* CPU seconds: the servers' utime+stime from `/proc/<pid>/stat` over the run, and the client processes' own "
        "(getrusage / the JVM's process CPU time). On 2 cores, a side using ~1 CPU s per window second per process "
        "(Python is single-threaded) or ~2 in total is the bottleneck.",
        "* **zabby ÷ ZK** is > 1 when zabby is better: throughput zabby/ZooKeeper; latency and fan-out ZooKeeper p50 / zabby p50.",
        "",
    ]
    if notes:
        lines += ["## Notes on this run", ""] + [f"* {note}" for note in notes] + [""]
    lines += ["## Results", "", "Throughput in ops/s; latency p50 / p99 / p999; fan-out p50 / p99. "
              "CPU s: server / client processes over the run (window s: zabby/ZK wall time of the run).", table, ""]  # fmt: skip
    if resync_md:
        lines += ["### Follower resync (3-server)", "", resync_md, ""]
    for name, title in (("ratios.png", "zabby ÷ ZooKeeper per workload (Java client)"), ("throughput_vs_clients.png", "Throughput vs client count"),
                        ("latency_cdf.png", "Latency CDFs (one request at a time)")):  # fmt: skip
        if name in plots:
            lines += [f"### {title}", "", f"![{title}]({plot_prefix}/{name})", ""]
    lines += ["## Where zabby leads and trails", ""]
    lines += ["Leads (ratio ≥ 1): " + ("; ".join(leads) if leads else "none") + ".", "", "Trails: " + ("; ".join(trails) if trails else "none") + ".", ""]
    if profiles:
        lines += ["## Profiles of the zabby server where it trails most", "",
                  "py-spy (`py-spy record --nonblocking -r 200 -f raw`) attached to the zabby standalone server for the window of "
                  "a fresh run of the workload with the Java client; % of samples (idle time in epoll is not sampled).", ""]  # fmt: skip
        for workload, summary in profiles.items():
            stem = f"{plot_prefix}/profile-{workload.replace('/', '-')}"
            lines += [f"### {workload}", "",
                      f"Raw stacks: `{stem}.txt` (every non-idle thread, {summary.get('samples', 0)} samples; fsync in trio's "
                      f"worker threads shows here) and `{stem}-gil.txt` (only the thread holding the GIL: Python CPU time, "
                      f"{summary.get('gil', {}).get('samples', 0)} samples).", ""]  # fmt: skip
            gil = summary.get("gil", {})
            rows = [("self time by file, GIL holder", gil.get("self_by_file")), ("self time by function, GIL holder", gil.get("self_by_function")),
                    ("inclusive, zabby frames, GIL holder", gil.get("inclusive_zabby")), ("self time by function, all non-idle threads", summary.get("self_by_function"))]  # fmt: skip
            for title, entries in rows:
                if entries:
                    lines += [f"{title}:", ""] + [f"* {pct:.1f}% {name}" for name, pct in entries[:10]] + [""]
    notes_file = ROOT / "docs" / "bench" / "notes.md"
    if notes_file.exists() and path.resolve() == (ROOT / "docs" / "benchmarks.md").resolve():
        lines += [notes_file.read_text().rstrip(), ""]
    lines += ["## Reproduce", "", "```", "pip install -e '.[test,bench]'", command, "```", "",
              f"Raw records: `{plot_prefix}/results.jsonl` (one JSON line per run).", ""]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
