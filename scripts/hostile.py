#!/usr/bin/env python3
"""Hostile clients against a real server, with a well-behaved client beside them: the figures of
docs/reliability.md's "Hostile clients" table.

    python scripts/hostile.py --findings        # the issue's three floods, each against a fresh standalone server
    python scripts/hostile.py --stalls          # how long the largest legal requests stop other clients
    python scripts/hostile.py --ports           # the peer-port and admin-port attacks of issue 56 (harness.jepsen.hostile_ports)
    python scripts/hostile.py --findings --stalls --servers 3

Each line gives what was sent, what the server did, its memory (peak RSS growth, VmHWM), the
bystander's read latencies (one exists("/") every 5 ms on one session, p50/p99/max) and the
slowest fresh connect-and-read.  The servers run on 127.0.0.1 in a temporary folder.  The
port attacks run with quorum authentication on, against a follower of 3 servers (on 1 server,
a one-member ensemble, whose peer ports are open), and each ends with a restart of its target.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: its harness/ is not installed

from harness.jepsen import hostile, hostile_ports
from harness.local.admin import LOCAL_ADMIN, admin_settings
from harness.local.jute_session import OPEN_ACL, JuteSession
from zabby.opcodes import OpCode
from zabby.testing import Ensemble, ServerProcess, wait_until
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
    restarted = f"  restarted: {row['restarted']}" if "restarted" in row else ""
    print(f"{row['name']:<34} {row['elapsed_s']:6.2f} s  RSS peak +{row['peak_growth_mb']:5.0f} MB  outstanding after: {row['outstanding_after']}  "
          f"bystander reads {f.reads} (failed {f.failures}) p50 {f.p50_ms:.1f} p99 {f.p99_ms:.1f} max {f.max_ms:.0f} ms, "
          f"fresh max {f.fresh_max_ms:.0f} ms ({f.fresh_failures} failed){restarted}", flush=True)  # fmt: skip
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


# ----------------------------------------------------------------------------- the peer and admin ports
PORT_DESCRIPTORS_MAX = 512  # RLIMIT_NOFILE of the servers the port attacks run against


def _watch_listings(server: ServerProcess, peer_port: int, stop: threading.Event) -> Callable[[], Any]:
    """8 sessions set 80,000 watches each (640,000; they hold them until ``stop``); then the
    attack: the admin's listings of them."""
    for index in range(8):  # sessions of 60 s (maxSessionTimeout): none expires, forgetting its watches, while the row runs
        threading.Thread(target=hostile.watch_hoard, args=(("127.0.0.1", server.port),),
                         kwargs={"watches": 80_000, "hold_s": 300.0, "stop": stop, "timeout_ms": 60_000}, daemon=True).start()  # fmt: skip
        # one after another: 8 sessions' setWatches at once stalled a leader past syncLimit (tickTime 200 ms)
        wait_until(lambda: server.mntr().get("zk_watch_count") == str(80_000 * (index + 1)), 120, f"{index + 1} x 80,000 watches")
    time.sleep(3.0)  # the collector's deep collection over the 2M new objects (0.6 s and more), not the listings'
    return lambda: hostile_ports.admin_listing(server.admin_port, LOCAL_ADMIN, rounds=6)  # 18 requests: within the guess bucket's burst of 20


def _descriptor_flood(server: ServerProcess, stop: threading.Event) -> Any:
    """512 idle admin connections (8 sources) and 4 sources x 60 client connections, for 10 s."""

    def clients(source: str) -> None:
        hostile.attack_from(source)
        while not stop.is_set():
            hostile.connection_flood(("127.0.0.1", server.port), connections=60, hold_s=2.0, stop=stop)

    floods = [threading.Thread(target=clients, args=(f"127.0.1.{i}",), daemon=True) for i in range(1, 5)]
    for flood in floods:
        flood.start()
    try:
        return hostile_ports.admin_idle_flood(server.admin_port, per_source=64, hold_s=10.0)
    finally:
        stop.set()
        for flood in floods:
            flood.join(10.0)


# Each: (the target, its quorum port, an event set once the row is done) -> the attack, once
# what it needs is set up (outside the measured time).
PORT_ATTACKS: dict[str, Callable[[ServerProcess, int, threading.Event], Callable[[], Any]]] = {
    "peer: 16 sources x 4 unidentified links, 10 s": lambda s, peer, done: lambda: hostile_ports.peer_slot_hold(peer, hostile_ports.ATTACKER_HOSTS[:16], 4, 10.0),
    "peer: 20,000 hellos, wrong MAC, 255-char host": lambda s, peer, done: lambda: hostile_ports.peer_hello_flood(peer, 20_000),
    "peer: 4 hellos whose nonce or MAC is 2^30": lambda s, peer, done: lambda: hostile_ports.peer_number_fields(peer, 4, 2**30),
    "admin: 8 sources x 64 idle connections, 10 s": lambda s, peer, done: lambda: hostile_ports.admin_idle_flood(s.admin_port, hold_s=10.0),
    "admin: password guessing, 16 connections, 5 s": lambda s, peer, done: lambda: hostile_ports.admin_guess(s.admin_port, seconds=5.0),
    "admin: wchc, wchp, console watches x6, 640k watches": _watch_listings,
    "descriptors: 512 admin + 240 client connections": lambda s, peer, done: lambda: _descriptor_flood(s, done),
}


def run_ports(servers: int, only: str) -> None:
    print(f"\n## The peer and admin ports ({servers} server{'s' * (servers > 1)}, quorum.auth on, RLIMIT_NOFILE {PORT_DESCRIPTORS_MAX})")
    for name, attack in PORT_ATTACKS.items():
        if only not in name:
            continue
        with tempfile.TemporaryDirectory(prefix="zabby-ports-") as folder:
            secret = Path(folder) / "quorum.secret"
            secret.write_bytes(b"0123456789abcdef-hostile-ports")
            settings = {"quorum.auth.enabled": "true", "quorum.auth.secretFile": secret, "maxSessionTimeout": 60_000, **admin_settings()}
            ensemble = Ensemble(Path(folder), servers, **settings)
            for server in ensemble.servers.values():
                server.descriptors_max = PORT_DESCRIPTORS_MAX
            ensemble.start()
            done = threading.Event()
            try:
                leader = ensemble.wait_leader()
                sid = max(other for other in ensemble.servers if other != leader or servers == 1)  # a follower of 3
                target = ensemble.servers[sid]
                row = measured(name, target, attack(target, ensemble.ports[sid][0], done))
                done.set()
                target.restart()
                row["restarted"] = target.mode()
                print_row(row)
            finally:
                done.set()
                ensemble.kill_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--findings", action="store_true", help="the issue's three floods")
    parser.add_argument("--stalls", action="store_true", help="the largest legal requests")
    parser.add_argument("--ports", action="store_true", help="the peer-port and admin-port attacks (issue 56)")
    parser.add_argument("--only", default="", metavar="TEXT", help="of the port attacks, those whose name holds TEXT")
    parser.add_argument("--servers", type=int, choices=[1, 3], default=1)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a zoo.cfg setting for the stall runs")
    args = parser.parse_args(argv)
    if not (args.findings or args.stalls or args.ports):
        args.findings = args.stalls = True
    if args.findings:
        run_findings(args.servers)
    if args.stalls:
        run_stalls(args.servers, dict(item.split("=", 1) for item in args.set))
    if args.ports:
        run_ports(args.servers, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
