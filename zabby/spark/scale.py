"""``python -m zabby.spark.scale``: the cube job's metadata read by many query nodes at once.

A local ensemble, ``--nodes`` query nodes (in this process, each a ``QueryNode`` with its own
session, all on the process's shared event loop, spread over the servers), then the cube job's steps: the
project (project, model, cube descriptor and cube in one commit), two segment builds and
their merge -- built by Spark with ``--spark``, else committed with the same metadata and no
Spark behind them.  For each step, the query-node lag: from the writer's commit ack to each
node having applied that zxid (p50, p99, max over the nodes).

Then the catch-up: one node is stopped (saving its mirror and zxid to its view file),
``--commits`` metadata commits are made while the others watch, and the node is started
again from its view file; the catch-up time runs from its start to its mirror reflecting the
last commit.  A node started with no view file (a full read) is timed beside it, and both
mirrors are compared.  Results: a table on stdout and ``<out>/scale-results.json``.

    python -m zabby.spark.scale --nodes 100 --commits 1000 --spark --out scale-out
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from .demo import _p, _table, cube_seen_at, step_lag_ms
from .epoch import ProjectEpoch
from .job import StepReport
from .local_ensemble import LocalEnsemble
from .metastore import MetaStore
from .model import Segment, new_uuid, sales_cube_desc, sales_model, sales_project, segment_name
from .query_node import QueryNode, prefer_host

START_WORKERS = 8  # query nodes started (and stopped) at once
WAIT_S = 60.0


def metadata_only_build(store: MetaStore, cube: str, start: str, end: str) -> dict[str, Any]:
    """A build's commit with no Spark behind it: a segment of ``[start, end)`` with no rows."""
    job_id = new_uuid()
    segment = Segment(uuid=new_uuid(), name=segment_name(start, end), date_range_start=start, date_range_end=end,
                      last_build_job_id=job_id)  # fmt: skip
    t = time.time()
    commit = store.add_segment(cube, segment, job_id)
    return StepReport("BUILD", segment, commit, t, t, job_id).to_dict()


def metadata_only_merge(store: MetaStore, cube: str) -> dict[str, Any]:
    """A merge's commit of every ready segment, with no Spark behind it."""
    refs = sorted(store.read_cube(cube).doc.ready_segments(), key=lambda s: s.date_range_start)
    job_id = new_uuid()
    start, end = refs[0].date_range_start, refs[-1].date_range_end
    merged = Segment(uuid=new_uuid(), name=segment_name(start, end), date_range_start=start, date_range_end=end,
                     last_build_job_id=job_id, merged_from=[s.id for s in refs])  # fmt: skip
    t = time.time()
    commit = store.merge_segments(cube, merged, job_id)
    return StepReport("MERGE", merged, commit, t, t, job_id).to_dict()


def lag_summary(label: str, steps: list[dict[str, Any]], seen_by_node: Iterable[list[tuple[int, float]]]) -> dict[str, Any]:
    """The lags of ``steps`` over the nodes (ms): p50, p99, max; ``missing``: (node, step)
    pairs never seen.  ``seen_by_node``: each node's ``cube_seen_at``."""
    lags: list[float] = []
    missing = 0
    for seen in seen_by_node:
        for step in steps:
            lag = step_lag_ms(seen, step)
            if lag is None:
                missing += 1
            else:
                lags.append(lag)
    return {"step": label, "zxid": steps[-1]["zxid"], "commits": len(steps),
            "commit_ms": statistics.median(s["commit_seconds"] * 1000 for s in steps),
            "n": len(lags), "missing": missing, "p50": _p(0.5, lags), "p99": _p(0.99, lags), "max": max(lags, default=float("nan"))}  # fmt: skip


