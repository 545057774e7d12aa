#!/usr/bin/env python3
"""zabby vs Apache ZooKeeper 3.8: the same workloads, the same machine, the same run.

    python -m harness.bench --quick          # the issue's workloads, both deployments, short windows (~4 min)
    python -m harness.bench --full           # everything; rewrites docs/benchmarks.md and docs/bench/
    python -m harness.bench --scale          # 1,000,000 znodes on 3 servers of each system, in turn
    python -m harness.bench --profile-write  # py-spy of the zabby server during one-at-a-time creates
    python -m harness.bench --profile-write --baseline-root /tmp/zabby-old   # old and this checkout, alternating
    python -m harness.bench --quick --setting forceSync=no   # an experiment: a zoo.cfg line for every server of both

``python scripts/bench.py`` runs the same.  It starts every system under test itself, in a temporary folder, on free 127.0.0.1
ports: zabby standalone and a 3-server zabby ensemble (python -m zabby.server.main, from this
checkout or --zabby-root), and Apache ZooKeeper 3.8 standalone and 3-server from Debian's
`zookeeper` package (installed with apt-get by scripts/install_zookeeper.sh when missing; JVMs
run as `java -Xmx512m -cp zookeeper.jar:... QuorumPeerMain zoo.cfg`, -Xmx4g with --scale, with
our own config: forceSync on, 4lw enabled, AdminServer off).  Both systems get the same
tickTime, snapCount and limits; ``--setting KEY=VALUE`` changes or adds a line for both (the
report notes it).

Load comes from several client processes, each with several connections and pipelined
requests, bounded by op count and wall time, and always through ZooKeeper's wire protocol
(zabby's jute codec) for the comparison: ZooKeeper's own async Java client (a small
generator, harness/bench/ZkLoad.java, compiled at run time with javac against Debian's
jars) and kazoo; zabby alone is also measured through its msgpack Client.  Two layouts: the
default one per client (Java: 2 processes x 4 connections x 16 in flight, pinned round-robin
to the servers) and, for create/setData/getData, the spread one (Java: 4 processes x 1
connection x 32 in flight, each connection given every server).  Every run records the CPU
seconds of the servers (/proc/<pid>/stat) and of the client processes.  The rows the goals
read are measured in rounds (3 with --full, ``--rounds N``), the systems' order reversed each
round, and reported by their median round; speed probes at the start and the end (a fixed
Python loop, an fdatasync) tell a slower machine from a slower server between runs.

Output: one JSON line per run (<out>/results.jsonl; --scale: <out>/scale.jsonl), the
side-by-side Markdown table with zabby/ZooKeeper ratios and the issue's goals (printed, and
<out>/../benchmarks.md with --full), PNG plots and, with --full, py-spy profiles of the zabby
server on the two workloads where zabby trails most.  docs/benchmarks.md also shows the
scale tables and the profiles of one write found in its folder (docs/bench).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness import CHECKOUT
from harness.bench import report
from harness.bench.goals import goals_table, is_goal_row, scale_tables
from harness.bench.markdown import read_records, rebuild, scale_method, trailing_profiles, write_report
from harness.bench.profiling import run_profile_write
from harness.bench.runner import DRIVERS, SPREAD, SPREAD_WORKLOADS, WORKLOADS, Context, Limits, Shape, build_java, layout_name, py_spy
from harness.bench.scale import ScaleOptions, run_scale
from harness.bench.series import Run, measure, resync
from harness.bench.systems import System, make_system, setting_problem, zookeeper_missing

QUICK_WORKLOADS = ["getData", "setData", "create-100B", "latency-read", "latency-write", "latency-set"]
QUICK_LIMITS = Limits(seconds=3.0, ops=100_000, create_ops=60_000, latency_ops=1000, latency_seconds=4.0, watchers=50, watch_rounds=15)
FULL_LIMITS = Limits(seconds=5.0, latency_seconds=10.0, watch_rounds=40, rounds=3)
# 20 s windows: at 1M znodes a snapshot (every 50k-100k txns on each server, as snapCount asks) takes a
# second or more of CPU, and a 5 s window of setData held none, one or two of them by chance.
SCALE_LIMITS = Limits(seconds=20.0, ops=2_000_000, create_ops=20_000)
PROFILE_LIMITS = Limits(latency_ops=1_000_000, latency_seconds=10.0)  # the window is the time limit
SCALING_PROCS = (1, 2, 4)
SCALING_WORKLOADS = ("create-100B", "getData")
RESYNC_BEHIND = (300, 10_000, 100_000)


def parse_args(argv: list[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="create/setData/getData pipelined and one at a time, standalone and 3-server, "
                      "Java client and kazoo, short windows (the default)")
    mode.add_argument("--full", action="store_true", help="everything: both deployments, every workload, scaling, resync, profiles")
    mode.add_argument("--scale", action="store_true", help="grow a 3-server ensemble of each system (in turn) to --scale-znodes: memory, restart, resync, throughput")
    mode.add_argument("--profile-write", action="store_true", help="py-spy profile of the zabby server during one-at-a-time creates (Java client)")
    parser.add_argument("--out", type=Path, help="folder for records, plots and profiles (default: docs/bench with --full and --profile-write, run/bench-quick or run/bench-scale otherwise)")
    parser.add_argument("--report", type=Path, help="the Markdown report (default: docs/benchmarks.md with --full, <out>/benchmarks.md or <out>/scale.md otherwise)")
    parser.add_argument("--systems", default="zabby,zookeeper")
    parser.add_argument("--deployments", help="standalone,3-server (default: both with --quick and --full, standalone with --profile-write)")
    parser.add_argument("--drivers", help=f"subset of {','.join(DRIVERS)} (default: java,kazoo with --quick, all with --full)")
    parser.add_argument("--workloads", help=f"comma-separated subset of: {', '.join(WORKLOADS)}")
    parser.add_argument("--layouts", default="default,spread", help=f"default and/or spread ({SPREAD.label()} Java client, for {', '.join(SPREAD_WORKLOADS)})")
    parser.add_argument("--spread", choices=("rotate", "shuffle"), default=SPREAD.spread,
                        help="spread layout: each process's server list starts at a different server (rotate), or ZooKeeper's client shuffles it")  # fmt: skip
    parser.add_argument("--seconds", type=float, help="measuring window of the throughput workloads")
    parser.add_argument("--latency-ops", type=int, help="requests of the one-at-a-time latency workloads")
    parser.add_argument("--rounds", type=int, help="times each row the goals read is measured, the systems' order reversed each time; "
                        "the report takes the median round (default 3 with --full, 1 otherwise)")
    parser.add_argument("--watchers", type=int, help="connections watching the node in watch-fanout")
    parser.add_argument("--resync-behind", help="comma-separated znode counts a restarted follower is behind by (default 300,10000,100000)")
    parser.add_argument("--no-scaling", action="store_true")
    parser.add_argument("--no-resync", action="store_true")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--scale-znodes", type=int, default=1_000_000, help="--scale: znodes of 100 B written while one follower is down")
    parser.add_argument("--scale-repeats", type=int, default=2, help="--scale: runs of each throughput workload per tree size")
    parser.add_argument("--zk-heap", help="ZooKeeper's -Xmx (default 512m; 4g with --scale)")
    parser.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                        help="a zoo.cfg line for every server of both systems, over the common ones (repeatable; e.g. forceSync=no, "
                             "snapCount=1000000000): an experiment, noted in the report")  # fmt: skip
    parser.add_argument("--profile-label", help="--profile-write: name of the output files (default: the zabby commit)")
    parser.add_argument("--zabby-root", type=Path, default=CHECKOUT, help="run the zabby servers from this checkout (e.g. a git worktree of an older commit)")
    parser.add_argument("--baseline-root", type=Path, help="--profile-write: also profile this checkout, alternating with --zabby-root run by run")
    parser.add_argument("--baseline-label", help="--profile-write: name of the baseline's output files (default: its zabby commit)")
    parser.add_argument("--wait-quiet", type=float, help="minutes to wait for the 1-minute load average to fall below --quiet-load (default 20 with --full, 0 otherwise)")
    parser.add_argument("--quiet-load", type=float, default=0.7)
    parser.add_argument("--from-records", type=Path, help="measure nothing: rebuild the table, plots and report from this results.jsonl (and what lies beside it)")
    parser.add_argument("--java-cache", type=Path, help="where ZkLoad.java is compiled (default ~/.cache/zabby-bench)")
    return parser, parser.parse_args(argv)


class Session:
    """The systems of this run, in one temporary folder; every one is stopped on the way out."""

    def __init__(self, workdir: Path, zabby_root: Path, zk_heap: str, settings: dict[str, str] | None = None) -> None:
        self.workdir, self.zabby_root, self.zk_heap = workdir, zabby_root, zk_heap
        self.settings = settings or {}
        self.live: list[System] = []

    def bring_up(self, name: str, deployment: str, tag: str, zabby_root: Path | None = None) -> System:
        system = self.make(name, deployment, tag, zabby_root)
        print(f"starting {name} {deployment} ({tag})", flush=True)
        system.start()
        return system

    def make(self, name: str, deployment: str, tag: str, zabby_root: Path | None = None) -> System:
        servers = 1 if deployment == "standalone" else 3
        system = make_system(name, self.workdir / f"{name}-{deployment}-{tag}", servers, zabby_root=zabby_root or self.zabby_root,
                             zk_heap=self.zk_heap, settings=self.settings)  # fmt: skip
        self.live.append(system)
        return system

    def bring_down(self, system: System) -> None:
        system.stop()
        self.live.remove(system)

    def stop_all(self) -> None:
        for system in list(self.live):
            self.bring_down(system)


def parse_settings(parser: argparse.ArgumentParser, lines: list[str], notes: list[str]) -> dict[str, str]:
    """--setting's KEY=VALUE lines as zoo.cfg settings, noted in ``notes`` for the report; a
    malformed one, or one that would change what the harness sets per server, is a usage error."""
    settings = {}
    for line in lines:
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        problem = setting_problem(key) if sep else f"{line!r} is not KEY=VALUE"
        if problem is None and not value:
            problem = f"{key} has no value"
        if problem is not None:
            parser.error(f"--setting {line}: {problem}")
        settings[key] = value
    if settings:
        notes.append("zoo.cfg changed for every server of both systems (--setting): "
                     + ", ".join(f"{key}={value}" for key, value in settings.items()))  # fmt: skip
    return settings


def wait_quiet(minutes: float, threshold: float) -> tuple[bool, float]:
    deadline = time.monotonic() + minutes * 60
    load = report.loadavg()
    while load >= threshold and time.monotonic() < deadline:
        print(f"waiting for a quiet machine: 1-minute load {load:.2f} >= {threshold}", flush=True)
        time.sleep(30)
        load = report.loadavg()
    return load < threshold, load


def pick_trailing(records: list[dict[str, Any]], count: int = 2) -> list[str]:
    """The workloads where zabby trails ZooKeeper most (standalone, Java client, default layout)."""
    by = report.keyed(records)
    scored = []
    for workload in WORKLOADS:
        r = report.ratio(by.get(("standalone", "java", "default", workload, "zabby")), by.get(("standalone", "java", "default", workload, "zookeeper")))
        if r is not None and workload != "watch-fanout":
            scored.append((r, workload))
    return [w for _, w in sorted(scored)[:count]]


def layouts(driver: str, workload: str, chosen: list[str], spread: Shape) -> list[Shape | None]:
    """The default layout of the driver (None), and the spread one where it applies."""
    out: list[Shape | None] = [None] if "default" in chosen else []
    if "spread" in chosen and driver == "java" and workload in SPREAD_WORKLOADS:
        out.append(spread)
    return out


def warm_up(ctx: Context, run: Run, group: list[System], driver: str, workloads: list[str]) -> None:
    """One unmeasured run of the first throughput workload on each freshly started system, so
    that no system's first measured run is a cold one (ZooKeeper's JVM compiles its request path
    in its first seconds under load).  Its records are of series ``warmup``: no table reads them."""
    first = next((workload for workload in workloads if WORKLOADS[workload].kind == "throughput"), None)
    if first is None:
        return
    for system in group:
        print(f"{system.name} {system.deployment} {driver} warm-up ({first})", flush=True)
        measure(ctx, run, system, driver, first, "warmup")


def measure_rounds(ctx: Context, run: Run, group: list[System], driver: str, workload: str, shape: Shape | None) -> None:
    """One row on each system of the group.  A row a target reads is measured
    ``ctx.limits.rounds`` times, the order of the systems reversed each round, so that neither always runs first
    and one slow minute of this machine does not decide the row (the report takes the median
    round, ``report.median_round``)."""
    deployment = group[0].deployment
    count = ctx.limits.rounds if is_goal_row(deployment, driver, layout_name(WORKLOADS[workload], shape), workload) else 1
    for number in range(count):
        for system in group if number % 2 == 0 else group[::-1]:
            print(f"{system.name} {deployment} {driver} {workload}" + (f" {shape.label()}" if shape else "") + (f" round {number + 1}/{count}" if count > 1 else ""), flush=True)
            measure(ctx, run, system, driver, workload, shape=shape, extra={"round": number} if count > 1 else None)


def run_matrix(args: argparse.Namespace, ctx: Context, run: Run, session: Session, plan: dict[str, Any]) -> dict[str, dict[str, Any]]:  # noqa: C901 -- one branch per system, driver, workload and --full extra
    """--quick / --full: every deployment x driver x workload x layout, the systems side by side;
    with --full also scaling, resync and the profiles of the trailing workloads."""
    systems, drivers, workloads, full = plan["systems"], plan["drivers"], plan["workloads"], plan["full"]
    spread = replace(SPREAD, spread=args.spread)
    for deployment in plan["deployments"]:
        for driver in drivers:
            # both systems up side by side, each workload run on one then the other, so a
            # change of background load hits both alike (an idle server costs ~nothing)
            group = [session.bring_up(name, deployment, driver) for name in systems if not (name == "zookeeper" and driver == "zabby-msgpack")]
            try:
                warm_up(ctx, run, group, driver, workloads)
                for workload in workloads:
                    for shape in layouts(driver, workload, plan["layouts"], spread):
                        measure_rounds(ctx, run, group, driver, workload, shape)
            finally:
                for system in group:
                    session.bring_down(system)
        if full and not args.no_scaling and "java" in drivers:
            group = [session.bring_up(name, deployment, "scaling") for name in systems]
            try:
                for workload in SCALING_WORKLOADS:
                    for procs in SCALING_PROCS:
                        for system in group:
                            print(f"{system.name} {deployment} scaling {workload} x{procs}", flush=True)
                            measure(ctx, run, system, "java", workload, "scaling", Shape(procs, 4, 16))
            finally:
                for system in group:
                    session.bring_down(system)
        if deployment != "standalone" and full and not args.no_resync:
            fill_driver = "java" if "java" in drivers else "kazoo"
            for name in systems:
                system = session.bring_up(name, deployment, "resync")
                try:
                    for behind in plan["resync_behind"]:
                        print(f"{name} {deployment} resync behind {behind}", flush=True)
                        resync(ctx, run, system, behind, fill_driver)
                finally:
                    session.bring_down(system)
    profiled = []
    if full and not args.no_profile and "zabby" in systems and "zookeeper" in systems and "java" in drivers:
        for workload in pick_trailing(run.records):
            profiled.append(workload)
            system = session.bring_up("zabby", "standalone", "profile")
            try:
                raw = run.path.parent / f"profile-{workload.replace('/', '-')}.txt"
                print(f"profiling zabby standalone on {workload}", flush=True)
                measure(ctx, run, system, "java", workload, "profile", profile={system.pids()[0]: raw})
            finally:
                session.bring_down(system)
    return trailing_profiles(run.path.parent, profiled)


def prepare(parser: argparse.ArgumentParser, args: argparse.Namespace, mode: str, notes: list[str]) -> dict[str, Any]:
    """What to run: systems, deployments, drivers and workloads that exist here; the Java build."""
    systems = [s for s in args.systems.split(",") if s]
    settings = parse_settings(parser, args.setting, notes)
    if mode == "profile":
        systems = ["zabby"]
    drivers = [d for d in (args.drivers or (",".join(DRIVERS) if mode == "full" else "java,kazoo")).split(",") if d]
    if mode in ("scale", "profile"):
        drivers = ["java"]
    workloads = args.workloads.split(",") if args.workloads else (list(WORKLOADS) if mode == "full" else QUICK_WORKLOADS)
    for workload in workloads:
        if workload not in WORKLOADS:
            parser.error(f"unknown workload {workload!r}")
    checkouts = []  # --profile-write: (label, root, commit), the baseline first
    for root, label in ((args.baseline_root, args.baseline_label), (args.zabby_root, args.profile_label)):
        if root is None:
            continue
        if not (root / "zabby" / "server" / "main.py").exists():
            parser.error(f"{root}: no zabby/server/main.py there (--zabby-root and --baseline-root name a zabby checkout)")
        commit = report.git_commit(root)
        checkouts.append((label or commit.replace("+local changes", "-dirty"), root.resolve(), commit))
    if len({label for label, _, _ in checkouts}) < len(checkouts):
        parser.error("--profile-write: the two checkouts need different labels (--baseline-label, --profile-label)")
    if "zookeeper" in systems:
        why = zookeeper_missing()
        if why:
            notes.append(f"ZooKeeper was not measured: {why}")
            print(notes[-1], file=sys.stderr)
            systems.remove("zookeeper")
    java_build = None
    if "java" in drivers:
        built = build_java(args.java_cache)
        if isinstance(built, str):
            if mode in ("scale", "profile"):
                parser.error(f"--{mode} needs the Java client: {built}")
            notes.append(f"The Java client was not used: {built}")
            print(notes[-1], file=sys.stderr)
            drivers.remove("java")
        else:
            java_build = built
    if ((mode == "full" and not args.no_profile) or mode == "profile") and py_spy() is None:
        parser.error("profiles need py-spy, which is not installed: pip install -e '.[bench]' (or pass --no-profile)")
    default_deployments = {"profile": "standalone", "scale": "3-server"}.get(mode, "standalone,3-server")
    return {"systems": systems, "drivers": drivers, "workloads": workloads, "java_build": java_build, "full": mode == "full", "checkouts": checkouts,
            "settings": settings,
            "deployments": (args.deployments or default_deployments).split(","), "layouts": args.layouts.split(","),
            "resync_behind": tuple(int(n) for n in args.resync_behind.split(",")) if args.resync_behind else RESYNC_BEHIND}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser, args = parse_args(argv)
    mode = "profile" if args.profile_write else "scale" if args.scale else "full" if args.full else "quick"
    limits = replace({"full": FULL_LIMITS, "scale": SCALE_LIMITS, "profile": PROFILE_LIMITS}.get(mode, QUICK_LIMITS))
    limits.seconds = args.seconds or limits.seconds
    limits.latency_ops = args.latency_ops or limits.latency_ops
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds must be at least 1, not {args.rounds}")
    limits.rounds = args.rounds or limits.rounds
    limits.watchers = args.watchers or limits.watchers
    out_dir = args.out or (CHECKOUT / "docs" / "bench" if mode in ("full", "profile") else CHECKOUT / "run" / f"bench-{mode}")
    report_path = args.report or (CHECKOUT / "docs" / "benchmarks.md" if mode == "full" else out_dir / ("scale.md" if mode == "scale" else "benchmarks.md"))
    if args.from_records and args.from_records.name == "scale.jsonl":
        records = read_records(args.from_records)
        write_scale_report(args.report or args.from_records.with_name("scale.md"), records, next(r for r in reversed(records) if r.get("kind") == "meta"))
        return 0
    if args.from_records:
        return rebuild(args.from_records, args.out or args.from_records.parent, report_path)
    notes: list[str] = []
    plan = prepare(parser, args, mode, notes)
    quiet_minutes = args.wait_quiet if args.wait_quiet is not None else (20.0 if mode == "full" else 0.0)
    quiet, load_start = wait_quiet(quiet_minutes, args.quiet_load) if quiet_minutes > 0 else (report.loadavg() < args.quiet_load, report.loadavg())
    machine = report.machine_info(args.zabby_root)
    machine["load_at_start"] = load_start
    machine["probe_at_start"] = report.speed_probe(Path(tempfile.gettempdir()))  # where the servers' data dirs go
    command = "python scripts/bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    print(f"{command}\nmachine: {json.dumps(machine)}", flush=True)
    started = time.monotonic()
    zk_heap = args.zk_heap or ("4g" if mode == "scale" else "512m")
    run = Run(out_dir, "scale.jsonl" if mode == "scale" else "results.jsonl") if mode != "profile" else None
    previous_handler = signal.signal(signal.SIGTERM, _on_term)
    trailing: dict[str, dict[str, Any]] = {}
    scale = ScaleOptions(znodes=args.scale_znodes, zk_heap=zk_heap, repeats=args.scale_repeats)
    try:
        with tempfile.TemporaryDirectory(prefix="zabby-bench-") as tmp:
            session = Session(Path(tmp), args.zabby_root.resolve(), zk_heap, plan["settings"])
            ctx = Context(Path(tmp), plan["java_build"], limits)
            try:
                if mode == "profile":
                    run_profile_write(ctx, out_dir, plan["checkouts"], plan["deployments"], session, command)
                    return 0
                if mode == "scale":
                    assert run is not None
                    run_scale(ctx, run, plan["systems"], scale, lambda name: session.make(name, "3-server", "scale"), notes)
                else:
                    assert run is not None
                    trailing = run_matrix(args, ctx, run, session, plan)
            finally:
                session.stop_all()
    except KeyboardInterrupt:
        notes.append("The run was interrupted; the tables hold what finished.")
        print(notes[-1], file=sys.stderr)
        if run is None:
            return 1
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    assert run is not None
    machine.update(load_at_end=report.loadavg(), quiet=quiet, probe_at_end=report.speed_probe(Path(tempfile.gettempdir())))
    minutes = (time.monotonic() - started) / 60
    meta = {"kind": "meta", "command": command, "machine": machine, "workloads": plan["workloads"], "notes": notes,
            "limits": vars(limits), "minutes": round(minutes, 1), "znodes": scale.znodes if mode == "scale" else None, "zk_heap": zk_heap,
            "settings": plan["settings"]}  # fmt: skip
    return finish(run, meta, report_path, out_dir, trailing)


def finish(run: Run, meta: dict[str, Any], report_path: Path, out_dir: Path, trailing: dict[str, dict[str, Any]]) -> int:
    """The meta record, the report; 1 when any run failed."""
    run.add(meta)
    machine = meta["machine"]
    print(f"\nzabby vs ZooKeeper 3.8 ({machine.get('cores')} cores, {machine.get('ram_gib')} GiB, kernel {machine.get('kernel')}), {meta['minutes']:.1f} min")
    if meta["znodes"]:
        write_scale_report(report_path, run.records, meta)
    else:
        write_report(report_path, out_dir, meta, run.records, trailing)
    print(f"\nrecords: {run.path}\nreport: {report_path}")
    return 0 if not any("error" in r for r in run.records) else 1


def _on_term(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def write_scale_report(path: Path, records: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """The --scale tables alone (docs/benchmarks.md shows them when scale.jsonl lies in docs/bench)."""
    machine = meta["machine"]
    text = "\n\n".join([
        f"# zabby vs ZooKeeper 3.8 at {meta['znodes']:,} znodes (3 servers)",
        " and ".join(f"`{c}`" for c in meta.get("commands", [meta["command"]])) +
        f": {meta['minutes']:.1f} minutes, zabby {machine.get('zabby_commit')}, ZooKeeper -Xmx{meta['zk_heap']}; "
        f"1-minute load {machine['load_at_start']:.2f} at the start, {machine['load_at_end']:.2f} at the end.",
        *(["\n".join(f"* {note}" for note in meta["notes"])] if meta["notes"] else []),
        "## Method", scale_method(meta),
        "## Goals", goals_table([], records), "## Tables", scale_tables(records),
    ])  # fmt: skip
    print("\n" + text)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
