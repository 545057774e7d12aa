"""``scripts/bench.py --profile-write``: where the time of one write goes in the zabby server.

For each deployment (standalone, and with ``--deployments 3-server`` the ensemble, the client
on a follower), a fresh zabby started from ``--zabby-root`` takes one-at-a-time creates of
100 B from ZooKeeper's Java client (the latency-write workload), twice:

1. without a profiler: p50 / p99 latency and the server CPU per write (utime + stime of every
   server over the window, divided by the writes; by mode in the ensemble);
2. with py-spy sampling each server that handles the write (standalone: the one; ensemble:
   the leader and the follower the client is on) at 200 Hz for the window, twice: every
   non-idle thread (fsync in the disk threads shows) and the GIL holder only (Python CPU).

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

import bench_report as report
from bench_flame import write_svg
from bench_runner import WORKLOADS, Context, run_workload
from bench_systems import System

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


def profile_deployment(ctx: Context, system: System, out_dir: Path, label: str) -> dict[str, Any]:
    plain = run_workload(ctx, system, "java", WORKLOADS[WRITE])
    roles = targets(system)
    stems = {role: f"profile-write-{label}-{system.deployment}" + ("" if role == "server" else f"-{role}") for role in roles}
    raw = {system.pid(sid) or 0: out_dir / f"{stems[role]}.txt" for role, sid in roles.items()}
    profiled = run_workload(ctx, system, "java", WORKLOADS[WRITE], profile=raw)
    out: dict[str, Any] = {"plain": figures(plain), "profiled": figures(profiled), "window_s": ctx.limits.latency_seconds, "profiles": {}}
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
        out["profiles"][role] = files
    return out


def run_profile_write(ctx: Context, out_dir: Path, label: str, deployments: list[str], bring_up: Any, bring_down: Any,
                      machine: dict[str, Any], command: str) -> dict[str, Any]:  # fmt: skip
    """Every deployment in turn; writes and returns ``profile-write-<label>.json``."""
    result: dict[str, Any] = {"label": label, "zabby_commit": machine.get("zabby_commit"), "command": command, "ts": round(time.time(), 1),
                              "load_at_start": report.loadavg(), "deployments": {}}  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    for deployment in deployments:
        system = bring_up("zabby", deployment, "profile-write")
        try:
            print(f"profiling one write: zabby {deployment} ({label})", flush=True)
            result["deployments"][deployment] = profile_deployment(ctx, system, out_dir, label)
        finally:
            bring_down(system)
    result["load_at_end"] = report.loadavg()
    path = out_dir / f"profile-write-{label}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(text_summary(result))
    print(f"\nprofile: {path}")
    return result


def text_summary(result: dict[str, Any]) -> str:
    lines = [f"\nOne write, zabby {result['label']} ({result.get('zabby_commit')}); load {result['load_at_start']:.2f} → {result['load_at_end']:.2f}"]
    for deployment, data in result["deployments"].items():
        plain = data["plain"]
        lines.append(f"\n{deployment}: p50 {plain['p50_ms']:.3f} ms, p99 {plain['p99_ms']:.3f} ms, server CPU per write "
                     f"{plain['server_cpu_per_write_ms']:.3f} ms {plain['server_cpu_per_write_ms_by_mode']} ({plain['ops']:,} writes, no profiler)")  # fmt: skip
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
