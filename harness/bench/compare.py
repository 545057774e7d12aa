#!/usr/bin/env python3
"""An old commit against this working tree, side by side, on the rows users feel (issue 57):

    python -m harness.bench.compare 50448ec                 # 3 rounds, 8 s windows
    python -m harness.bench.compare 55ce23b --rounds 5 --rows pipelined

The old commit is checked out into a temporary git worktree of this repository; both run the
same load driver (ZooKeeper's own async Java client, harness/bench/ZkLoad.java, from this
checkout) against zabby servers of their own code, started afresh for each measurement, the
order swapped each round.  The rows:

* 3-server pipelined create and setData (4 client processes x 1 connection x 32 in flight,
  each connection given every server in turn: the ``spread`` layout), in ops/s;
* one-at-a-time create, setData and getData (1 connection, 1 outstanding), standalone and on
  3 servers, in ops/s (their median latency beside).

For each row: both systems' value in every round, the ratio new/old per round, its median and
spread, and the servers' CPU per op (the leader's and the followers', from /proc; the median of
the rounds), with the user time of it apart: the interpreter's own work, where a regression of
the Python code shows (the system time of sockets and fsyncs swings with the machine's load).
A row whose median ratio is more than 5% below 1.0 is FLAGGED, and the command exits 1.
``--pin`` places the one-at-a-time rows' processes: the load driver on CPU 1 and, standalone,
the server on CPU 0.  Left to the scheduler, the Java client's threads land with the server's
or apart from it run by run, and a getData one at a time reads ~6,000 or ~13,000/s whatever
the commit (a ratio of 0.6x or 2x); pinned, a commit against itself read 0.96-1.07x on the
one-at-a-time rows (docs/benchmarks.md, stop 76).  Even so a write one at a time moves by a
few percent from round to round (the disk's fsyncs above all): more ``--rounds`` narrow the
median.
``--profile DIR`` runs each row once more on each side with py-spy on every server (docs/bench
shows how to read them; those runs are not pinned).  A quiet machine matters: it waits (``--wait-quiet``) for the 1-minute
load to fall below ``--quiet-load``.  A quiet machine can still change speed: the report's speed
probe (``report.speed_probe``) runs before the rows and after them, and where its Python loop
moved by more than 10% a line under the table says so (on one VM it moved by a third within an hour, and the
same commit against itself read 0.86-1.15x: docs/benchmarks.md, stop 77).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.bench import report
from harness.bench.cli import Session, wait_quiet
from harness.bench.runner import SPREAD, Context, Limits, Shape, build_java
from harness.bench.series import Run, measure
from harness.bench.systems import System
from harness import CHECKOUT

FLAG_BELOW = 0.95
PINNED_SERVER_CPUS, PINNED_CLIENT_CPUS = {0}, {1}  # --pin: a one-at-a-time row's standalone server, its load driver


@dataclass(frozen=True)
class Row:
    deployment: str
    workload: str
    shape: Shape | None

    @property
    def name(self) -> str:
        kind = "pipelined" if self.shape else "one at a time"
        return f"{self.deployment} {kind} {self.workload.removeprefix('latency-').replace('write', 'create').replace('read', 'getData')}"


PIPELINED = [Row("3-server", "create-100B", SPREAD), Row("3-server", "setData", SPREAD)]
ONE_AT_A_TIME = [Row(deployment, workload, None) for deployment in ("standalone", "3-server")
                 for workload in ("latency-write", "latency-set", "latency-read")]  # fmt: skip
ROWS = {"pipelined": PIPELINED, "one-at-a-time": ONE_AT_A_TIME, "all": PIPELINED + ONE_AT_A_TIME}


def old_worktree(commit: str, folder: Path) -> tuple[Path, str]:
    """``commit`` checked out at ``folder`` (a detached worktree of this repository), and its hash."""
    resolved = subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "--verify", f"{commit}^{{commit}}"], capture_output=True, text=True)
    if resolved.returncode:
        raise SystemExit(f"{commit}: no such commit in {CHECKOUT} ({resolved.stderr.strip()})")
    subprocess.run(["git", "-C", str(CHECKOUT), "worktree", "add", "--detach", "--quiet", str(folder), resolved.stdout.strip()], check=True)
    return folder, resolved.stdout.strip()[:10]


@contextmanager
def old_checkout(commit: str, folder: Path) -> Iterator[tuple[Path, str]]:
    """``old_worktree`` for the length of a with-block, the worktree removed after it."""
    root, short = old_worktree(commit, folder)
    try:
        yield root, short
    finally:
        subprocess.run(["git", "-C", str(CHECKOUT), "worktree", "remove", "--force", str(root)], check=False)


def cpu_per_op(record: dict[str, Any], key: str = "server_cpu_by_mode") -> dict[str, float]:
    """The servers' CPU microseconds per op, by role (leader, follower: their sum; standalone):
    user and system time, or, with ``key="server_user_cpu_by_mode"``, the user time alone."""
    ops = max(1, record.get("ops", 0))
    return {mode: round(1e6 * seconds / ops, 1) for mode, seconds in record.get(key, {}).items()}


def median_cpu_per_op(records: list[dict[str, Any]], key: str) -> dict[str, float]:
    """Each role's median over the rounds of ``cpu_per_op``."""
    by_role: dict[str, list[float]] = {}
    for record in records:
        for role, value in cpu_per_op(record, key).items():
            by_role.setdefault(role, []).append(value)
    return {role: round(statistics.median(values), 1) for role, values in by_role.items()}


