"""``scripts/bench.py --scale``: a 3-server ensemble of each system grown to 1,000,000 znodes
(``--scale-znodes``), one system after the other (never both ensembles at once).

Theory of operation, for one system:

1. Start 3 servers fresh and write 1,000 znodes of 100 B (``/scale/warm``).
2. Throughput at ~1k znodes: getData, setData and create-100B through ZooKeeper's Java client
   in the spread layout (4 processes x 1 connection x 32 in flight, the connections spread over
   every server), ``repeats`` times, alternating the workloads.
3. Memory baseline on every server: its RSS (VmRSS); for ZooKeeper also the live heap
   (``jcmd GC.class_histogram``: a full GC, then the bytes of the live objects) and the heap
   used after that GC (``jcmd GC.heap_info``).  RSS is read first, before any forced GC.
4. SIGKILL one follower (F) and fill N znodes of 100 B, ``/scale/d<i div 1000>/n<i mod 1000>``,
   through the leader and the other follower (G): Java client, 2 processes x 2 connections x
   64 in flight.
5. Memory again on the leader and G: (after - baseline) / (znode count after - before).
6. Resync: launch F; the time from its process start until it serves as a follower at the
   leader's zxid (SNAP or DIFF, from the leader's counters).
7. Restart: SIGKILL G (in sync), launch it; the time until it serves as a follower at the
   leader's zxid: its own newest snapshot loaded, the log after that snapshot replayed, and a
   DIFF of nothing from the leader.  The server's own figures too (zabby: mntr
   ``startup_load_time``, its snapshot load plus log replay; ZooKeeper: its log's
   "Snapshot loaded in" and "txns loaded in" lines).
8. Throughput at ~N znodes: as in 2.
9. zabby only, once the ensemble is stopped: its Python heap per znode, by tracemalloc in a
   separate process that recovers G's data dir as a server does at start-up.

Every wait is bounded; memory is checked against MemAvailable before an ensemble starts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.bench import report
from harness.bench.runner import SPREAD, ClientProcess, Context, run_clients
from harness.bench.series import Run, measure, sync_counts, wait_caught_up, wait_stable_zxid, zxid_of
from harness.bench.systems import System, jvm_live_heap, rss_bytes

SCALE_WORKLOADS = ("getData", "setData", "create-100B")
FILL_PROCS, FILL_CONNS, FILL_INFLIGHT = 2, 2, 64
ZABBY_BYTES_PER_ZNODE_MAX = 2500  # for the memory check before a run: well above what was measured


@dataclass
class ScaleOptions:
    znodes: int = 1_000_000
    value_bytes: int = 100
    fanout: int = 1000  # children per parent node of the fill
    warm_znodes: int = 1000
    zk_heap: str = "4g"
    repeats: int = 2
    fill_seconds: float = 1800.0
    rejoin_wait_s: float = 900.0


def memory_needed(name: str, opts: ScaleOptions) -> int:
    """Bytes an ensemble of ``name`` may take at the end of a scale run (3 servers)."""
    if name == "zookeeper":
        heap = int(opts.zk_heap[:-1]) * {"g": 2**30, "m": 2**20}[opts.zk_heap[-1].lower()]
        return 3 * (heap + 400 * 2**20)
    return 3 * (opts.znodes * ZABBY_BYTES_PER_ZNODE_MAX + 300 * 2**20)


def memory_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def znode_count(system: System, sid: int, wait_s: float = 60.0) -> int:
    """srvr's Node count of server ``sid``, asked again while the server is too busy to answer
    in 2 s (a zabby leader under a fill can be)."""
    deadline = time.monotonic() + wait_s
    while True:
        count = system.srvr(sid).get("Node count")
        if count is not None:
            return int(count)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{system.name}: server {sid} did not answer srvr for {wait_s} s")
        time.sleep(0.5)


def memory(system: System, sids: list[int]) -> dict[int, dict[str, int]]:
    """RSS of every server first (``rss``: no GC forced before it), then a JVM's live heap
    (``live``, ``used``, ``committed``: after the full GC jcmd forces) and its RSS after that
    GC (``rss_gc``: G1 may give heap back to the system after a full GC)."""
    out = {sid: {"rss": rss_bytes(system.pid(sid))} for sid in sids}
    if system.name == "zookeeper":
        for sid in sids:
            pid = system.pid(sid)
            if pid:
                out[sid].update({f"{k.removesuffix('_bytes')}": v for k, v in jvm_live_heap(pid).items()})
                out[sid]["rss_gc"] = rss_bytes(pid)
    return out


def per_znode(before: dict[str, int], after: dict[str, int], added: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("rss", "rss_gc", "live", "used"):
        if key in before and key in after:
            out[f"{key}_before"], out[f"{key}_after"] = before[key], after[key]
            out[f"{key}_per_znode"] = round((after[key] - before[key]) / max(added, 1), 1)
    return out


def fill(ctx: Context, system: System, live: list[int], opts: ScaleOptions, path: str, count: int) -> dict[str, Any]:
    """``count`` znodes of ``opts.value_bytes`` under ``path`` through the servers ``live``."""
    hosts = ",".join(f"127.0.0.1:{system.ports[sid]}" for sid in live)
    share = -(-count // FILL_PROCS)
    cfgs = [{"hosts": hosts, "first": index * FILL_CONNS, "mode": "fill", "conns": FILL_CONNS, "inflight": FILL_INFLIGHT,
             "count": min(share, count - index * share), "offset": index * share, "fanout": opts.fanout if count > opts.fanout else 0,
             "seconds": opts.fill_seconds, "size": opts.value_bytes, "path": path}
            for index in range(FILL_PROCS) if count > index * share]  # fmt: skip

    def progress(procs: list[ClientProcess]) -> None:
        deadline = time.monotonic() + opts.fill_seconds + 60
        shown = time.monotonic()
        while any(proc.proc.poll() is None for proc in procs) and time.monotonic() < deadline:
            time.sleep(0.5)
            if time.monotonic() - shown >= 20:
                shown = time.monotonic()
                count = system.srvr(live[0]).get("Node count", "? (srvr not answered in 2 s)")
                print(f"    filling: {count} znodes, load {report.loadavg():.2f}", flush=True)

    results, cpu, wall, _ = run_clients(ctx, system, "java", cfgs, progress, timeout_s=opts.fill_seconds + 180)
    ops = sum(r["ops"] for r in results)
    errors = sum(r["errors"] for r in results)
    if ops < count or errors:
        raise RuntimeError(f"fill of {path}: {ops:,} of {count:,} created, {errors:,} errors")
    elapsed = max(r["elapsed_s"] for r in results)
    return {"znodes": count, "seconds": round(elapsed, 1), "rate": round(ops / max(elapsed, 1e-9), 1), "server_cpu_s": round(cpu, 1)}


def startup_figures(system: System, sid: int, log_offset: int) -> dict[str, Any]:
    """What the restarted server says its recovery took."""
    if system.name == "zabby":
        stats = system.mntr(sid)
        return {"load_ms": float(stats.get("zk_startup_load_time", -1)), "what": "snapshot load + log replay (mntr startup_load_time)"}
    with system.log_path(sid).open("rb") as log:
        log.seek(log_offset)
        text = log.read().decode(errors="replace")
    # ZKDatabase.loadDataBase logs "Snapshot loaded in" for the whole restore (the snapshot and
    # the txns after it); FileTxnSnapLog logs the txns part as "N txns loaded in M ms"
    out: dict[str, Any] = {"what": "ZooKeeper's log: Snapshot loaded in (snapshot + log replay), of which txns loaded in"}
    snap = re.findall(r"Snapshot loaded in (\d+) ms, highest zxid is 0x([0-9a-f]+)", text)
    txns = re.findall(r"(\d+) txns loaded in (\d+) ms", text)
    if snap:
        out["load_ms"], out["loaded_zxid"] = int(snap[0][0]), int(snap[0][1], 16)
    if txns:
        out["txns_loaded"], out["txns_load_ms"] = int(txns[0][0]), int(txns[0][1])
    return out


def rejoin(system: System, sid: int, leader: int, wait_s: float) -> float:
    """Launch server ``sid``; seconds from its process start until it serves at the leader's zxid."""
    started = time.monotonic()
    system.launch(sid)
    if not wait_caught_up(system, sid, leader, wait_s):
        raise TimeoutError(f"{system.name}: server {sid} not serving at the leader's zxid after {wait_s} s: {system.modes()}")
    return round(time.monotonic() - started, 3)


