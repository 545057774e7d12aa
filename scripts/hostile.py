#!/usr/bin/env python3
"""Hostile clients against a real server, with a well-behaved client beside them: the figures of
docs/reliability.md's "Hostile clients" table.

    python scripts/hostile.py --findings        # the issue's three floods, each against a fresh standalone server
    python scripts/hostile.py --stalls          # how long the largest legal requests stop other clients
    python scripts/hostile.py --findings --stalls --servers 3

Each line gives what was sent, what the server did, its memory (peak RSS growth, VmHWM), the
bystander's read latencies (one exists("/") every 5 ms on one session, p50/p99/max) and the
slowest fresh connect-and-read.  The servers run on 127.0.0.1 in a temporary folder.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zabby.jepsen import hostile
from zabby.local.jute_session import OPEN_ACL, JuteSession
from zabby.local.processes import Ensemble, ServerProcess, wait_until
from zabby.opcodes import OpCode
from zabby.wire import jute

MiB = 2**20
BUDGET_BYTES = 64 * MiB  # the budget the findings run with (the default is 256 MiB)


def memory_kb(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def start_servers(workdir: Path, count: int, settings: dict[str, object]) -> tuple[list[ServerProcess], Callable[[], None]]:
    if count == 1:
        server = ServerProcess(workdir, **settings)  # type: ignore[arg-type]
        server.start()
        return [server], server.kill
    ensemble = Ensemble(workdir, count, **settings)  # type: ignore[arg-type]
    ensemble.start()
    return list(ensemble.servers.values()), ensemble.kill_all


def measured(name: str, server: ServerProcess, attack: Callable[[], Any]) -> dict[str, Any]:
    """Run ``attack`` against ``server`` with a bystander; the figures of one table row."""
    pid = server.proc.pid  # type: ignore[union-attr]
    before = memory_kb(pid)["VmRSS"]
    bystander = hostile.Bystander(("127.0.0.1", server.port)).start()
    time.sleep(1.0)  # the bystander's interpreter starts
    started = time.monotonic()
    outcome = attack()
    elapsed = time.monotonic() - started
    figures = bystander.stop()
    outstanding = "?"
    try:
        wait_until(lambda: server.mntr().get("zk_outstanding_requests") == "0", 10.0, "outstanding back to 0")
        outstanding = "0"
    except AssertionError:
        outstanding = server.mntr().get("zk_outstanding_requests", "?")
    after = memory_kb(pid)
    peak_mb = (after["VmHWM"] - before) / 1024
    server.check_running()
    return {"name": name, "outcome": outcome, "elapsed_s": elapsed, "peak_growth_mb": peak_mb, "outstanding_after": outstanding,
            "bystander": figures, "memory": {k: v for k, v in server.mntr().items() if "client_memory" in k}}  # fmt: skip


def print_row(row: dict[str, Any]) -> None:
    f = row["bystander"]
    print(f"{row['name']:<34} {row['elapsed_s']:6.2f} s  RSS peak +{row['peak_growth_mb']:5.0f} MB  outstanding after: {row['outstanding_after']}  "
          f"bystander reads {f.reads} (failed {f.failures}) p50 {f.p50_ms:.1f} p99 {f.p99_ms:.1f} max {f.max_ms:.0f} ms, "
          f"fresh max {f.fresh_max_ms:.0f} ms ({f.fresh_failures} failed)", flush=True)  # fmt: skip
    print(f"    {row['outcome']}  {row['memory']}", flush=True)


# ----------------------------------------------------------------------------- the findings' floods
FINDINGS: dict[str, Callable[[tuple[str, int]], Any]] = {
    "2,000 connect-and-reset cycles": lambda a: hostile.reset_storm(a, 2000),
    "1,001 duplicate xids": lambda a: hostile.repeated_xids(a, 1001),
    "8 never-reading clients, 1 MB znode": lambda a: hostile.never_read(a, clients=8, data_bytes=1_000_000, requests=200, hold_s=5.0),
}


def run_findings(servers: int) -> None:
    print(f"\n## The findings' floods ({servers} server{'s' * (servers > 1)}, clientMemoryBudget={BUDGET_BYTES})")
    for name, attack in FINDINGS.items():
        with tempfile.TemporaryDirectory(prefix="zabby-hostile-") as folder:
            processes, stop = start_servers(Path(folder), servers, {"clientMemoryBudget": BUDGET_BYTES})
            try:
                target = processes[-1]
                hostile.attack_from("127.0.0.2")
                print_row(measured(name, target, lambda: attack(("127.0.0.1", target.port))))
            finally:
                stop()


# ----------------------------------------------------------------------------- the largest legal requests
def _session(server: ServerProcess) -> JuteSession:
    session = JuteSession(server.port, timeout_s=60.0)
    session.connect(timeout_ms=30_000)
    return session


def _fill_children(server: ServerProcess, parent: str, count: int) -> None:
    with _session(server) as session:
        session.call(OpCode.CREATE, jute.CreateRequest(parent, b"", OPEN_ACL, 0))
        batch = 2000
        for start in range(0, count, batch):
            ops = [(OpCode.CREATE, jute.CreateRequest(f"{parent}/child-{i:08d}", b"", OPEN_ACL, 0)) for i in range(start, min(count, start + batch))]
            header, _ = session.call(OpCode.MULTI, jute.MultiRequest(ops))
            assert header.err == 0, header


def _big_call(server: ServerProcess, op: int, record: jute.Record, repeat: int = 3) -> dict[str, Any]:
    """``repeat`` calls of one large request: each one's time, and what it answered."""
    times, answers = [], []
    with _session(server) as session:
        for _ in range(repeat):
            started = time.perf_counter()
            header, _ = session.call(op, record)
            times.append(round(time.perf_counter() - started, 3))
            answers.append(header.err)
    return {"request_s": times, "err": answers}


