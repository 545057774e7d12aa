"""What each server process spends on a write: a named old commit against the working tree.

    python -m harness.bench.window 50448ec                          # 3-server pipelined setData and create
    python -m harness.bench.window 50448ec --rounds 5 --profile     # and cProfile's Python calls per write
    python -m harness.bench.window HEAD --setting watchHistoryTxns=0 --new-only-setting   # one setting's cost

The compare (``harness.bench.compare``) reads rates, which move by a tenth from run to run on a
shared machine.  This reads, inside each server, what its process spent over the measured window
alone: a ``sitecustomize`` (``harness/bench/window_site``) put first on the servers' PYTHONPATH
takes SIGUSR2 as the window's start and SIGUSR1 as its end, and writes the process's user and
system CPU, minor faults, the cyclic collector's runs, its calls of the read(2)/write(2) family
(not send/recv) and the times it slept (voluntary context switches), and with ``--profile``
cProfile's stats.  The load is the compare's (ZooKeeper's Java client; pipelined rows 4 processes
x 32 in flight, spread over the servers); the two sides alternate, each run on servers of its own.

It prints, per workload and server role (``follower`` is one follower, the mean of both), the
median over the rounds of: user and system µs per write; minor faults, young collections,
read/write calls and sleeps per 1,000 writes; and with ``--profile`` the Python calls per
write (builtins apart), with the rates and the cores the whole machine kept busy over the window
(from /proc/stat: servers and load driver; below the core count, the load stalls on something
other than CPU).
A server's user CPU per write moved by about 5% between runs where the rates moved by 10-15%;
on a machine whose own speed changes it moves with it, so the report's speed probe runs before
and after, and a line under the table says where the probe moved by more than 10%.  The calls
and sleeps are counts, which the machine's speed moves far less: for a write one at a time only
through a server's own wakeups per second, spread over fewer writes when the rate falls (stop
78: a 3-server create one at a time made the same read/write calls within 1-2% on 50448ec and
today's code while the rates moved by a third; its sleeps moved by 3-10% from round to round);
pipelined, how many writes one call carries may move with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import shutil
import signal
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness import CHECKOUT
from harness.bench.cli import Session, parse_settings, wait_quiet
from harness.bench import report
from harness.bench.compare import old_checkout, run_meta
from harness.bench.runner import SPREAD, Context, Limits, build_java
from harness.bench.series import Run, measure
from harness.bench.systems import System

SITE = Path(__file__).resolve().parent / "window_site"


def _signal(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def machine_ticks() -> tuple[int, int]:
    """The machine's (busy, all) CPU ticks since boot, from /proc/stat (idle and iowait are not busy)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def busy_cores(start: tuple[int, int], end: tuple[int, int]) -> float:
    """The cores the whole machine kept busy between two ``machine_ticks`` (servers and load driver)."""
    busy, total = end[0] - start[0], end[1] - start[1]
    return (os.cpu_count() or 1) * busy / total if total > 0 else 0.0


def python_calls(stats_path: Path) -> int:
    """The Python function calls a profile counted (builtins, ``~``, apart)."""
    return sum(calls for (file, _, _), (_, calls, _, _, _) in pstats.Stats(str(stats_path)).stats.items() if file != "~")  # type: ignore[attr-defined]


def roles_of(system: System) -> dict[int, str]:
    """Each server's pid and its role: ``leader``, ``follower`` (either) or ``standalone``."""
    modes = system.modes()
    return {pid: modes.get(sid, "unknown") for sid in system.ports if (pid := system.pid(sid)) is not None}