def in_parallel(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    with ThreadPoolExecutor(START_WORKERS) as pool:
        return list(pool.map(fn, items))


class NodeGroup:
    """Query nodes of this process (on its shared loop), one session each."""

    def __init__(self, nodes: list[QueryNode]) -> None:
        self.nodes = nodes

    @classmethod
    def start(cls, make: Callable[[int], QueryNode], indexes: list[int]) -> NodeGroup:
        return cls(in_parallel(lambda i: make(i).start(WAIT_S), indexes))

    def late(self, zxid: int, timeout: float = WAIT_S) -> list[str]:
        """The nodes that did not reach ``zxid`` within ``timeout``."""
        return [n.name for n in self.nodes if not n.wait_for_zxid(zxid, timeout)]

    def seen(self) -> list[list[tuple[int, float]]]:
        return [cube_seen_at(n.changes) for n in self.nodes]

    def stop(self) -> None:
        in_parallel(lambda n: n.stop(), self.nodes)


def _group_worker(conn: Connection, hosts: str, project: str, indexes: list[int], session_timeout: float) -> None:
    """A worker process: a NodeGroup answering the parent's calls over ``conn``."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    group = NodeGroup.start(lambda i: QueryNode(prefer_host(hosts, i), project, name=f"qn{i}", session_timeout=session_timeout), indexes)
    conn.send("ready")
    try:
        while True:
            call, *args = conn.recv()
            if call == "stop":
                return
            conn.send(getattr(group, call)(*args))
    finally:
        group.stop()
        conn.send("stopped")


class ProcessGroup:
    """Query nodes run in a worker process (``_group_worker``)."""

    def __init__(self, hosts: str, project: str, indexes: list[int], session_timeout: float) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_group_worker, args=(child, hosts, project, indexes, session_timeout), daemon=True)
        self.process.start()

    def ready(self) -> None:
        if not self.conn.poll(WAIT_S * 2) or self.conn.recv() != "ready":
            raise TimeoutError(f"query-node worker {self.process.pid} not ready")

    def late(self, zxid: int, timeout: float = WAIT_S) -> list[str]:
        self.conn.send(("late", zxid, timeout))
        return list(self.conn.recv())

    def seen(self) -> list[list[tuple[int, float]]]:
        self.conn.send(("seen",))
        return list(self.conn.recv())

    def stop(self) -> None:
        try:
            self.conn.send(("stop",))
            self.conn.poll(WAIT_S)
        except OSError:
            pass
        self.process.join(WAIT_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(10)


def mirror_of(node: QueryNode) -> dict[str, tuple[bytes, tuple[int, ...]]]:
    return {path: (n.data, tuple(n.stat)) for path, n in node.cache.snapshot().items()}


class ScaleRun:
    """One run; ``run()`` returns the results and always stops what it started."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out).resolve()
        self.work = Path(tempfile.mkdtemp(prefix="zabby-scale-", dir=args.workdir))
        self.ensemble = LocalEnsemble(self.work / "ensemble", args.servers, tick_ms=args.tick_ms)
        self.groups: list[NodeGroup | ProcessGroup] = []
        self.spark: Any = None
        self.t0 = time.time()
        self.load_at_start = os.getloadavg()[0]

    def say(self, msg: str) -> None:
        if not self.args.quiet:
            print(f"[{time.time() - self.t0:6.1f}s] {msg}", flush=True)

    def node(self, index: int, view: bool = False, name: str | None = None) -> QueryNode:
        name = name or f"qn{index}"
        return QueryNode(prefer_host(self.ensemble.hosts, index), self.args.project, name=name,
                         view_path=self.out / f"{name}.view.json" if view else None, session_timeout=self.args.session_timeout)  # fmt: skip

    def run(self) -> dict[str, Any]:
        args = self.args
        self.out.mkdir(parents=True, exist_ok=True)
        client: Any = None
        epoch: ProjectEpoch | None = None
        try:
            self.ensemble.start()
            self.say(f"{args.servers} servers up: {self.ensemble.hosts}")
            victim_view = self.out / f"qn{args.nodes - 1}.view.json"
            victim_view.unlink(missing_ok=True)
            self._start_nodes()
            from zabby import SyncClient

            client = SyncClient(prefer_host(self.ensemble.hosts, args.nodes), timeout=10.0, randomize_hosts=False)
            client.start()
            epoch = ProjectEpoch(client, self._layout(), owner=f"zabby-scale:{os.getpid()}")
            epoch.acquire(timeout=30)
            store = MetaStore(client, self._layout(), epoch)
            rows = self._job_steps(store)
            rows.append(self._catch_up(store, rows))
            return self._report(rows)
        finally:
            self.say("shutting down")
            for group in self.groups:
                group.stop()
            if self.spark is not None:
                self.spark.stop()
            if epoch is not None:
                epoch.release()
            if client is not None:
                client.close()
            self.ensemble.stop()
            shutil.rmtree(self.work, ignore_errors=True)

    def _start_nodes(self) -> None:
        """Every node but the last (the one restarted later: always in this process) in
        ``--processes`` worker processes, or all in this process."""
        args = self.args
        others = list(range(args.nodes - 1))
        if args.processes:
            workers = [ProcessGroup(self.ensemble.hosts, args.project, others[k :: args.processes], args.session_timeout)
                       for k in range(args.processes)]  # fmt: skip
            self.groups += workers
            for worker in workers:
                worker.ready()
            where = f"in {args.processes} worker processes"
        else:
            self.groups.append(NodeGroup.start(self.node, others))
            where = "in this process"
        self.groups.append(NodeGroup.start(lambda i: self.node(i, view=True), [args.nodes - 1]))
        self.say(f"{args.nodes} query nodes up ({where}, one session each)")

    def wait_all(self, zxid: int, groups: list[NodeGroup | ProcessGroup] | None = None) -> None:
        late = [name for group in groups or self.groups for name in group.late(zxid)]
        if late:
            raise TimeoutError(f"{len(late)} query nodes did not reach zxid 0x{zxid:x} in {WAIT_S}s: {late[:5]}")

    def seen(self, groups: list[NodeGroup | ProcessGroup] | None = None) -> list[list[tuple[int, float]]]:
        return [seen for group in groups or self.groups for seen in group.seen()]

    def _layout(self) -> Any:
        from .model import Layout

        return Layout(self.args.project)

    def _job_steps(self, store: MetaStore) -> list[dict[str, Any]]:
        """The project, two builds and a merge; each step's lag once every node applied it."""
        args, desc, model = self.args, sales_cube_desc(), sales_model()
        storage = str(self.out / "storage")
        init = store.init_project(sales_project(args.project), model, desc, storage_location=storage)
        steps = [("PROJECT", {"zxid": init.zxid, "t_commit_acked": init.t_acked, "commit_seconds": init.seconds})]
        self.wait_all(init.zxid)
        half, end = "2024-01-31", "2024-03-01"
        if args.spark:
            from .cube import SalesSpec, generate_sales, spark_session
            from .job import CubeJob

            self.spark = spark_session(args.master, "zabby-scale", shuffle_partitions=2, driver_memory="1g")
            spec = SalesSpec(rows=args.rows, days=60)
            job = CubeJob(self.spark, store, desc, model, storage, lambda a, b: generate_sales(self.spark, spec, a, b, 2), progress=False)
            actions: list[tuple[str, Callable[[], dict[str, Any]]]] = [
                ("BUILD 1", lambda: job.build(spec.start, half).to_dict()), ("BUILD 2", lambda: job.build(half, end).to_dict()),
                ("MERGE", lambda: job.merge().to_dict())]  # fmt: skip
        else:
            actions = [("BUILD 1", lambda: metadata_only_build(store, desc.name, "2024-01-01", half)),
                       ("BUILD 2", lambda: metadata_only_build(store, desc.name, half, end)),
                       ("MERGE", lambda: metadata_only_merge(store, desc.name))]  # fmt: skip
        for label, action in actions:
            step = action()
            self.wait_all(step["zxid"])
            steps.append((label, step))
            self.say(f"{label}: zxid 0x{step['zxid']:x}, commit {step['commit_seconds'] * 1000:.1f} ms; every node has it")
        seen = self.seen()
        return [lag_summary(label, [step], seen) for label, step in steps]

    def _catch_up(self, store: MetaStore, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """Stop the last node, commit while it is down, start it again from its view file."""
        args, cube = self.args, sales_cube_desc().name
        victim_group = self.groups.pop()
        assert isinstance(victim_group, NodeGroup)
        victim = victim_group.nodes[0]
        victim_group.stop()
        saved_zxid = victim.zxid
        self.say(f"{victim.name} stopped at zxid 0x{saved_zxid:x}; {args.commits} metadata commits while it is down")
        commits: list[dict[str, Any]] = []
        while len(commits) < args.commits:  # build a day, merge it into the rest: the cube stays one segment
            if len(commits) % 2 == 0:
                commits.append(metadata_only_build(store, cube, *self._days(len(commits) // 2)))
            else:
                commits.append(metadata_only_merge(store, cube))
        last = commits[-1]["zxid"]
        self.wait_all(last)
        rows.append(lag_summary(f"{len(commits)} commits", commits, self.seen()))
        t_start = time.monotonic()
        back = self.node(args.nodes - 1, view=True)
        self.groups.append(NodeGroup([back]))  # stopped on the way out
        back.start(WAIT_S)
        caught = back.wait_for_zxid(last, WAIT_S)
        catch_up_s = time.monotonic() - t_start
        t_start = time.monotonic()
        fresh = self.node(args.nodes, name="qn-fresh")
        self.groups.append(NodeGroup([fresh]))
        fresh.start(WAIT_S)
        fresh.wait_for_zxid(last, WAIT_S)
        full_read_s = time.monotonic() - t_start
        equal = mirror_of(back) == mirror_of(fresh)
        self.say(f"{back.name} back: caught up from 0x{saved_zxid:x} to 0x{last:x} in {catch_up_s * 1000:.0f} ms "
                 f"({back.cache.full_reads} full reads, {back.cache.node_reads} node reads); a fresh node's full read "
                 f"{full_read_s * 1000:.0f} ms; mirrors equal: {equal}")  # fmt: skip
        return {"node": back.name, "resumed_from": back.resumed_from, "saved_zxid": saved_zxid, "last_zxid": last,
                "commits_missed": len(commits), "caught_up": caught, "catch_up_seconds": catch_up_s,
                "full_reads": back.cache.full_reads, "node_reads": back.cache.node_reads,
                "changes_applied": sum(1 for c in back.changes if c.get("zxid")), "fresh_full_read_seconds": full_read_s,
                "fresh_node_count": len(fresh.cache.snapshot()), "mirrors_equal": equal}  # fmt: skip

    @staticmethod
    def _days(index: int) -> tuple[str, str]:
        """The ``index``-th one-day range after the job's data (2024-03-01 on)."""
        import datetime as dt

        first = dt.date(2024, 3, 1) + dt.timedelta(days=index)
        return first.isoformat(), (first + dt.timedelta(days=1)).isoformat()

    def _report(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        args = self.args
        catch_up = rows.pop()
        results = {"nodes": args.nodes, "servers": args.servers, "spark": args.spark, "commits": args.commits,
                   "lag_ms": rows, "catch_up": catch_up, "command": " ".join(["python -m zabby.spark.scale", *sys.argv[1:]]),
                   "load_average_1m": {"start": self.load_at_start, "end": os.getloadavg()[0]}, "cpus": os.cpu_count()}  # fmt: skip
        (self.out / "scale-results.json").write_text(json.dumps(results, indent=1))
        if not args.quiet:
            print()
            print(f"query-node lag after the commit ack, ms ({args.nodes} nodes, {args.servers} servers, "
                  f"{'Spark' if args.spark else 'metadata-only'} steps; 1-minute load {self.load_at_start:.1f} at the start, "
                  f"{os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} CPUs):")  # fmt: skip
            print(_table(["step", "zxid", "commit ms", "observations", "p50", "p99", "max"],
                         [[r["step"], f"0x{r['zxid']:x}", f"{r['commit_ms']:.1f}", r["n"], f"{r['p50']:.1f}", f"{r['p99']:.1f}",
                           f"{r['max']:.1f}"] for r in rows]))  # fmt: skip
            print()
            print(f"catch-up of {catch_up['node']} after {catch_up['commits_missed']} commits: {catch_up['catch_up_seconds'] * 1000:.0f} ms "
                  f"({catch_up['full_reads']} full reads); a fresh node's full read {catch_up['fresh_full_read_seconds'] * 1000:.0f} ms; "
                  f"mirrors equal: {catch_up['mirrors_equal']}")  # fmt: skip
        return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zabby.spark.scale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100, help="query nodes (one session each; default 100)")
    parser.add_argument("--processes", type=int, default=0,
                        help="run the query nodes (but the one restarted) in this many worker processes (default 0: in this one)")
    parser.add_argument("--servers", type=int, default=3)
    parser.add_argument("--commits", type=int, default=1000, help="metadata commits while one node is down (default 1000)")
    parser.add_argument("--spark", action="store_true", help="build the segments with Spark (else: the same commits, no Spark)")
    parser.add_argument("--rows", type=int, default=20_000, help="fact rows with --spark")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--project", default="scale")
    parser.add_argument("--session-timeout", type=float, default=10.0)
    parser.add_argument("--tick-ms", type=int, default=200)
    parser.add_argument("--out", default="zabby-scale-out")
    parser.add_argument("--workdir", help="parent folder of the ensemble's data (default: a temp folder)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.nodes < 2 or args.servers < 1 or args.commits < 2 or not 0 <= args.processes < args.nodes:
        parser.error("need --nodes >= 2, --servers >= 1, --commits >= 2 and 0 <= --processes < --nodes")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    ScaleRun(args).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
