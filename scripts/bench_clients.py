#!/usr/bin/env python3
"""The three Python clients side by side, in one run, against one zabby server.

    python scripts/bench_clients.py [--ops 20000] [--in-flight 64] [--latency-ops 2000] [--rounds 3]

Starts one standalone server (zabby.local's launcher, on 127.0.0.1; ``--hosts`` uses a
running one instead), then in every round runs each client in turn -- ``zabby.Client`` under
asyncio, ``zabby.Client`` under trio, and ``SyncClient`` -- the order rotating from round to
round so that none always runs first or last:

* pipelined getData and setData: ``--in-flight`` requests outstanding (async: that many tasks
  on one client; SyncClient: a window of ``*_async`` futures from one thread), ops/s;
* one at a time: getData and setData, each waiting for its reply, p50 and p99 in ms.

Prints the median of the rounds per client and workload, and asyncio's throughput as a
fraction of trio's (the issue's target: within 10%).  Each client connects once per round.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zabby import AsyncResult, Client, SyncClient  # noqa: E402
from zabby.local.processes import ServerProcess  # noqa: E402

NODE = "/bench-clients"
VALUE = b"x" * 100
FLAVORS = ("asyncio", "trio", "sync")
Result = dict[str, float]  # "get pipelined" -> ops/s; "get p50"/"get p99" -> ms ...


def percentiles_ms(samples_s: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples_s, n=100, method="inclusive")
    return cuts[49] * 1000, cuts[98] * 1000


# -- the async client (asyncio or trio) --------------------------------------------------------
async def async_pipelined(client: Client, op: Callable[[], Any], ops: int, in_flight: int) -> float:
    remaining = ops

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await op()

    started = time.perf_counter()
    async with anyio.create_task_group() as tasks:
        for _ in range(in_flight):
            tasks.start_soon(worker)
    return ops / (time.perf_counter() - started)


async def async_one_at_a_time(op: Callable[[], Any], ops: int) -> list[float]:
    samples = []
    for _ in range(ops):
        started = time.perf_counter()
        await op()
        samples.append(time.perf_counter() - started)
    return samples


async def bench_async(hosts: str, ops: int, in_flight: int, latency_ops: int) -> Result:
    async with Client(hosts, timeout=30.0) as client:
        await client.ensure_path(NODE)
        await client.set(NODE, VALUE)
        return {
            "get pipelined": await async_pipelined(client, lambda: client.get(NODE), ops, in_flight),
            "set pipelined": await async_pipelined(client, lambda: client.set(NODE, VALUE), ops, in_flight),
            **latency_fields("get", await async_one_at_a_time(lambda: client.get(NODE), latency_ops)),
            **latency_fields("set", await async_one_at_a_time(lambda: client.set(NODE, VALUE), latency_ops)),
        }


# -- the blocking client ---------------------------------------------------------------------
def sync_pipelined(submit: Callable[[], AsyncResult], ops: int, in_flight: int) -> float:
    window: collections.deque[AsyncResult] = collections.deque()
    started = time.perf_counter()
    for _ in range(ops):
        if len(window) >= in_flight:
            window.popleft().get()
        window.append(submit())
    for future in window:
        future.get()
    return ops / (time.perf_counter() - started)


def sync_one_at_a_time(call: Callable[[], Any], ops: int) -> list[float]:
    samples = []
    for _ in range(ops):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


def bench_sync(hosts: str, ops: int, in_flight: int, latency_ops: int) -> Result:
    with SyncClient(hosts, timeout=30.0) as client:
        client.ensure_path(NODE)
        client.set(NODE, VALUE)
        return {
            "get pipelined": sync_pipelined(lambda: client.get_async(NODE), ops, in_flight),
            "set pipelined": sync_pipelined(lambda: client.set_async(NODE, VALUE), ops, in_flight),
            **latency_fields("get", sync_one_at_a_time(lambda: client.get(NODE), latency_ops)),
            **latency_fields("set", sync_one_at_a_time(lambda: client.set(NODE, VALUE), latency_ops)),
        }


def latency_fields(name: str, samples_s: list[float]) -> Result:
    p50, p99 = percentiles_ms(samples_s)
    return {f"{name} p50": p50, f"{name} p99": p99}


def run_flavor(flavor: str, hosts: str, ops: int, in_flight: int, latency_ops: int) -> Result:
    if flavor == "sync":
        return bench_sync(hosts, ops, in_flight, latency_ops)
    return anyio.run(bench_async, hosts, ops, in_flight, latency_ops, backend=flavor)


# -- rounds and the table ------------------------------------------------------------------------
COLUMNS = ("get pipelined", "set pipelined", "get p50", "get p99", "set p50", "set p99")
UNITS = ("ops/s", "ops/s", "ms", "ms", "ms", "ms")


def run_rounds(flavors: tuple[str, ...], hosts: str, rounds: int, ops: int, in_flight: int, latency_ops: int) -> dict[str, list[Result]]:
    results: dict[str, list[Result]] = {flavor: [] for flavor in flavors}
    for round_index in range(rounds):
        order = flavors[round_index % len(flavors):] + flavors[:round_index % len(flavors)]
        for flavor in order:
            result = run_flavor(flavor, hosts, ops, in_flight, latency_ops)
            results[flavor].append(result)
            print(f"round {round_index + 1} {flavor:8} " + "  ".join(f"{c} {result[c]:.{0 if u == 'ops/s' else 2}f}" for c, u in zip(COLUMNS, UNITS)),
                  file=sys.stderr, flush=True)  # fmt: skip
    return results


def median_of(results: list[Result]) -> Result:
    return {column: statistics.median(r[column] for r in results) for column in COLUMNS}


def table(results: dict[str, list[Result]]) -> str:
    medians = {flavor: median_of(rs) for flavor, rs in results.items()}
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
          f"{args.latency_ops} one at a time, 100-byte values, one client connection each")  # fmt: skip
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
