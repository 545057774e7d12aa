"""What scripts/bench.py runs around single workloads: the run's records (a JSON-lines file
written as they come), one measured workload with its failure captured, and follower
restarts (the resync series of --full, the waits the --scale mode times).
"""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path
from typing import Any

from harness.bench.runner import WORKLOADS, Context, Shape, run_clients, run_workload
from harness.bench.systems import System, cpu_of


class Run:
    """The records of this run, appended to ``<out>/<name>`` as they come."""

    def __init__(self, out_dir: Path, name: str = "results.jsonl") -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.path = out_dir / name
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
            profile: dict[int, Path] | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """One workload on one system; a failure becomes a record with ``error`` (and the server
    logs next to the records) so one failed run does not lose the others."""
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
    record.update(extra or {})
    run.add(record)
    return record


def zxid_of(system: System, sid: int) -> int:
    """The last zxid server ``sid`` applied (srvr's Zxid), -1 while it does not serve."""
    zxid = system.srvr(sid).get("Zxid", "")
    return int(zxid, 16) if zxid.startswith("0x") else -1


def wait_stable_zxid(system: System, sid: int, quiet_s: float = 1.0, wait_s: float = 120.0) -> int:
    """The zxid of server ``sid`` once it has not moved for ``quiet_s`` (closing sessions are
    txns too)."""
    deadline = time.monotonic() + wait_s
    zxid, since = zxid_of(system, sid), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = zxid_of(system, sid)
        if now != zxid:
            zxid, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return zxid
    raise TimeoutError(f"{system.name}: the zxid of server {sid} still moving after {wait_s} s")


def wait_caught_up(system: System, sid: int, leader: int, wait_s: float) -> bool:
    """Until server ``sid`` serves as a follower at the leader's zxid (polled every 10 ms)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        stats = system.srvr(sid)
        if stats.get("Mode") == "follower":
            target = zxid_of(system, leader)
            if target >= 0 and int(stats.get("Zxid", "-0x1"), 16) >= target:
                return True
        time.sleep(0.01)
    return False


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


def sync_counts(system: System, leader: int) -> tuple[int, int]:
    """The leader's (SNAP, DIFF) counters: syncs it sent to learners so far."""
    stats = system.mntr(leader)
    return int(stats.get("zk_snap_count", 0)), int(stats.get("zk_diff_count", 0))


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
        snaps0, diffs0 = sync_counts(system, leader)
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
        follower_pid = system.pid(follower)
        follower_cpu = cpu_of(follower_pid) if follower_pid else 0.0
        record["follower_cpu_s"] = round(follower_cpu, 2)
        record["leader_cpu_s"] = round(total_cpu - follower_cpu - cpu0, 2)  # the other (live) servers
        snaps, diffs = (a - b for a, b in zip(sync_counts(system, leader), (snaps0, diffs0)))
        record["mode"] = "SNAP" if snaps > 0 else "DIFF" if diffs > 0 else "?"
        record["leader_counts"] = {"snap": snaps, "diff": diffs}
        if hasattr(system, "learner_sync_modes"):
            logged = system.learner_sync_modes(follower)
            record["follower_log"] = logged[-1] if logged else None
        record["target_znodes"] = target
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        record["error"] = f"{type(exc).__name__}: {exc}"[:400]
    run.add(record)
