"""``zabby-demo``: a 3-server zabby ensemble, two query nodes, a PySpark cube job (two
incremental builds and a merge) whose metadata is committed atomically into zabby, then the
cube's metadata, each query node's view, lag figures and a timeline PNG.  Last, the metadata
round trip: ``/kylin/<project>`` is backed up (``<out>/metadata-backup``: one JSON file per
znode and a manifest with the zxid), restored into a new 3-server ensemble under the
project's epoch, and every znode is compared (``zabby-admin kylin backup|restore`` do the
same by hand).  Everything it
starts is stopped on the way out, on success, failure or Ctrl-C.

    zabby-demo --rows 1000000 --out ./zabby-demo-out [--master local[*]] [--input a.parquet ...]
"""

from __future__ import annotations

import argparse
import bisect
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_ROWS = 1_000_000


def _p(q: float, values: list[float]) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, max(0, int(round(q * (len(values) - 1)))))]


def cube_seen_at(changes: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """``(zxid, wall clock)`` of each newer cube state a query node showed, from its change
    log, in order (the zxids increase): a node that shows zxid Z has applied every commit up
    to Z, including those whose state it never showed (read once, after the next)."""
    seen: list[tuple[int, float]] = []
    for c in changes:
        zxid = c.get("zxid")
        if c.get("kind") == "cube" and zxid and zxid > (seen[-1][0] if seen else 0):
            seen.append((zxid, c["t"]))
    return seen


def step_lag_ms(seen: list[tuple[int, float]], step: dict[str, Any]) -> float | None:
    """Milliseconds from the writer's commit ack of ``step`` to the node having applied its
    zxid (negative: the node had it before the writer's ack came back); None if never."""
    index = bisect.bisect_left(seen, (step["zxid"], float("-inf")))
    return None if index == len(seen) else (seen[index][1] - step["t_commit_acked"]) * 1000


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) if c.replace(",", "").replace(".", "").replace("0x", "").isalnum() and c[:1].isdigit() else c.ljust(w)
                      for c, w in zip(r, widths, strict=True)) for r in cells]  # fmt: skip
    return "\n".join(out)


