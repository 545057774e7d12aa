"""``scripts/bench.py --profile-write``: where the time of one write goes in the zabby server.

For each deployment (standalone, and with ``--deployments 3-server`` the ensemble, the client
on a follower), a fresh zabby started from ``--zabby-root`` takes one-at-a-time creates of
100 B from ZooKeeper's Java client (the latency-write workload):

1. without a profiler: p50 / p99 latency and the server CPU per write (utime + stime of every
   server over the window, divided by the writes; by mode in the ensemble), in two rounds;
2. with py-spy sampling each server that handles the write (standalone: the one; ensemble:
   the leader and the follower the client is on) at 200 Hz for the window, twice: every
   non-idle thread (fsync in the disk threads shows) and the GIL holder only (Python CPU).

With ``--baseline-root OLD`` the same is done for the checkout OLD, alternating with the
other one run by run (OLD, new, OLD, new), so that a change of the machine's load between the
two does not pass for a change of the code.

Output, in ``<out>`` (default docs/bench), for a label (default the zabby commit):
``profile-write-<label>-<deployment>[-<role>].txt`` / ``-gil.txt`` (py-spy's raw stacks),
``.svg`` / ``-gil.svg`` (icicle graphs of the same), and ``profile-write-<label>.json``
(figures and summaries) that docs/benchmarks.md shows side by side with the other labels'.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from harness.bench import report
from harness.bench.flame import write_svg
from harness.bench.runner import WORKLOADS, Context, run_workload
from harness.bench.systems import System

WRITE = "latency-write"


def figures(record: dict[str, Any]) -> dict[str, Any]:
    """Latency and server CPU per write from a latency-write record."""
    ops = max(record["ops"], 1)
    return {
        "ops": record["ops"], "errors": record["errors"], "p50_ms": record["p50_ms"], "p99_ms": record["p99_ms"],
        "server_cpu_per_write_ms": round(1000 * record["server_cpu_s"] / ops, 4),
        "server_cpu_per_write_ms_by_mode": {mode: round(1000 * cpu / ops, 4) for mode, cpu in record.get("server_cpu_by_mode", {}).items()},
    }  # fmt: skip


def targets(system: System) -> dict[str, int]:
    """The servers one write goes through, by role: the standalone server, or the leader and
    the follower the latency client connects to (the first follower, as run_workload picks)."""
    modes = system.modes()
    if system.deployment == "standalone":
        return {"server": next(iter(system.ports))}
    leader = next(sid for sid, mode in modes.items() if mode == "leader")
    return {"leader": leader, "follower": next(sid for sid in system.ports if modes[sid] == "follower")}


def profile_files(system: System, out_dir: Path, label: str, stems: dict[str, str]) -> dict[str, Any]:
    """Summaries and icicle graphs of the raw stacks py-spy wrote, by role."""
    profiles: dict[str, Any] = {}
    for role, stem in stems.items():
        files: dict[str, Any] = {}
        for suffix, what in (("", "every non-idle thread"), ("-gil", "the GIL holder")):
            path = out_dir / f"{stem}{suffix}.txt"
            if not path.exists():
                continue
            summary = report.summarise_profile(path)
            title = f"zabby {label}, {system.deployment} {role}: one-at-a-time creates, {what} ({summary.get('samples', 0):,} samples)"
            svg = path.with_suffix(".svg")
            files["gil" if suffix else "threads"] = {"raw": path.name, "svg": svg.name if write_svg(path, svg, title) else None, "summary": summary}
        profiles[role] = files
    return profiles


def profiled_run(ctx: Context, system: System, out_dir: Path, label: str) -> dict[str, Any]:
    """One run with py-spy on every server on the write's path."""
    roles = targets(system)
    stems = {role: f"profile-write-{label}-{system.deployment}" + ("" if role == "server" else f"-{role}") for role in roles}
    raw = {system.pid(sid) or 0: out_dir / f"{stems[role]}.txt" for role, sid in roles.items()}
    record = run_workload(ctx, system, "java", WORKLOADS[WRITE], profile=raw)
    return {"profiled": figures(record), "profiles": profile_files(system, out_dir, label, stems)}


