#!/usr/bin/env python3
"""The Jepsen-style fault harness, against zabby or Apache ZooKeeper 3.8 (Debian's package).

    python scripts/jepsen.py --servers 3 --runs 50 --duration 60 --nemesis mixed
    python scripts/jepsen.py --system zookeeper --servers 5 --runs 10 --duration 60
    python scripts/jepsen.py --servers 3 --runs 20 --duration 60 --nemesis mixed,clients
    python scripts/jepsen.py --mix zookeeper,zookeeper,zabby --runs 10 --duration 60 --nemesis mixed

``--mix`` makes a mixed ensemble, one kind per server id: ZooKeeper 3.8 servers and zabby
servers speaking ZooKeeper's peer protocol (``quorum.protocol=zookeeper``), under kazoo.

Each run prints one line; at the end a summary and the markdown table.  Results go to
``--out`` (default ``results/jepsen``): ``results.jsonl`` (a line per run, appended),
``table.md``, and a folder per run with the server logs, ``history.json`` and
``result.json`` (passing runs drop their servers' data dirs unless ``--keep-data``).
The exit code is 1 if any run failed; every failure prints the command that replays it.
"""

from __future__ import annotations

import argparse
import logging
import random
import signal
import sys
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: its harness/ is not installed

from harness import CHECKOUT
from harness.jepsen import report
from harness.jepsen.cluster import MIXED
from harness.jepsen.nemesis import ALL_KINDS, GROUPS, kinds_for
from harness.jepsen.runner import RunSpec, run_once
from harness.jepsen.workloads import WorkloadSpec
from harness.local.zookeeper import ZK_JAR


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--system", choices=["zabby", "zookeeper"], help="default zabby")
    parser.add_argument("--servers", type=int, choices=[3, 5], help="default 3")
    parser.add_argument("--mix", type=mix_kinds, default=(), help="a mixed ensemble: each server's kind by id, zookeeper (zk) or zabby, "
                        "comma-separated (zk,zk,zabby); sets the servers' number, instead of --system")  # fmt: skip
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of workload under faults, per run")
    parser.add_argument("--nemesis", default="mixed", help=f"groups {sorted(GROUPS)} and/or kinds {list(ALL_KINDS)}, comma-separated: "
                        "mixed,clients is every fault of mixed with hostile clients beside them (and a well-behaved client's latencies per run)")  # fmt: skip
    parser.add_argument("--seed", type=int, help="the first run's seed (the next runs use seed+1, ...); random if not given")
    parser.add_argument("--clients", default="zabby,kazoo", help="client kinds the workers take turns with (zookeeper: kazoo only)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--tick-ms", type=int, default=2000)
    parser.add_argument("--init-limit", type=int, default=10)
    parser.add_argument("--sync-limit", type=int, default=5)
    parser.add_argument("--fault-s", type=float, default=8.0, help="mean length of one fault")
    parser.add_argument("--quiet-s", type=float, default=4.0, help="mean calm between faults")
    parser.add_argument("--keys", type=int, default=5, help="registers")
    parser.add_argument("--session-timeout", type=float, default=10.0, help="the workers' session timeout (s)")
    parser.add_argument("--churn-session-timeout", type=float, help="session timeout of the short ephemeral sessions (s); default max(4, 2 x tick)")
    parser.add_argument("--op-timeout", type=float, default=5.0, help="how long a worker waits for one request (s)")
    parser.add_argument("--out", type=Path, default=CHECKOUT / "results" / "jepsen")
    parser.add_argument("--keep-data", action="store_true", help="keep the data dirs of passing runs too")
    parser.add_argument("--quorum-auth", action="store_true", help="zabby: every peer link authenticates (quorum.auth, a secret file per run)")
    parser.add_argument("--no-watch", dest="watch", action="store_false",
                        help="without the watch workload (a persistent recursive watcher per server, its events checked against the txn logs)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.mix:
        if args.system is not None or args.servers is not None:
            parser.error("--mix names every server's kind: give neither --system nor --servers")
        if args.quorum_auth:
            parser.error("--quorum-auth: ZooKeeper's peer protocol has no quorum.auth of zabby's")
        args.system, args.servers = MIXED, len(args.mix)
    return argparse.Namespace(**{**vars(args), "system": args.system or "zabby", "servers": args.servers or 3})


def mix_kinds(text: str) -> tuple[str, ...]:
    """``zk,zk,zabby`` -> ("zookeeper", "zookeeper", "zabby"): 3 or 5 servers, both kinds."""
    names = {"zk": "zookeeper", "zookeeper": "zookeeper", "zabby": "zabby"}
    kinds = tuple(names.get(part.strip()) for part in text.split(","))
    if None in kinds or len(kinds) not in (3, 5) or len(set(kinds)) != 2:
        raise argparse.ArgumentTypeError(f"{text!r}: 3 or 5 kinds, each zookeeper (zk) or zabby, with both kinds present")
    return cast("tuple[str, ...]", kinds)


def spec_for(args: argparse.Namespace, seed: int) -> RunSpec:
    tick_s = args.tick_ms / 1000
    workload = WorkloadSpec(keys=args.keys, session_timeout_s=args.session_timeout, op_timeout_s=args.op_timeout, churn_session_timeout_s=args.churn_session_timeout or max(4.0, 2 * tick_s))
    return RunSpec(
        seed=seed, out_dir=args.out, system=args.system, servers=args.servers, duration_s=args.duration, nemesis=args.nemesis,
        clients=tuple(c.strip() for c in args.clients.split(",") if c.strip()), workers=args.workers, tick_ms=args.tick_ms,
        init_limit=args.init_limit, sync_limit=args.sync_limit, fault_s=args.fault_s, quiet_s=args.quiet_s,
        workload=workload, keep_data=args.keep_data, quorum_auth=args.quorum_auth, watch=args.watch, mix=args.mix,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        kinds_for(args.nemesis)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.system != "zabby" and not ZK_JAR.exists():
        print(f"ZooKeeper not installed ({ZK_JAR} missing): run scripts/install_zookeeper.sh", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so every run's finally stops its servers
    args.out.mkdir(parents=True, exist_ok=True)
    # the clients' own warnings (every dropped connection) go to a file, not the console
    logging.basicConfig(level=logging.INFO, filename=args.out / "harness.log", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    first_seed = args.seed if args.seed is not None else random.randrange(1, 2**31)
    records = []
    for index in range(args.runs):
        record = run_once(spec_for(args, first_seed + index))
        records.append(record)
        report.append_jsonl(args.out / "results.jsonl", record)
        print(report.run_line(record), flush=True)
        for failure in record["failures"]:
            print(f"    {failure[:2000]}", flush=True)
        if not record["ok"]:
            print(f"    evidence: {record['dir']}\n    reproduce: {record['reproduce']}", flush=True)
    table = report.markdown_table(report.read_jsonl(args.out / "results.jsonl"))
    (args.out / "table.md").write_text(table)
    failed = [r for r in records if not r["ok"]]
    print(f"\n{len(records) - len(failed)}/{len(records)} runs passed (seeds {first_seed}..{first_seed + args.runs - 1})\n")
    print(report.markdown_table(records))
    if any("reconfigs" in record for record in records):
        (args.out / "reconfig-table.md").write_text(report.reconfig_table(report.read_jsonl(args.out / "results.jsonl")))
        print(report.reconfig_table(records))
    if any(record.get("watch") for record in records):
        (args.out / "watch-table.md").write_text(report.watch_table(report.read_jsonl(args.out / "results.jsonl")))
        print(report.watch_table(records))
    for record in failed:
        print(f"failed seed {record['seed']}: {record['reproduce']}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
