#!/usr/bin/env python3
"""Throughput and latency of a standalone zabby server, driven by zabby's own async Client.

    python scripts/bench_standalone.py            # starts its own server in a temp dir
    python scripts/bench_standalone.py --hosts 127.0.0.1:2181 --processes 4 --in-flight 32

Workloads: create (100-byte values, fsynced), setData, getData with P client processes x K
requests in flight each, then one-at-a-time latency (p50/p99) of create and getData.  Every
loop is bounded by an op count and a wall-clock limit.  Prints a table (and --json lines).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio


from zabby.client.aio import Client

VALUE = b"v" * 100


async def _load(hosts: str, workload: str, worker: int, in_flight: int, ops_max: int, seconds_max: float, barrier: Any) -> tuple[int, float]:
    """Set up, wait at the barrier with the other processes, then load for the window."""
    client = Client(hosts, timeout=10.0)
    await client.start()
    prefix = f"/bench/{workload}-{worker}"
    await client.ensure_path(prefix)
    if workload in ("set", "get"):
        for index in range(in_flight):
            await client.create(f"{prefix}/k{index}", VALUE)
    await trio.to_thread.run_sync(barrier.wait)
    done = 0
    started = time.perf_counter()
    deadline = started + seconds_max

    async def lane(lane_id: int) -> None:
        nonlocal done
        index = 0
        while done < ops_max and time.perf_counter() < deadline:
            if workload == "create":
                await client.create(f"{prefix}/n{lane_id}-{index}", VALUE)
            elif workload == "set":
                await client.set(f"{prefix}/k{lane_id}", VALUE)
            else:
                await client.get(f"{prefix}/k{lane_id}")
            index += 1
            done += 1

    async with trio.open_nursery() as nursery:
        for lane_id in range(in_flight):
            nursery.start_soon(lane, lane_id)
    elapsed = time.perf_counter() - started
    await client.stop()
    return done, elapsed


def _worker(args: tuple[Any, ...], results: Any) -> None:
    results.put(trio.run(_load, *args))


def run_throughput(hosts: str, workload: str, processes: int, in_flight: int, ops_total: int, seconds_max: float) -> float:
    """Ops/s of all processes together, over the window in which they all ran."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    barrier = ctx.Barrier(processes)
    procs = [
        ctx.Process(target=_worker, args=((hosts, workload, worker, in_flight, ops_total // processes, seconds_max, barrier), results))
        for worker in range(processes)
    ]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=seconds_max + 120) for _ in procs]
    for proc in procs:
        proc.join(30)
    ops = sum(done for done, _ in outcomes)
    elapsed = max(seconds for _, seconds in outcomes)
    return ops / elapsed


async def _latency(hosts: str, count: int) -> dict[str, list[float]]:
    client = Client(hosts, timeout=10.0)
    await client.start()
    await client.ensure_path("/bench/lat")
    samples: dict[str, list[float]] = {"create": [], "get": []}
    for index in range(count):
        started = time.perf_counter()
        await client.create(f"/bench/lat/n{index}", VALUE)
        samples["create"].append(time.perf_counter() - started)
    for index in range(count):
        started = time.perf_counter()
        await client.get(f"/bench/lat/n{index}")
        samples["get"].append(time.perf_counter() - started)
    await client.stop()
    return samples


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _start_server(workdir: Path) -> tuple[object, str]:
    from zabby.testing import ServerProcess

    admin_off: dict[str, Any] = {"admin.enableServer": "false"}
    server = ServerProcess(workdir, tickTime=2000, **admin_off)
    server.start()
    return server, server.hosts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", help="an existing server (default: start one in a temp dir)")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--ops", type=int, default=200_000, help="op limit per workload, all processes together")
    parser.add_argument("--seconds", type=float, default=8.0, help="measuring window per workload")
    parser.add_argument("--latency-ops", type=int, default=2000)
    parser.add_argument("--json", action="store_true", help="also print one JSON line per figure")
    args = parser.parse_args()
    server = None
    with tempfile.TemporaryDirectory(prefix="zabby-bench-") as tmp:
        hosts = args.hosts
        if hosts is None:
            server, hosts = _start_server(Path(tmp))
        try:
            rows = []
            for workload in ("create", "set", "get"):
                rate = run_throughput(hosts, workload, args.processes, args.in_flight, args.ops, args.seconds)
                rows.append((f"{workload} ops/s ({args.processes} procs x {args.in_flight} in flight)", f"{rate:,.0f}"))
            samples = trio.run(_latency, hosts, args.latency_ops)
            for name, values in samples.items():
                rows.append((f"{name} latency p50 / p99 (ms, one at a time)",
                             f"{percentile(values, 0.5) * 1000:.3f} / {percentile(values, 0.99) * 1000:.3f}"))  # fmt: skip
        finally:
            if server is not None:
                server.kill()  # type: ignore[attr-defined]
    print_table("zabby standalone benchmark", rows, as_json=args.json)
    return 0


def print_table(title: str, rows: list[tuple[str, str]], as_json: bool = False) -> None:
    """A Markdown table of (figure, value) rows, and optionally one JSON line per row."""
    width = max(len(name) for name, _ in rows)
    print(f"{title} ({os.cpu_count()} cores, python {sys.version.split()[0]})")
    print(f"| {'figure'.ljust(width)} | value |")
    print(f"|{'-' * (width + 2)}|-------|")
    for name, value in rows:
        print(f"| {name.ljust(width)} | {value} |")
    if as_json:
        for name, value in rows:
            print(json.dumps({"figure": name, "value": value}))


if __name__ == "__main__":
    sys.exit(main())