class QueryNodeProcess:
    def __init__(self, name: str, hosts: str, project: str, out: Path) -> None:
        self.name = name
        self.log = out / f"{name}.jsonl"
        self.view = out / f"{name}.view.json"
        self.stderr = out / f"{name}.log"
        for f in (self.log, self.view):
            f.unlink(missing_ok=True)
        with open(self.stderr, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "zabby.spark.query_node", "--hosts", hosts, "--project", project, "--name", name,
                 "--log", str(self.log), "--view", str(self.view)],
                stdout=subprocess.PIPE, stderr=err, start_new_session=True,
            )  # fmt: skip
        self.server = "-"

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        buf = b""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"query node {self.name} exited ({self.proc.returncode}); see {self.stderr}")
            chunk = self.proc.stdout.read() or b""
            buf += chunk
            if b"READY" in buf:
                self.server = buf.decode().split()[-1]
                return
            time.sleep(0.05)
        raise TimeoutError(f"query node {self.name} not ready after {timeout_s}s; see {self.stderr}")

    def read_view(self) -> dict[str, Any]:
        try:
            return json.loads(self.view.read_text())
        except (OSError, ValueError):
            return {}

    def changes(self) -> list[dict[str, Any]]:
        try:
            return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]
        except OSError:
            return []

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def draw_timeline(path: Path, t0: float, steps: list[dict[str, Any]], nodes: dict[str, list[dict[str, Any]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12, 4.8))
    lanes = ["driver (Spark)", "driver (commit)", *nodes]
    colors = {"BUILD": "#4C72B0", "MERGE": "#DD8452"}
    for s in steps:
        ax.barh(0, s["t_spark_end"] - s["t_spark_start"], left=s["t_spark_start"] - t0, color=colors[s["action"]], alpha=0.8)
        ax.text((s["t_spark_start"] + s["t_spark_end"]) / 2 - t0, 0, f"{s['action'].lower()} {s['start'][5:]}..{s['end'][5:]}\n{s['rows']:,} rows",
                ha="center", va="center", fontsize=7, color="white")  # fmt: skip
        ax.plot([s["t_commit_acked"] - t0], [1], marker="D", color=colors[s["action"]], markersize=8)
        ax.annotate(f"zxid 0x{s['zxid']:x}\n{s['commit_seconds'] * 1000:.0f} ms", (s["t_commit_acked"] - t0, 1),
                    textcoords="offset points", xytext=(0, 10), ha="center", fontsize=7)  # fmt: skip
    zx = {s["zxid"]: s for s in steps}
    for i, (name, changes) in enumerate(nodes.items(), start=2):
        xs = [c["t"] - t0 for c in changes if not c.get("initial") and c.get("zxid") and c["t"] >= t0]
        ax.scatter(xs, [i] * len(xs), s=8, color="#999999", zorder=2, label="change seen" if i == 2 else None)
        for c in changes:
            seen = zx.get(c.get("zxid"))
            if seen is not None and c.get("kind") == "cube":
                lag = (c["t"] - seen["t_commit_acked"]) * 1000
                ax.plot([c["t"] - t0], [i], marker="D", color=colors[seen["action"]], markersize=7, zorder=3)
                ax.annotate(f"{lag:+.0f} ms", (c["t"] - t0, i), textcoords="offset points", xytext=(0, 9), ha="center", fontsize=7)
                ax.plot([s["t_commit_acked"] - t0, c["t"] - t0], [1, i], color=colors[s["action"]], alpha=0.3, lw=0.8)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_ylim(-0.7, len(lanes) - 0.3)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the job started")
    ax.set_title("zabby-demo: Spark builds, metadata commits (zxid) and when each query node saw them")
    ax.grid(axis="x", alpha=0.3)
    if any(nodes.values()):
        ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def wait_converged(nodes: list[QueryNodeProcess], cube: str, want: list[str], timeout_s: float = 30.0) -> dict[str, float]:
    """Until every node's view lists exactly the segment ids ``want``; returns when each did."""
    deadline = time.monotonic() + timeout_s
    seen: dict[str, float] = {}
    while time.monotonic() < deadline:
        for n in nodes:
            ids = [s["id"] for s in n.read_view().get("cubes", {}).get(cube, {}).get("segments", [])]
            if n.name not in seen and sorted(ids) == sorted(want):
                seen[n.name] = time.time()
        if len(seen) == len(nodes):
            return seen
        time.sleep(0.02)
    raise TimeoutError(f"query nodes did not converge on {want} within {timeout_s}s: {[n.read_view() for n in nodes]}")


def metadata_round_trip(client: Any, layout: Any, backup_dir: Path, workdir: Path, tick_ms: int,
                        say: Any) -> dict[str, Any]:  # fmt: skip
    """Back the project's metadata up, restore it into a new 3-server ensemble, and check that
    every znode's data came back; raises RuntimeError if not."""
    import shutil

    from zabby import SyncClient

    from .backup import backup_project, project_data, restore_project
    from .local_ensemble import LocalEnsemble

    shutil.rmtree(backup_dir, ignore_errors=True)
    manifest = backup_project(client, layout, backup_dir)
    say(f"backed up {layout.base}: {manifest.znodes} znodes at zxid 0x{manifest.zxid:x} into {backup_dir}")
    with LocalEnsemble(workdir, 3, tick_ms=tick_ms) as target:
        target_client = SyncClient(target.hosts, timeout=10.0)
        target_client.start()
        try:
            report = restore_project(target_client, backup_dir)
            restored = project_data(target_client, layout.base)
        finally:
            target_client.stop()
            target_client.close()
    original = project_data(client, layout.base)
    lost = sorted(rel for rel in original if restored.get(rel) != original[rel] and not rel.startswith("epoch"))
    if lost:
        raise RuntimeError(f"metadata round trip: {len(lost)} znodes differ after the restore, e.g. {lost[:3]}")
    say(f"restored into a new ensemble ({target.hosts}) in {report.seconds:.2f} s: all {report.znodes} znodes equal")
    return {"backup_dir": str(backup_dir), "zxid": f"0x{manifest.zxid:x}", "znodes": manifest.znodes,
            "data_bytes": manifest.data_bytes, "restore_seconds": report.seconds, "equal": True}  # fmt: skip


def run(args: argparse.Namespace) -> int:  # noqa: C901 -- the demo's steps in order, each with its option
    from zabby import SyncClient

    from .cube import SalesSpec, generate_sales, read_source, slice_dates, spark_session
    from .epoch import ProjectEpoch
    from .job import CubeJob
    from .local_ensemble import LocalEnsemble
    from .metastore import MetaStore
    from .model import CubeDesc, Layout, sales_cube_desc, sales_model, sales_project
    from .query_node import prefer_host

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="zabby-demo-", dir=args.workdir))
    t_start = time.time()
    say = lambda msg: print(f"[{time.time() - t_start:6.1f}s] {msg}", flush=True)  # noqa: E731
    ensemble = LocalEnsemble(work / "ensemble", 3, tick_ms=args.tick_ms)
    nodes: list[QueryNodeProcess] = []
    client = spark = epoch = None
    try:
        say(f"starting a 3-server zabby ensemble in {work / 'ensemble'}")
        ensemble.start()
        say(f"ensemble up: {ensemble.hosts}  modes {ensemble.modes()}")
        for i in range(2):
            nodes.append(QueryNodeProcess(f"query-node-{i + 1}", prefer_host(ensemble.hosts, i), args.project, out))
        for n in nodes:
            n.wait_ready()
        say("query nodes up: " + ", ".join(f"{n.name} on {n.server}" for n in nodes))

        client = SyncClient(prefer_host(ensemble.hosts, 2), timeout=10.0, randomize_hosts=False)
        client.start()
        layout = Layout(args.project)
        epoch = ProjectEpoch(client, layout, owner=f"zabby-demo:{os.getpid()}")
        token = epoch.acquire(timeout=30)
        say(f"driver took the epoch of /kylin/{args.project}: fencing token (czxid) 0x{token:x}")
        store = MetaStore(client, layout, epoch)
        model = sales_model()
        desc = CubeDesc.from_json(Path(args.cube_desc).read_bytes()) if args.cube_desc else sales_cube_desc()
        storage = str(out / "storage")
        init = store.init_project(sales_project(args.project), model, desc, storage_location=storage)
        say(f"project, model, cube_desc and cube committed at zxid 0x{init.zxid:x} ({len(desc.cuboids())} cuboids per segment)")

        say(f"starting Spark ({args.master})")
        spark = spark_session(args.master, "zabby-demo", shuffle_partitions=args.shuffle_partitions, driver_memory=args.driver_memory)
        spec = SalesSpec(rows=args.rows, seed=args.seed, start=args.start, days=args.days)
        if args.input:
            facts = read_source(spark, args.input)
            source = lambda a, b: slice_dates(facts, model.partition_column, a, b)  # noqa: E731
        else:
            source = lambda a, b: generate_sales(spark, spec, a, b, partitions=args.shuffle_partitions)  # noqa: E731
        job = CubeJob(spark, store, desc, model, storage, source)
        half = spec.day(args.days // 2)
        steps = []
        for a, b in ((spec.start, half), (half, spec.end)):
            say(f"build segment {a} .. {b}")
            report = job.build(a, b)
            steps.append(report.to_dict())
            say(f"  Spark {report.spark_seconds:.1f}s, commit {report.commit_seconds * 1000:.1f} ms at zxid 0x{report.commit.zxid:x} "
                f"({report.segment.input_records:,} rows -> {report.segment.row_count:,} cuboid rows)")  # fmt: skip
            wait_converged(nodes, desc.name, [s.id for s in store.read_cube(desc.name).doc.segments])
        say("merge the two segments")
        report = job.merge()
        steps.append(report.to_dict())
        say(f"  Spark {report.spark_seconds:.1f}s, commit {report.commit_seconds * 1000:.1f} ms at zxid 0x{report.commit.zxid:x}")
        final = store.read_cube(desc.name)
        wait_converged(nodes, desc.name, [s.id for s in final.doc.segments])
        t_done = time.time()

        # -- results -------------------------------------------------------------------
        print()
        inst = final.doc
        print(f"cube {inst.name}: status {inst.status}, version {final.version}, last zxid 0x{final.mzxid:x}, {len(inst.segments)} segment(s)")
        print(_table(["segment", "name", "range", "rows", "cuboids", "input rows", "size MB", "build s", "storage"],
                     [[s.id[:8], s.name, f"{s.date_range_start}..{s.date_range_end}", f"{s.row_count:,}", s.cuboid_count,
                       f"{s.input_records:,}", f"{s.size_bytes / 1e6:.1f}", f"{s.build_seconds:.1f}", os.path.relpath(s.storage_path, out)]
                      for s in inst.segments]))  # fmt: skip
        print()
        print("steps:")
        print(_table(["step", "segment", "range", "Spark s", "commit ms", "zxid", "attempts"],
                     [[s["action"], s["segment"][:8], f"{s['start']}..{s['end']}", f"{s['spark_seconds']:.1f}",
                       f"{s['commit_seconds'] * 1000:.1f}", f"0x{s['zxid']:x}", s["attempts"]] for s in steps]))  # fmt: skip
        print()
        print("audit trail:")
        for name, entry, stat in store.audit_trail():
            print(f"  {name}  zxid 0x{stat.czxid:x}  {entry.action:<14} {entry.message}")
        print()
        lags: list[float] = []
        node_changes = {n.name: n.changes() for n in nodes}
        rows = []
        for n in nodes:
            view = n.read_view()
            cube_view = view.get("cubes", {}).get(desc.name, {})
            seen = cube_seen_at(node_changes[n.name])
            per = [lag for s in steps if (lag := step_lag_ms(seen, s)) is not None]
            lags += per
            rows.append([n.name, view.get("server", "-"), f"0x{cube_view.get('zxid', 0):x}",
                         ", ".join(f"{x['name']}" for x in cube_view.get("segments", [])),
                         " / ".join(f"{x:+.0f}" for x in per)])  # fmt: skip
        print("query nodes (answering from memory: ready segments of " + desc.name + "):")
        print(_table(["node", "server", "cube zxid", "ready segments", "lag after commit ack, ms (per step)"], rows))
        changes = [c for cs in node_changes.values() for c in cs if not c.get("initial") and c.get("zxid")]
        summary = {
            "rows": args.rows, "master": args.master, "end_to_end_seconds": t_done - t_start,
            "spark_seconds": sum(s["spark_seconds"] for s in steps), "commit_seconds": sum(s["commit_seconds"] for s in steps),
            "query_node_lag_ms": {"p50": _p(0.5, lags), "p99": _p(0.99, lags), "max": max(lags) if lags else None, "n": len(lags)},
            "steps": steps, "changes_seen": len(changes), "cube": inst.to_dict(),
        }  # fmt: skip
        print()
        summary["metadata_round_trip"] = metadata_round_trip(client, layout, out / "metadata-backup", work / "restored",
                                                             args.tick_ms, say)  # fmt: skip
        png = out / "timeline.png"
        draw_timeline(png, t_start, steps, node_changes)
        (out / "results.json").write_text(json.dumps(summary, indent=1, default=str))
        print()
        print(f"end to end {summary['end_to_end_seconds']:.1f}s (until both query nodes showed the merge); "
              f"Spark {summary['spark_seconds']:.1f}s vs metadata commits {summary['commit_seconds'] * 1000:.1f} ms in total; "
              f"query-node lag after the commit ack p50 {summary['query_node_lag_ms']['p50']:.0f} ms, "
              f"p99 {summary['query_node_lag_ms']['p99']:.0f} ms ({len(lags)} observations)")  # fmt: skip
        print(f"wrote {png}, {out / 'results.json'}, query-node logs {', '.join(str(n.log) for n in nodes)}")
        return 0
    finally:
        say("shutting down")
        if spark is not None:
            try:
                spark.stop()
            except Exception:
                pass
        if epoch is not None:
            epoch.release()
        if client is not None:
            try:
                client.stop()
                client.close()
            except Exception:
                pass
        for n in nodes:
            n.stop()
        ensemble.stop()
        if not args.keep:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
        say("stopped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="zabby-demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help=f"fact rows over the whole date range (default {DEFAULT_ROWS:,})")
    parser.add_argument("--out", default="zabby-demo-out", help="folder for results, Parquet storage, logs and timeline.png")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--project", default="demo")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--start", default="2024-01-01", help="first day of the data")
    parser.add_argument("--days", type=int, default=60, help="days of data; built as two segments, then merged")
    parser.add_argument("--input", nargs="*", help="Parquet/CSV fact files instead of generated rows (needs the sales columns)")
    parser.add_argument("--cube-desc", help="a cube descriptor JSON instead of the built-in sales cube")
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--tick-ms", type=int, default=200, help="tickTime of the local ensemble")
    parser.add_argument("--workdir", help="parent folder of the ensemble's data (default: a temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the ensemble's data folder")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    def on_term(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        return run(args)
    except KeyboardInterrupt:
        print("interrupted; everything stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