def profiled(ctx: Context, out: Run, system: System, row: Row, side: str, folder: Path) -> None:
    """One more run of ``row`` with py-spy on every server (each non-idle thread, and the GIL
    holder alone), written as ``<folder>/<side>-<row>-<role>[-gil].txt`` with their summaries."""
    modes = system.modes()
    roles: dict[str, int] = {}
    for sid in sorted(system.ports):
        role = "server" if system.deployment == "standalone" else modes.get(sid, "unknown")
        roles[f"{role}{sum(1 for name in roles if name.startswith(role)) + 1 if role == 'follower' else ''}"] = sid
    stem = row.name.replace(" ", "-")
    paths = {role: folder / f"{side}-{stem}-{role}.txt" for role in roles}
    measure(ctx, out, system, "java", row.workload, "profile", row.shape, profile={system.pid(sid) or 0: paths[role] for role, sid in roles.items()},
            extra={"side": side})  # fmt: skip
    for role, path in paths.items():
        for raw in (path, path.with_name(path.stem + "-gil.txt")):
            if raw.exists():
                raw.with_suffix(".json").write_text(json.dumps(report.summarise_profile(raw, top=40), indent=1))


@contextmanager
def on_cpus(cpus: set[int] | None) -> Iterator[None]:
    """The processes started meanwhile run on ``cpus`` (a child inherits its parent's affinity);
    None: wherever the scheduler puts them."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def pinning_error() -> str | None:
    """Why ``--pin`` cannot place the processes here, or None."""
    if not hasattr(os, "sched_setaffinity"):
        return "--pin needs sched_setaffinity (Linux)"
    missing = (PINNED_SERVER_CPUS | PINNED_CLIENT_CPUS) - os.sched_getaffinity(0)
    return f"--pin needs CPUs {sorted(missing)}, which this process may not use" if missing else None


def run_rows(rows: list[Row], old_root: Path, rounds: int, limits: Limits, workdir: Path, out: Run,
             profile: Path | None = None, pin: bool = False) -> dict[str, list[dict[str, Any]]]:  # fmt: skip
    """Every row, ``rounds`` times on each side, alternating (and profiled once more, with
    ``profile``); the records by row name.  Each measurement has servers of its own, started
    for it: a set of server processes kept for every round carries its own luck (its memory
    layout, its hash seed, where its leader landed) into all of them, and an A/A run of one
    commit against itself read 0.87x and 0.88x on the pipelined rows that way.  With ``pin``,
    the one-at-a-time rows' processes are placed (see the module's docstring)."""
    java = build_java(workdir / "java")
    if isinstance(java, str):
        raise SystemExit(f"the Java load driver cannot be built: {java}")
    ctx = Context(workdir, java, limits)
    session = Session(workdir, CHECKOUT, "512m")
    roots = {"old": old_root, "new": CHECKOUT}
    found: dict[str, list[dict[str, Any]]] = {}
    try:
        for index, row in enumerate(rows):
            pinned = pin and row.shape is None
            server_cpus = PINNED_SERVER_CPUS if pinned and row.deployment == "standalone" else None
            for number in range(rounds):
                for side in ("old", "new") if number % 2 == 0 else ("new", "old"):
                    print(f"{row.name}: {side}, round {number + 1}/{rounds}", flush=True)
                    with on_cpus(server_cpus):
                        system = session.bring_up("zabby", row.deployment, f"{side}-{index}-{number}", roots[side])
                    try:
                        with on_cpus(PINNED_CLIENT_CPUS if pinned else None):
                            record = measure(ctx, out, system, "java", row.workload, "compare", row.shape,
                                             extra={"side": side, "round": number, "pinned": pinned})  # fmt: skip
                    finally:
                        session.bring_down(system)
                    found.setdefault(row.name, []).append(record)
            if profile is not None:
                for side in ("old", "new"):
                    system = session.bring_up("zabby", row.deployment, f"{side}-{index}-profiled", roots[side])
                    try:
                        profiled(ctx, out, system, row, side, profile)
                    finally:
                        session.bring_down(system)
    finally:
        session.stop_all()
    return found


def table(found: dict[str, list[dict[str, Any]]], old_label: str) -> tuple[str, list[str]]:
    """The comparison's Markdown table, and the rows flagged."""
    lines = [f"| row | old ({old_label}) ops/s by round | new ops/s by round | new/old by round | median (spread) | CPU µs/op old → new | of it user µs/op old → new |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    flagged = []
    for name, records in found.items():
        by_side: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
        for record in sorted(records, key=lambda r: r.get("round", 0)):
            by_side[record["side"]].append(record)
        old, new = ([r.get("rate", 0.0) for r in by_side[side]] for side in ("old", "new"))
        ratios = [n / o if o else 0.0 for o, n in zip(old, new)]
        median = statistics.median(ratios) if ratios else 0.0
        if median < FLAG_BELOW:
            flagged.append(name)
        cpu, user = (" → ".join("/".join(f"{mode} {value}" for mode, value in sorted(median_cpu_per_op(by_side[side], key).items()))
                                for side in ("old", "new") if by_side[side])
                     for key in ("server_cpu_by_mode", "server_user_cpu_by_mode"))  # fmt: skip
        latency = ""
        if "p50_ms" in by_side["new"][0]:
            latency = f" (p50 {statistics.median(r['p50_ms'] for r in by_side['old']):.2f} → {statistics.median(r['p50_ms'] for r in by_side['new']):.2f} ms)"
        lines.append(f"| {name}{latency} | {', '.join(f'{v:,.0f}' for v in old)} | {', '.join(f'{v:,.0f}' for v in new)} | "
                     f"{', '.join(f'{r:.2f}' for r in ratios)} | **{median:.2f}×** ({min(ratios, default=0):.2f}–{max(ratios, default=0):.2f})"
                     f"{' FLAGGED' if median < FLAG_BELOW else ''} | {cpu} | {user} |")  # fmt: skip
    return "\n".join(lines), flagged


def run_meta(old: str, old_hash: str, probe_at_start: dict[str, float], probe_at_end: dict[str, float]) -> dict[str, Any]:
    """The last record of a ``--json`` file: the old commit and the speed probes around the rows."""
    return {"ts": round(time.time(), 1), "kind": "meta", "old": old, "old_hash": old_hash, "probe_at_start": probe_at_start, "probe_at_end": probe_at_end}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", help="the commit to compare this working tree with (a hash, a tag, HEAD~3)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0, help="each pipelined window (default 8)")
    parser.add_argument("--latency-ops", type=int, default=3000, help="requests of each one-at-a-time row (default 3,000)")
    parser.add_argument("--rows", choices=sorted(ROWS), default="all")
    parser.add_argument("--json", type=Path, help="also write every run's record here (JSON lines)")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="then profile each row once more on each side (py-spy), into DIR")
    parser.add_argument("--wait-quiet", type=float, default=10.0, help="minutes to wait for a quiet machine (default 10)")
    parser.add_argument("--quiet-load", type=float, default=0.7)
    parser.add_argument("--pin", action="store_true", help="one-at-a-time rows: the load driver on CPU 1, a standalone server on CPU 0")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.seconds <= 0 or args.latency_ops < 1:
        parser.error("--rounds, --seconds and --latency-ops must be positive")
    if args.pin and (why := pinning_error()) is not None:
        parser.error(why)
    quiet, load = wait_quiet(args.wait_quiet, args.quiet_load)
    if not quiet:
        print(f"warning: the machine is not quiet (1-minute load {load:.2f}): the figures are noisier", flush=True)
    limits = replace(Limits(), seconds=args.seconds, latency_ops=args.latency_ops)
    with tempfile.TemporaryDirectory(prefix="zabby-compare-") as folder:
        workdir = Path(folder)
        with old_checkout(args.old, workdir / "old") as (old_root, old_hash):
            out = Run(workdir / "records")
            if args.profile:
                args.profile.mkdir(parents=True, exist_ok=True)
            probe_at_start = report.speed_probe(workdir)
            found = run_rows(ROWS[args.rows], old_root, args.rounds, limits, workdir, out, args.profile, args.pin)
            probe_at_end = report.speed_probe(workdir)
            if args.json:
                meta = run_meta(args.old, old_hash, probe_at_start, probe_at_end)
                args.json.write_text("".join(json.dumps(record) + "\n" for record in [*out.records, meta]))
    text, flagged = table(found, old_hash)
    placed = ", one-at-a-time rows pinned (--pin)" if args.pin and any(row.shape is None for row in ROWS[args.rows]) else ""
    print(f"\n{args.old} ({old_hash}) against the working tree, {args.rounds} rounds, alternating{placed}:\n\n{text}\n")
    print(report.speed_note(probe_at_start, probe_at_end))
    return flagged_exit(flagged, f"median more than {100 * (1 - FLAG_BELOW):.0f}% below the old commit")


def flagged_exit(flagged: list[str], rule: str) -> int:
    """The command's exit code, 1 where rows were flagged (printed, with the ``rule`` that flags them)."""
    if flagged:
        print(f"FLAGGED ({rule}): {', '.join(flagged)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