def throughput(ctx: Context, run: Run, system: System, opts: ScaleOptions, tree: str) -> None:
    for repeat in range(opts.repeats):
        for workload in SCALE_WORKLOADS:
            count = znode_count(system, system.leader())
            print(f"{system.name} scale {tree} {workload} (#{repeat + 1}, {count:,} znodes)", flush=True)
            measure(ctx, run, system, "java", workload, "scale", SPREAD,
                    extra={"tree": tree, "znodes_at_start": count, "repeat": repeat, "load": report.loadavg()})  # fmt: skip


def scale_system(ctx: Context, run: Run, system: System, opts: ScaleOptions) -> int:
    """Steps 1-8 of the module docstring on a started 3-server ``system``; the follower restarted
    in step 7."""
    base = {"system": system.name, "deployment": system.deployment, "series": "scale"}

    def add(kind: str, **fields: Any) -> None:
        run.add({**base, "kind": kind, "load": report.loadavg(), **fields})

    leader = system.leader()
    stopped, kept = (sid for sid in sorted(system.ports) if sid != leader)
    warm = fill(ctx, system, list(system.ports), opts, "/scale/warm", opts.warm_znodes)
    throughput(ctx, run, system, opts, "small")
    leader = system.leader()
    time.sleep(2)
    count0 = znode_count(system, leader)
    memory0 = memory(system, [leader, stopped, kept])
    print(f"{system.name}: baseline {count0:,} znodes, {memory0}", flush=True)
    snaps0, diffs0 = sync_counts(system, leader)
    system.kill(stopped)
    filled = fill(ctx, system, [leader, kept], opts, "/scale", opts.znodes)
    add("scale-fill", warm=warm, **filled)
    target = wait_stable_zxid(system, leader)
    time.sleep(2)
    count1 = znode_count(system, leader)
    memory1 = memory(system, [leader, kept])
    servers = {"leader": per_znode(memory0[leader], memory1[leader], count1 - count0),
               "follower": per_znode(memory0[kept], memory1[kept], count1 - count0)}
    add("scale-memory", znodes_before=count0, znodes_after=count1, servers=servers)

    print(f"{system.name}: resync of a follower {count1 - count0:,} znodes behind", flush=True)
    seconds = rejoin(system, stopped, leader, opts.rejoin_wait_s)
    snaps, diffs = (a - b for a, b in zip(sync_counts(system, leader), (snaps0, diffs0)))
    add("scale-resync", behind=count1 - count0, znodes=count1, seconds=seconds, mode="SNAP" if snaps else "DIFF" if diffs else "?",
        rss_after=rss_bytes(system.pid(stopped)), leader_zxid=target)  # fmt: skip

    print(f"{system.name}: restart of a follower with {count1:,} znodes", flush=True)
    snapshot_zxid, zxid = system.newest_snapshot_zxid(kept), zxid_of(system, kept)
    system.kill(kept)
    offset = system.log_path(kept).stat().st_size if system.log_path(kept).exists() else 0
    seconds = rejoin(system, kept, leader, opts.rejoin_wait_s)
    # txns after the newest snapshot (a zxid's low 32 bits count the txns of its epoch); without
    # a snapshot the whole log is replayed, of epochs zxids alone cannot add up
    replay = zxid - snapshot_zxid if snapshot_zxid and zxid >> 32 == snapshot_zxid >> 32 else None
    add("scale-restart", znodes=count1, seconds=seconds, snapshot_zxid=hex(snapshot_zxid), zxid=hex(zxid), txns_after_snapshot=replay,
        server=startup_figures(system, kept, offset), rss_after=rss_bytes(system.pid(kept)))  # fmt: skip
    throughput(ctx, run, system, opts, "large")
    return kept


