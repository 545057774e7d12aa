#!/usr/bin/env python3
"""The three Python clients side by side, in one run, against one zabby server.

    python scripts/bench_clients.py [--ops 20000] [--in-flight 64] [--latency-ops 2000] [--rounds 3]

Starts one standalone server (zabby.testing's launcher, on 127.0.0.1; ``--hosts`` uses a
running one instead).  The clients are ``zabby.Client`` under asyncio, ``zabby.Client`` under
trio, and ``SyncClient``; the workloads:

* pipelined getData and setData: ``--in-flight`` requests outstanding (async: that many tasks
  on one client; SyncClient: a window of ``*_async`` futures from one thread), ops/s, and
  the client process's CPU time per pipelined get;
* one at a time: getData and setData, each waiting for its reply, p50 and p99 in ms.

Every round runs each workload on every client back to back, in an order that rotates from
round to round, each measurement on a connection of its own (after 200 warm-up requests), so
a machine whose load drifts weighs on all clients alike.  Prints the median of the rounds, and
asyncio's figures as a fraction of trio's (the issue's target: within 10%).
"""

from __future__ import annotations

import argparse
import collections
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NamedTuple

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zabby import AsyncResult, Client, SyncClient  # noqa: E402
from zabby.testing import ServerProcess  # noqa: E402

NODE = "/bench-clients"
VALUE = b"x" * 100
FLAVORS = ("asyncio", "trio", "sync")


# -- one measurement: a workload on one client, connected for it alone ------------------------
class Sample(NamedTuple):
    ops: int
    seconds: float  # wall time of the loaded window
    cpu_s: float  # this process's CPU time over it (every thread: SyncClient's loop thread too)
    latencies_s: list[float]  # one-at-a-time workloads: each request's


def pipelined(workload: str) -> bool:
    return workload.endswith("pipelined")


async def async_load(client: Client, workload: str, ops: int, in_flight: int) -> list[float]:
    op: Callable[[], Awaitable[Any]] = functools.partial(client.get, NODE) if workload.startswith("get") else functools.partial(client.set, NODE, VALUE)
    if not pipelined(workload):
        return [await timed(op) for _ in range(ops)]
    remaining = ops

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await op()

    async with anyio.create_task_group() as tasks:
        for _ in range(in_flight):
            tasks.start_soon(worker)
    return []


