#!/usr/bin/env python3
"""What ``sync`` costs on a 3-server ensemble: one-at-a-time sync latency through a client
on the leader and on a follower, and the throughput of many clients syncing at once (their
syncs share confirmation rounds).

    python scripts/bench_sync.py [--syncs 2000] [--threads 8]

Prints p50/p99 latency (ms) per client placement and syncs/s with ``--threads`` clients.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path


from zabby import SyncClient
from zabby.testing import Ensemble


def latencies_ms(hosts: str, count: int) -> list[float]:
    client = SyncClient(hosts, timeout=10.0)
    client.start()
    out = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            client.sync("/")
            out.append((time.perf_counter() - started) * 1000)
    finally:
        client.stop()
    return out


def throughput(hosts: list[str], threads: int, seconds: float) -> float:
    done = [0] * threads
    stop = threading.Event()

    def run(index: int) -> None:
        client = SyncClient(hosts[index % len(hosts)], timeout=10.0)
        client.start()
        try:
            while not stop.is_set():
                client.sync("/")
                done[index] += 1
        finally:
            client.stop()

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    time.sleep(seconds)
    stop.set()
    for worker in workers:
        worker.join(30)
    return sum(done) / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--syncs", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        group = Ensemble(Path(workdir), 3, tickTime=2000)
        group.start()
        try:
            leader = group.wait_leader()
            follower = next(sid for sid in group.servers if sid != leader)
            for name, sid in (("leader", leader), ("follower", follower)):
                values = sorted(latencies_ms(group.servers[sid].hosts, args.syncs))
                p50, p99 = statistics.median(values), values[int(len(values) * 0.99) - 1]
                print(f"sync one at a time via the {name}: p50 {p50:.3f} ms, p99 {p99:.3f} ms ({args.syncs} syncs)")
            hosts = [server.hosts for server in group.servers.values()]
            print(f"{args.threads} clients over 3 servers: {throughput(hosts, args.threads, args.seconds):.0f} syncs/s")
        finally:
            group.kill_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
