#!/usr/bin/env python3
"""Throughput, latency and follower resync of a 3-server zabby ensemble on 127.0.0.1.

    python scripts/bench_ensemble.py                 # everything, in a temp dir
    python scripts/bench_ensemble.py --skip-resync   # only throughput and latency

Writes/s and reads/s with several client processes spread over the servers (pipelined
requests), one-at-a-time write latency p50/p99, and the time a restarted follower takes to
catch up when it is behind by 10k and by 100k znodes of 1 KB (the leader picks DIFF or SNAP;
the table says which).  Bounded by op counts and wall-clock limits; prints a table.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio


from harness.bench.standalone import percentile, print_table, run_throughput
from zabby.client.aio import Client
from zabby.client.fourletter import mntr as _mntr
from zabby.testing import Ensemble


async def _write_latency(hosts: str, count: int) -> list[float]:
    client = Client(hosts, timeout=10.0)
    await client.start()
    await client.ensure_path("/bench/lat")
    samples = []
    for index in range(count):
        started = time.perf_counter()
        await client.create(f"/bench/lat/n{index}", b"v" * 100)
        samples.append(time.perf_counter() - started)
    await client.stop()
    return samples


async def _fill(hosts: str, prefix: str, count: int, value: bytes, in_flight: int = 64) -> None:
    client = Client(hosts, timeout=30.0)
    await client.start()
    await client.ensure_path(prefix)
    next_index = 0

    async def lane() -> None:
        nonlocal next_index
        while next_index < count:
            index = next_index
            next_index += 1
            await client.create(f"{prefix}/n{index}", value)

    async with trio.open_nursery() as nursery:
        for _ in range(in_flight):
            nursery.start_soon(lane)
    await client.stop()


def resync(group: Ensemble, behind: int) -> tuple[float, str]:
    """Kill a follower, write ``behind`` 1 KB znodes, restart it; seconds until it caught up."""
    leader = group.wait_leader()
    follower = next(sid for sid in group.servers if sid != leader)
    before = _mntr(group.servers[leader].port)
    group.servers[follower].kill()
    trio.run(_fill, group.servers[leader].hosts, f"/resync{behind}", behind, b"k" * 1024)
    target = int(_mntr(group.servers[leader].port)["zk_znode_count"])
    started = time.perf_counter()
    group.servers[follower].launch()
    deadline = started + 300
    while time.perf_counter() < deadline:
        try:
            stats = _mntr(group.servers[follower].port)
            if stats.get("zk_server_state") == "follower" and int(stats["zk_znode_count"]) >= target:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.01)
    elapsed = time.perf_counter() - started
    after = _mntr(group.servers[leader].port)
    mode = "SNAP" if int(after["zk_snap_count"]) > int(before["zk_snap_count"]) else "DIFF"
    return elapsed, mode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--latency-ops", type=int, default=2000)
    parser.add_argument("--commit-log-count", type=int, default=500, help="the leader's DIFF window (zoo.cfg commitLogCount)")
    parser.add_argument("--skip-resync", action="store_true")
    args = parser.parse_args()
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="zabby-bench-ensemble-") as tmp:
        admin_off: dict[str, Any] = {"admin.enableServer": "false"}
        group = Ensemble(Path(tmp), 3, tickTime=2000, commitLogCount=args.commit_log_count, snapCount=100000, **admin_off)
        group.start()
        try:
            group.wait_leader()
            hosts = group.hosts
            label = f"({args.processes} procs x {args.in_flight} in flight, 3 servers)"
            writes = run_throughput(hosts, "create", args.processes, args.in_flight, 10**6, args.seconds)
            rows.append((f"writes/s, create 100 B {label}", f"{writes:,.0f}"))
            reads = run_throughput(hosts, "get", args.processes, args.in_flight, 10**6, args.seconds)
            rows.append((f"reads/s, getData {label}", f"{reads:,.0f}"))
            samples = trio.run(_write_latency, hosts, args.latency_ops)
            rows.append(("write latency p50 / p99 (ms, one at a time)",
                         f"{percentile(samples, 0.5) * 1000:.3f} / {percentile(samples, 0.99) * 1000:.3f}"))  # fmt: skip
            if not args.skip_resync:
                for behind in (10_000, 100_000):
                    seconds, mode = resync(group, behind)
                    rows.append((f"resync of a restarted follower behind by {behind:,} x 1 KB", f"{seconds:.2f} s ({mode})"))
        finally:
            group.kill_all()
    print_table("zabby 3-server ensemble benchmark", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