# Run in a fresh interpreter from the zabby checkout: the tree a server recovers from a data
# dir (newest snapshot + log replay, as at start-up), traced by tracemalloc from before the load.
TRACEMALLOC_PROBE = """
import json, sys, tracemalloc
from zabby import config as zoo_config
from zabby.storage.datadir import DataDir
cfg = zoo_config.load(sys.argv[1])
tracemalloc.start()
tree, log = DataDir(cfg.data_dir, cfg.data_log_dir, snap_retain_count=cfg.snap_retain_count).recover()
traced, peak = tracemalloc.get_traced_memory()
log.close()
print(json.dumps({"traced_bytes": traced, "peak_bytes": peak, "znodes": tree.node_count()}))
"""


def tracemalloc_probe(system: System, sid: int, wait_s: float = 900.0) -> dict[str, Any]:
    """zabby's Python heap per znode: the Python objects alive after recovering server ``sid``'s
    data dir in a separate process (the server is stopped), per znode of the recovered tree."""
    proc = system.procs[sid]  # type: ignore[attr-defined]
    env = {**os.environ, "PYTHONPATH": str(system.root)}  # type: ignore[attr-defined]
    done = subprocess.run([sys.executable, "-c", TRACEMALLOC_PROBE, str(proc.config_path)], cwd=system.root,  # type: ignore[attr-defined]
                          capture_output=True, text=True, timeout=wait_s, env=env, check=False)  # fmt: skip
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-600:]}
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    out["traced_per_znode"] = round(out["traced_bytes"] / max(out["znodes"], 1), 1)
    return out


def run_scale(ctx: Context, run: Run, systems: list[str], opts: ScaleOptions, make: Any, notes: list[str]) -> None:
    """Each system in turn: check memory, start its ensemble, run the steps, stop it."""
    for name in systems:
        needed, available = memory_needed(name, opts), memory_available()
        if needed > available:
            notes.append(f"{name} was not scaled to {opts.znodes:,} znodes: it may need {needed / 2**30:.1f} GiB, "
                         f"{available / 2**30:.1f} GiB available")  # fmt: skip
            print(notes[-1], flush=True)
            continue
        system: System = make(name)
        print(f"starting {name} 3-server for --scale ({opts.znodes:,} znodes), load {report.loadavg():.2f}", flush=True)
        kept = None
        try:
            system.start()
            kept = scale_system(ctx, run, system, opts)
        except Exception as exc:  # noqa: BLE001 - the other system still runs
            traceback.print_exc()
            run.add({"system": name, "deployment": "3-server", "series": "scale", "kind": "scale-error",
                     "error": f"{type(exc).__name__}: {exc}"[:900], "server_modes": system.modes()})  # fmt: skip
            run.path.with_name(f"scale-failure-{name}.log").write_text(system.log_tail())
        finally:
            system.stop()
        if name == "zabby" and kept is not None:
            print(f"zabby: tracemalloc of a recovery of server {kept}'s data dir", flush=True)
            run.add({"system": name, "deployment": "3-server", "series": "scale", "kind": "scale-tracemalloc", "sid": kept, **tracemalloc_probe(system, kept)})