async def timed(op: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await op()
    return time.perf_counter() - started


async def async_sample(hosts: str, workload: str, ops: int, in_flight: int) -> Sample:
    async with Client(hosts, timeout=30.0) as client:
        await client.ensure_path(NODE)
        await async_load(client, workload, min(ops, 200), in_flight)  # warm up
        started, cpu = time.perf_counter(), time.process_time()
        latencies = await async_load(client, workload, ops, in_flight)
        return Sample(ops, time.perf_counter() - started, time.process_time() - cpu, latencies)


def sync_load(client: SyncClient, workload: str, ops: int, in_flight: int) -> list[float]:
    if not pipelined(workload):
        call: Callable[[], Any] = functools.partial(client.get, NODE) if workload.startswith("get") else functools.partial(client.set, NODE, VALUE)
        latencies = []
        for _ in range(ops):
            started = time.perf_counter()
            call()
            latencies.append(time.perf_counter() - started)
        return latencies
    submit: Callable[[], AsyncResult[Any]] = functools.partial(client.get_async, NODE) if workload.startswith("get") else functools.partial(client.set_async, NODE, VALUE)
    window: collections.deque[AsyncResult[Any]] = collections.deque()
    for _ in range(ops):
        if len(window) >= in_flight:
            window.popleft().get()
        window.append(submit())
    for future in window:
        future.get()
    return []


def sync_sample(hosts: str, workload: str, ops: int, in_flight: int) -> Sample:
    with SyncClient(hosts, timeout=30.0) as client:
        client.ensure_path(NODE)
        sync_load(client, workload, min(ops, 200), in_flight)  # warm up
        started, cpu = time.perf_counter(), time.process_time()
        latencies = sync_load(client, workload, ops, in_flight)
        return Sample(ops, time.perf_counter() - started, time.process_time() - cpu, latencies)


def sample(flavor: str, hosts: str, workload: str, ops: int, in_flight: int) -> Sample:
    if flavor == "sync":
        return sync_sample(hosts, workload, ops, in_flight)
    result: Sample = anyio.run(async_sample, hosts, workload, ops, in_flight, backend=flavor)
    return result


# -- rounds and the table ------------------------------------------------------------------------
WORKLOADS = ("get pipelined", "set pipelined", "get one-at-a-time", "set one-at-a-time")
COLUMNS = ("get pipelined", "set pipelined", "get p50", "get p99", "set p50", "set p99", "get CPU")
UNITS = ("ops/s", "ops/s", "ms", "ms", "ms", "ms", "µs/op")
Row = dict[str, float]


def fields(workload: str, result: Sample) -> Row:
    """A sample's figures, by the table's column names."""
    if pipelined(workload):
        row = {workload: result.ops / result.seconds}
        if workload == "get pipelined":
            row["get CPU"] = result.cpu_s / result.ops * 1e6
        return row
    name = workload.split(" ", 1)[0]
    cuts = statistics.quantiles(result.latencies_s, n=100, method="inclusive")
    return {f"{name} p50": cuts[49] * 1000, f"{name} p99": cuts[98] * 1000}


def run_rounds(flavors: tuple[str, ...], hosts: str, rounds: int, ops: int, in_flight: int, latency_ops: int) -> dict[str, list[Row]]:
    """Each workload runs on every client back to back (so that the load of the machine,
    which drifts, weighs on all of them alike), in an order that rotates every round."""
    results: dict[str, list[Row]] = {flavor: [] for flavor in flavors}
    for round_index in range(rounds):
        shift = round_index % len(flavors)
        order = flavors[shift:] + flavors[:shift]
        rows: dict[str, Row] = {flavor: {} for flavor in flavors}
        for workload in WORKLOADS:
            for flavor in order:
                count = ops if pipelined(workload) else latency_ops
                rows[flavor].update(fields(workload, sample(flavor, hosts, workload, count, in_flight)))
        for flavor in flavors:
            results[flavor].append(rows[flavor])
            print(f"round {round_index + 1} {flavor:8} " + "  ".join(f"{c} {rows[flavor][c]:.{0 if u == 'ops/s' else 2}f}" for c, u in zip(COLUMNS, UNITS)),
                  file=sys.stderr, flush=True)  # fmt: skip
    return results


def median_of(rows: list[Row]) -> Row:
    return {column: statistics.median(row[column] for row in rows) for column in COLUMNS}


def table(results: dict[str, list[Row]]) -> str:
    medians = {flavor: median_of(rows) for flavor, rows in results.items()}
    header = ["client"] + [f"{c} ({u})" for c, u in zip(COLUMNS, UNITS)]
    label = {"asyncio": "Client, asyncio", "trio": "Client, trio", "sync": "SyncClient"}
    rows = [[label[f]] + [f"{medians[f][c]:,.0f}" if u == "ops/s" else f"{medians[f][c]:.2f}" for c, u in zip(COLUMNS, UNITS)] for f in medians]
    if "asyncio" in medians and "trio" in medians:
        rows.append(["asyncio / trio"] + [f"{medians['asyncio'][c] / medians['trio'][c]:.2f}" for c in COLUMNS])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", help="a running server's address (default: start one)")
    parser.add_argument("--ops", type=int, default=20_000, help="requests per pipelined workload")
    parser.add_argument("--in-flight", type=int, default=64, help="requests outstanding in the pipelined workloads")
    parser.add_argument("--latency-ops", type=int, default=2_000, help="requests per one-at-a-time workload")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", default=",".join(FLAVORS), help=f"which clients, comma-separated (of {','.join(FLAVORS)})")
    args = parser.parse_args()
    flavors = tuple(dict.fromkeys(name.strip() for name in args.clients.split(",")))
    if not flavors or not set(flavors) <= set(FLAVORS):
        parser.error(f"--clients takes names of {', '.join(FLAVORS)}, not {args.clients!r}")
    if min(args.ops, args.in_flight, args.latency_ops, args.rounds) < 1:
        parser.error("--ops, --in-flight, --latency-ops and --rounds must be positive")
    if args.latency_ops < 2:
        parser.error("--latency-ops must be at least 2 (percentiles)")
    if args.hosts is not None:
        results = run_rounds(flavors, args.hosts, args.rounds, args.ops, args.in_flight, args.latency_ops)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-clients-") as folder:
            server = ServerProcess(Path(folder))
            server.start()
            try:
                results = run_rounds(flavors, server.hosts, args.rounds, args.ops, args.in_flight, args.latency_ops)
            finally:
                server.kill()
    print(f"{args.rounds} rounds (median), {args.ops} pipelined requests with {args.in_flight} in flight, "
          f"{args.latency_ops} one at a time, 100-byte values, a connection per measurement")  # fmt: skip
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
