#!/usr/bin/env python3
"""The path of one write through a 3-server zabby ensemble, timed inside the servers.

    python -m harness.bench.write_path                 # 3,000 setData, one at a time
    python -m harness.bench.write_path --writes 500
    python -m harness.bench.write_path --other-follower stopped   # the third server SIGSTOPped

kazoo writes one znode one at a time through a follower, so each write goes: the client's
request to that follower, its forward to the leader, the leader's PROPOSAL, both servers'
fsyncs, the follower's ACK and the leader's LOGGED, the follower's apply and reply.  Every
server runs this checkout with ``write_path_hooks`` installed (timestamps where its transport
decodes and encodes a quorum message and where a client connection reads and flushes), and
the table gives each span's median and p90 on the server that sees it: where the time of a
write goes, and which part of it is the servers' own code rather than the disk, the network
and the client.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path


from harness.bench.runner import percentile
from harness.bench.systems import cpu_of
from harness.bench.write_path_hooks import PATH
from harness import CHECKOUT
from zabby.testing import Ensemble, wait_until

HOOKS_ENV = "ZABBY_WRITE_PATH_OUT"
SITECUSTOMIZE = f"""import os
if os.environ.get({HOOKS_ENV!r}):
    from harness.bench import write_path_hooks
    write_path_hooks.install(os.environ[{HOOKS_ENV!r}])
"""


def measure(folder: Path, writes: int, warmup: int, other_follower: str = "running",
            ) -> tuple[dict[str, dict[str, list[float]]], list[float], dict[str, float]]:  # fmt: skip
    """Each server's spans by its role (``leader``, ``client's follower``, ``other follower``),
    the client's latency of every measured write, in seconds, and each role's CPU seconds per
    measured write.  ``other_follower="stopped"``: that server is stopped before the writes."""
    from kazoo.client import KazooClient

    hooks = folder / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    group = Ensemble(folder / "ensemble", 3)
    for sid, server in group.servers.items():
        server.environment = {"PYTHONPATH": os.pathsep.join([str(hooks), str(CHECKOUT)]), HOOKS_ENV: str(folder / f"spans-{sid}.json")}
    latencies: list[float] = []
    group.start()
    try:
        leader = group.wait_leader(everyone=True)
        via = min(sid for sid in group.servers if sid != leader)
        roles = {sid: {leader: "leader", via: "client's follower"}.get(sid, "other follower") for sid in group.servers}
        pids = {roles[sid]: server.proc.pid for sid, server in group.servers.items() if server.proc is not None}
        if other_follower == "stopped":
            os.kill(pids["other follower"], signal.SIGSTOP)
        client = KazooClient(hosts=group.servers[via].hosts, timeout=10.0)
        client.start(timeout=10.0)
        try:
            client.create("/write-path", b"x" * 100)
            for i in range(warmup + writes):
                if i == warmup:
                    cpu_before = {role: cpu_of(pid) for role, pid in pids.items()}
                started = time.perf_counter()
                client.set("/write-path", b"y" * 100)
                if i >= warmup:
                    latencies.append(time.perf_counter() - started)
            cpu = {role: (cpu_of(pid) - cpu_before[role]) / writes for role, pid in pids.items()}
            if other_follower == "running":  # a quorum answered the writes: the third may be behind, its spans not yet timed
                last = group.servers[leader].zxid()
                wait_until(lambda: all(server.zxid() == last for server in group.servers.values()), 30, "every server to log the last write")
        finally:
            client.stop()
            client.close()
            if other_follower == "stopped":
                os.kill(pids["other follower"], signal.SIGCONT)  # it must run to exit and write its spans
    finally:
        group.stop_all()
    spans = {roles[sid]: json.loads((folder / f"spans-{sid}.json").read_text()) for sid in group.servers}
    return spans, latencies, cpu


def table(spans: dict[str, dict[str, list[float]]], latencies: list[float], cpu: dict[str, float]) -> str:
    roles = ("leader", "client's follower", "other follower")
    lines = [f"one-at-a-time setData through a follower: {len(latencies)} writes, p50 {percentile(latencies, 0.5) * 1e3:.3f} ms, "
             f"p90 {percentile(latencies, 0.9) * 1e3:.3f} ms",
             "CPU per write: " + ", ".join(f"{role} {cpu[role] * 1e6:.0f} µs" for role in roles if role in cpu),
             "", "| span | server | p50 | p90 | count |", "|---|---|---|---|---|"]  # fmt: skip
    for span in PATH:
        for role in ("client's follower", "leader", "other follower"):
            values = spans.get(role, {}).get(span)
            if values:
                p50, p90 = percentile(values, 0.5) * 1e6, percentile(values, 0.9) * 1e6
                lines.append(f"| {span} | {role} | {p50:.1f} µs | {p90:.1f} µs | {len(values)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=3000, help="writes measured (default 3000)")
    parser.add_argument("--warmup", type=int, default=300, help="writes before them, not in the client's figures (default 300)")
    parser.add_argument("--other-follower", choices=("running", "stopped"), default="running",
                        help="stopped: SIGSTOP the follower the client is not on before the writes (default running)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.writes < 1 or args.warmup < 0:
        parser.error("--writes must be at least 1 and --warmup at least 0")
    with tempfile.TemporaryDirectory(prefix="zabby-write-path-") as tmp:
        spans, latencies, cpu = measure(Path(tmp), args.writes, args.warmup, args.other_follower)
    print(table(spans, latencies, cpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
