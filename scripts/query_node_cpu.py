"""The CPU a query node spends per commit: ``--nodes`` query nodes in this one process, paced
metadata commits (a one-day build, then its merge, alternately), and the process's CPU time
over the commits divided by nodes x commits (the writer's own client is in it too, a small
share).  Also the lag, as ``python -m zabby.spark.scale`` measures it.

    python scripts/query_node_cpu.py --nodes 25 --commits 100 --pace 0.1

docs/reliability.md ("Query nodes at scale") has the figures.
"""

from __future__ import annotations

import argparse
import logging
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from zabby import SyncClient
from zabby.spark.epoch import ProjectEpoch
from zabby.spark.local_ensemble import LocalEnsemble
from zabby.spark.metastore import MetaStore
from zabby.spark.model import Layout, sales_cube_desc, sales_model, sales_project
from zabby.spark.query_node import QueryNode, prefer_host
from zabby.spark.scale import NodeGroup, ScaleRun, lag_summary, metadata_only_build, metadata_only_merge


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=25)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--pace", type=float, default=0.1, help="seconds between commits")
    args = parser.parse_args()
    if args.nodes < 1 or args.commits < 2 or args.pace < 0:
        parser.error("need --nodes >= 1, --commits >= 2 and --pace >= 0")
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="zabby-qn-cpu-"))
    ensemble = LocalEnsemble(work / "ensemble", 3)
    layout, desc = Layout("cpu"), sales_cube_desc()
    try:
        ensemble.start()
        group = NodeGroup.start(lambda i: QueryNode(prefer_host(ensemble.hosts, i), "cpu", name=f"qn{i}", session_timeout=10.0),
                                list(range(args.nodes)))  # fmt: skip
        writer = SyncClient(prefer_host(ensemble.hosts, args.nodes), timeout=10.0, randomize_hosts=False)
        writer.start()
        try:
            epoch = ProjectEpoch(writer, layout, owner="query-node-cpu")
            epoch.acquire(timeout=30)
            store = MetaStore(writer, layout, epoch)
            store.init_project(sales_project("cpu"), sales_model(), desc, storage_location=str(work / "storage"))
            metadata_only_build(store, desc.name, "2024-01-01", "2024-02-01")
            warm = metadata_only_build(store, desc.name, "2024-02-01", "2024-03-01")
            if group.late(warm["zxid"]):
                raise SystemExit("query nodes did not load")
            cpu0, usage0 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
            commits = []
            for k in range(args.commits):
                day = ScaleRun._days(k // 2)
                commits.append(metadata_only_build(store, desc.name, *day) if k % 2 == 0 else metadata_only_merge(store, desc.name))
                time.sleep(args.pace)
            late = group.late(commits[-1]["zxid"])
            cpu, usage = time.process_time() - cpu0, resource.getrusage(resource.RUSAGE_SELF)
            lag = lag_summary("commits", commits, group.seen())
            print(f"{args.nodes} nodes, {args.commits} commits every {args.pace * 1000:.0f} ms: "
                  f"{cpu / args.commits / args.nodes * 1e6:.0f} us of CPU per node per commit "
                  f"(user {usage.ru_utime - usage0.ru_utime:.2f} s, system {usage.ru_stime - usage0.ru_stime:.2f} s); "
                  f"lag p50 {lag['p50']:.1f} p99 {lag['p99']:.1f} max {lag['max']:.1f} ms; missing {lag['missing']}; late {len(late)}")  # fmt: skip
            epoch.release()
        finally:
            group.stop()
            writer.close()
    finally:
        ensemble.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