def averaged(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean of the runs' figures (each run's own in ``runs``)."""
    out: dict[str, Any] = {key: round(sum(r[key] for r in runs) / len(runs), 4) for key in ("p50_ms", "p99_ms", "server_cpu_per_write_ms")}
    out["ops"] = sum(r["ops"] for r in runs)
    modes = {mode for r in runs for mode in r["server_cpu_per_write_ms_by_mode"]}
    out["server_cpu_per_write_ms_by_mode"] = {m: round(sum(r["server_cpu_per_write_ms_by_mode"].get(m, 0) for r in runs) / len(runs), 4) for m in modes}
    out["runs"] = runs
    return out


def run_profile_write(ctx: Context, out_dir: Path, checkouts: list[tuple[str, Path, str]], deployments: list[str], session: Any,
                      command: str, rounds: int = 2) -> list[dict[str, Any]]:  # fmt: skip
    """For each deployment: ``rounds`` rounds, each starting a fresh zabby of every checkout in
    turn (label, root, commit) for a run without a profiler, the first round also for a run
    under py-spy; writes ``profile-write-<label>.json`` per checkout and returns them."""
    results: dict[str, dict[str, Any]] = {label: {"label": label, "zabby_commit": commit, "zabby_root": str(root), "command": command, "ts": round(time.time(), 1),
                       "load_at_start": report.loadavg(), "deployments": {}} for label, root, commit in checkouts}  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    for deployment in deployments:
        plain: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in checkouts}
        extra: dict[str, dict[str, Any]] = {}
        for round_number in range(rounds):
            for label, root, _ in checkouts:
                system = session.bring_up("zabby", deployment, f"profile-write-{label}-{round_number}", root)
                try:
                    print(f"one write: zabby {label} {deployment}, round {round_number + 1}", flush=True)
                    plain[label].append(figures(run_workload(ctx, system, "java", WORKLOADS[WRITE])))
                    if round_number == 0:
                        extra[label] = profiled_run(ctx, system, out_dir, label)
                finally:
                    session.bring_down(system)
        for label, _, _ in checkouts:
            results[label]["deployments"][deployment] = {"plain": averaged(plain[label]), "window_s": ctx.limits.latency_seconds, **extra[label]}
    for result in results.values():
        result["load_at_end"] = report.loadavg()
        path = out_dir / f"profile-write-{result['label']}.json"
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(text_summary(result))
        print(f"\nprofile: {path}")
    return list(results.values())


def text_summary(result: dict[str, Any]) -> str:
    lines = [f"\nOne write, zabby {result['label']} ({result.get('zabby_commit')}); load {result['load_at_start']:.2f} → {result['load_at_end']:.2f}"]
    for deployment, data in result["deployments"].items():
        plain = data["plain"]
        rounds = " / ".join(f"{r['p50_ms']:.3f} ms, {r['server_cpu_per_write_ms']:.3f} ms" for r in plain.get("runs", []))
        lines.append(f"\n{deployment}: p50 {plain['p50_ms']:.3f} ms, p99 {plain['p99_ms']:.3f} ms, server CPU per write "
                     f"{plain['server_cpu_per_write_ms']:.3f} ms {plain['server_cpu_per_write_ms_by_mode']} (followers added up; "
                     f"{plain['ops']:,} writes without a profiler; by round: p50, CPU per write {rounds})")  # fmt: skip
        for role, files in data["profiles"].items():
            gil = files.get("gil", {}).get("summary", {})
            lines.append(f"  {role}, GIL holder, self time by function:")
            lines += [f"    {pct:5.1f}% {name}" for name, pct in gil.get("self_by_function", [])[:8]]
    return "\n".join(lines)


def load_profiles(out_dir: Path) -> list[dict[str, Any]]:
    """Every ``profile-write-<label>.json`` in ``out_dir``, oldest first."""
    found = []
    for path in out_dir.glob("profile-write-*.json"):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(found, key=lambda r: r.get("ts", 0))