def _stall_cases(server: ServerProcess, settings: dict[str, object]) -> dict[str, Callable[[], Any]]:
    with _session(server) as session:
        session.call(OpCode.CREATE, jute.CreateRequest("/c", b"v", OPEN_ACL, 0))
    largest = 50_000  # 19 bytes each: a multi of that many checks is just under jute.maxbuffer
    allowed = int(str(settings.get("maxRequestOps", 5_000)))
    paths = [f"/w/{i:06d}" for i in range(70_000)]  # 9 bytes each + 4: 0.9 MB, under jute.maxbuffer

    def checks(count: int) -> Callable[[], Any]:
        return lambda: _big_call(server, OpCode.MULTI, jute.MultiRequest([(OpCode.CHECK, jute.CheckVersionRequest("/c", -1))] * count))

    def reads(count: int) -> Callable[[], Any]:
        return lambda: _big_call(server, OpCode.MULTI_READ, jute.MultiRequest([(OpCode.GET_DATA, jute.GetDataRequest("/c", False))] * count))

    return {
        f"multi of {largest:,} checks": checks(largest),
        f"multi of {allowed:,} checks": checks(allowed),
        f"multiRead of {largest:,} getData": reads(largest),
        f"multiRead of {allowed:,} getData": reads(allowed),
        "getChildren of 200,000 children": lambda: _big_call(server, OpCode.GET_CHILDREN, jute.GetChildrenRequest("/wide", False)),
        f"setWatches of {len(paths):,} paths": lambda: _big_call(server, OpCode.SET_WATCHES, jute.SetWatches(0, paths, [], [])),
        "a session of 100,000 watches disconnects": lambda: hostile.watch_hoard(("127.0.0.1", server.port), 100_000, hold_s=0.0),
    }


def run_stalls(servers: int, settings: dict[str, object]) -> None:
    print(f"\n## The largest legal requests ({servers} server{'s' * (servers > 1)}, {settings or 'default settings'})")
    with tempfile.TemporaryDirectory(prefix="zabby-stalls-") as folder:
        processes, stop = start_servers(Path(folder), servers, {"maxSessionTimeout": 60_000, **settings})
        try:
            target = processes[-1]
            _fill_children(target, "/wide", 200_000)
            for name, case in _stall_cases(target, settings).items():
                print_row(measured(name, target, case))
        finally:
            stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--findings", action="store_true", help="the issue's three floods")
    parser.add_argument("--stalls", action="store_true", help="the largest legal requests")
    parser.add_argument("--servers", type=int, choices=[1, 3], default=1)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a zoo.cfg setting for the stall runs")
    args = parser.parse_args(argv)
    if not (args.findings or args.stalls):
        args.findings = args.stalls = True
    if args.findings:
        run_findings(args.servers)
    if args.stalls:
        run_stalls(args.servers, dict(item.split("=", 1) for item in args.set))
    return 0


if __name__ == "__main__":
    sys.exit(main())