def spent_per_write(folder: Path, roles: dict[int, str], writes: int) -> dict[str, dict[str, float]]:
    """What each role's processes wrote in ``folder``, per write (a role of two: their mean)."""
    by_role: dict[str, list[dict[str, float]]] = {}
    for pid, role in roles.items():
        path = folder / f"{pid}.json"
        if not path.exists():
            continue
        spent = json.loads(path.read_text())
        figures = {"user_us": 1e6 * spent["user_s"] / writes, "system_us": 1e6 * spent["system_s"] / writes,
                   "faults_per_1k": 1e3 * spent["minor_faults"] / writes,
                   "young_per_1k": 1e3 * spent["collections"].get("0", [0, 0.0])[0] / writes,
                   "io_calls_per_1k": 1e3 * spent["io_calls"] / writes, "sleeps_per_1k": 1e3 * spent["sleeps"] / writes}  # fmt: skip
        profile = folder / f"{pid}.prof"
        if profile.exists():
            figures["calls"] = python_calls(profile) / writes
        by_role.setdefault(role, []).append(figures)
    return {role: {key: statistics.mean(f[key] for f in runs) for key in runs[0]} for role, runs in by_role.items()}


def run_sides(roots: dict[str, Path], settings: dict[str, dict[str, str]], workloads: list[str], deployment: str, rounds: int,
              limits: Limits, workdir: Path, profile: bool, keep: Path | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Every workload, ``rounds`` times on each side, alternating; a record per run with its figures by role.

    With ``keep``, each run's profiles are copied there as ``<side>-<workload>-<round>-<role>-<pid>.prof``."""
    java = build_java(workdir / "java")
    if isinstance(java, str):
        raise SystemExit(f"the Java load driver cannot be built: {java}")
    window = workdir / "window"
    window.mkdir()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH", "")]))
    os.environ["ZABBY_WINDOW_OUT"] = str(window)
    os.environ["ZABBY_WINDOW_PROFILE"] = "1" if profile else "0"
    ticks: dict[str, tuple[int, int]] = {}

    def window_start(pids: list[int]) -> None:
        _signal(pids, signal.SIGUSR2)
        ticks["start"] = machine_ticks()

    def window_end(pids: list[int]) -> None:
        ticks["end"] = machine_ticks()
        _signal(pids, signal.SIGUSR1)

    ctx = Context(workdir, java, limits, window_hooks=(window_start, window_end))
    session = Session(workdir, CHECKOUT, "512m")
    out = Run(workdir / "records")
    records = []
    try:
        for number in range(rounds):
            for side in list(roots) if number % 2 == 0 else list(roots)[::-1]:
                for workload in workloads:
                    session.settings = settings[side]
                    system = session.bring_up("zabby", deployment, f"{side}-{workload}-{number}", roots[side])
                    try:
                        for stale in window.iterdir():
                            stale.unlink()
                        roles = roles_of(system)
                        record = measure(ctx, out, system, "java", workload, "window", None if workload.startswith("latency") else SPREAD,
                                         extra={"side": side, "round": number})  # fmt: skip
                        record["spent"] = spent_per_write(window, roles, max(1, record.get("ops", 0)))
                        if "start" in ticks and "end" in ticks:
                            record["busy_cores"] = busy_cores(ticks.pop("start"), ticks.pop("end"))
                        if keep is not None:
                            for pid, role in roles.items():
                                if (kept := window / f"{pid}.prof").exists():
                                    shutil.copyfile(kept, keep / f"{side}-{workload}-{number}-{role}-{pid}.prof")
                        records.append(record)
                    finally:
                        session.bring_down(system)
    finally:
        session.stop_all()
    return records


def table(records: list[dict[str, Any]], sides: list[str]) -> str:
    """The medians over the rounds, by workload and role, side by side."""
    keys = [("user_us", "user µs/write"), ("system_us", "system µs/write"), ("faults_per_1k", "minor faults /1k"),
            ("young_per_1k", "young collections /1k"), ("io_calls_per_1k", "read/write calls /1k"), ("sleeps_per_1k", "sleeps /1k"),
            ("calls", "Python calls/write")]  # fmt: skip
    shown = [(key, label) for key, label in keys if any(key in f for r in records for f in r.get("spent", {}).values())]
    lines = ["| workload | role | " + " | ".join(f"{label} ({' → '.join(sides)})" for _, label in shown) + " | ops/s |",
             "|---|---|" + "---|" * (len(shown) + 1)]  # fmt: skip
    for workload in dict.fromkeys(r["workload"] for r in records):
        runs = [r for r in records if r["workload"] == workload and "spent" in r]
        rates = " → ".join(f"{statistics.median(r['rate'] for r in runs if r['side'] == side):,.0f}" for side in sides)
        busy = [[r["busy_cores"] for r in runs if r["side"] == side and "busy_cores" in r] for side in sides]
        if all(busy):
            rates += " (machine busy " + " → ".join(f"{statistics.median(b):.2f}" for b in busy) + f" of {os.cpu_count()} cores)"
        for role in sorted({role for r in runs for role in r["spent"]}):
            cells = []
            for key, _ in shown:
                values = [statistics.median(v) if (v := [r["spent"][role][key] for r in runs if r["side"] == side and key in r["spent"].get(role, {})]) else float("nan")
                          for side in sides]  # fmt: skip
                change = f" ({100 * (values[-1] / values[0] - 1):+.0f}%)" if values[0] and len(values) > 1 else ""
                cells.append(" → ".join(f"{v:.1f}" for v in values) + change)
            lines.append(f"| {workload} | {role} | " + " | ".join(cells) + f" | {rates} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", help="the commit to compare the working tree with (a hash, a tag, HEAD~3)")
    parser.add_argument("--workloads", default="setData,create-100B", help="comma-separated (default setData,create-100B; latency-set etc.: one at a time)")
    parser.add_argument("--deployment", choices=("standalone", "3-server"), default="3-server")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0, help="each pipelined window (default 6)")
    parser.add_argument("--profile", action="store_true", help="cProfile in every server: Python calls per write")
    parser.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE", help="a zoo.cfg setting for both sides")
    parser.add_argument("--new-only-setting", action="store_true", help="the --setting lines for the working tree's side only")
    parser.add_argument("--keep-profiles", type=Path, metavar="DIR", help="with --profile: copy each run's profiles into DIR")
    parser.add_argument("--json", type=Path, help="also write every run's record here (JSON lines)")
    parser.add_argument("--wait-quiet", type=float, default=10.0, help="minutes to wait for a quiet machine (default 10)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.seconds <= 0:
        parser.error("--rounds and --seconds must be positive")
    if args.keep_profiles is not None:
        args.keep_profiles.mkdir(parents=True, exist_ok=True)
    settings = parse_settings(parser, args.setting, [])
    workloads = [w for w in args.workloads.split(",") if w]
    quiet, load = wait_quiet(args.wait_quiet, 0.7)
    if not quiet:
        print(f"warning: the machine is not quiet (1-minute load {load:.2f}): the figures are noisier", flush=True)
    with tempfile.TemporaryDirectory(prefix="zabby-window-") as folder:
        workdir = Path(folder)
        with old_checkout(args.old, workdir / "old") as (old_root, old_hash):
            sides = {"old": old_root, "new": CHECKOUT}
            probe_at_start = report.speed_probe(workdir)
            records = run_sides(sides, {"old": {} if args.new_only_setting else settings, "new": settings}, workloads, args.deployment,
                                args.rounds, replace(Limits(), seconds=args.seconds), workdir, args.profile, args.keep_profiles)  # fmt: skip
            probe_at_end = report.speed_probe(workdir)
    if args.json:
        args.json.write_text("".join(json.dumps(record) + "\n" for record in [*records, run_meta(args.old, old_hash, probe_at_start, probe_at_end)]))
    print(f"\n{args.old} ({old_hash}) against the working tree, {args.deployment}, {args.rounds} rounds, alternating (medians):\n")
    print(table(records, ["old", "new"]))
    print(report.speed_note(probe_at_start, probe_at_end))
    return 0


if __name__ == "__main__":
    sys.exit(main())
