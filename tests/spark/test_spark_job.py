"""The PySpark cube job against a real ensemble: builds, merge, leader kill and a query node
that was away during a build, and a driver killed between Spark and the commit.  Small data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests import ROOT
from tests.spark.conftest import SHORT_JVM, wait_until
from zabby.spark.epoch import ProjectEpoch
from zabby.spark.job import FAULT_ENV, CubeJob
from zabby.spark.metastore import MetaStore
from zabby.spark.model import Layout, sales_cube_desc, sales_model, sales_project
from zabby.spark.query_node import QueryNode, prefer_host
from zabby.testing import Ensemble

ROWS = 20_000
CUBE = "sales_cube"


def make_job(spark, make_client, storage: Path, project: str = "p", hosts: str | None = None, **kw) -> CubeJob:
    from zabby.spark.cube import SalesSpec, generate_sales

    client = make_client(hosts)
    layout = Layout(project)
    epoch = ProjectEpoch(client, layout)
    epoch.acquire(timeout=10)
    store = MetaStore(client, layout, epoch)
    store.init_project(sales_project(project), sales_model(), sales_cube_desc(), str(storage))
    spec = SalesSpec(rows=ROWS, days=60)
    return CubeJob(spark, store, sales_cube_desc(), sales_model(), str(storage),
                   lambda a, b: generate_sales(spark, spec, a, b, 2), progress=False, **kw)  # fmt: skip


def ready_ids(node: QueryNode) -> list[str]:
    return [s.id for s in node.ready_segments(CUBE)]


def test_builds_and_merge(spark, make_client, tmp_path: Path) -> None:
    from zabby.spark.cube import query_cuboid

    job = make_job(spark, make_client, tmp_path / "storage")
    b1 = job.build("2024-01-01", "2024-01-31")
    b2 = job.build("2024-01-31", "2024-03-01")
    assert b1.segment.input_records + b2.segment.input_records == ROWS
    assert b1.segment.cuboid_count == len(sales_cube_desc().cuboids()) == 21
    assert b2.commit.zxid > b1.commit.zxid and b1.spark_seconds > b1.commit_seconds
    paths = [b1.segment.storage_path, b2.segment.storage_path]
    apex = query_cuboid(spark, job.desc, paths, []).collect()[0]
    assert apex["_COUNT_"] == ROWS
    by_region = {r["region"]: r for r in query_cuboid(spark, job.desc, paths, ["region"]).collect()}
    m = job.merge()
    assert m.segment.merged_from == [b1.segment.uuid, b2.segment.uuid]
    cube = job.store.read_cube(CUBE).doc
    assert [s.id for s in cube.segments] == [m.segment.uuid] and cube.segments[0].date_range_end == "2024-03-01"
    merged = {r["region"]: r for r in query_cuboid(spark, job.desc, [m.segment.storage_path], ["region"]).collect()}
    assert merged.keys() == by_region.keys()
    for region, row in merged.items():
        old = by_region[region]
        assert row["_COUNT_"] == old["_COUNT_"] and row["TOTAL_QUANTITY"] == old["TOTAL_QUANTITY"]
        assert row["MIN_PRICE"] == old["MIN_PRICE"] and row["MAX_PRICE"] == old["MAX_PRICE"]
        assert row["CUSTOMERS"] == old["CUSTOMERS"]  # HLL sketches union the same way
    assert [e.action for _, e, _ in job.store.audit_trail()] == ["CREATE_PROJECT", "BUILD", "BUILD", "MERGE"]


def test_query_nodes_converge_after_leader_kill_mid_build(spark, ensemble: Ensemble, make_client, tmp_path: Path) -> None:
    nodes = [QueryNode(prefer_host(ensemble.hosts, i), "p", name=f"qn{i}", session_timeout=4.0).start() for i in range(2)]
    try:
        killed: list[int] = []

        def kill_leader(segment) -> None:  # Spark is done, the commit is next: the leader dies now
            sid = ensemble.wait_leader()
            ensemble.servers[sid].kill()
            killed.append(sid)

        job = make_job(spark, make_client, tmp_path / "storage", after_spark=kill_leader)
        report = job.build("2024-01-01", "2024-01-31")
        assert killed and report.commit.zxid > 0
        want = [report.segment.uuid]
        wait_until(lambda: all(ready_ids(n) == want for n in nodes), 30, "both query nodes show the build")
        zxids = {n.cube(CUBE)[1] for n in nodes}
        assert zxids == {report.commit.zxid}
        ensemble.servers[killed[0]].start()
        job.after_spark = None
        r2 = job.build("2024-01-31", "2024-03-01")
        wait_until(lambda: all(ready_ids(n) == [report.segment.uuid, r2.segment.uuid] for n in nodes), 30, "second build")
    finally:
        for n in nodes:
            n.stop()


def test_query_node_away_during_build_catches_up(spark, ensemble: Ensemble, make_client, tmp_path: Path) -> None:
    """qn-a talks to one server only, which is down during the build; qn-b is stopped during it."""
    only = 1
    qa = QueryNode(ensemble.servers[only].hosts, "p", name="qn-a", session_timeout=30.0).start()
    qb_log = tmp_path / "qn-b.jsonl"
    qb = QueryNode(ensemble.hosts, "p", name="qn-b", log_path=qb_log).start()
    try:
        others = ",".join(s.hosts for sid, s in ensemble.servers.items() if sid != only)  # the driver uses the quorum without it
        job = make_job(spark, make_client, tmp_path / "storage", hosts=others,
                       after_spark=lambda seg: (ensemble.servers[only].kill(), qb.stop()))  # fmt: skip
        report = job.build("2024-01-01", "2024-01-31")
        assert ready_ids(qa) == []  # its only server is down: it cannot know yet
        ensemble.servers[only].start()
        wait_until(lambda: ready_ids(qa) == [report.segment.uuid], 30, "qn-a caught up after its server came back")
        qb2 = QueryNode(ensemble.hosts, "p", name="qn-b", log_path=qb_log).start()
        try:
            assert ready_ids(qb2) == [report.segment.uuid]  # a restarted node loads the committed state
            seen = [json.loads(line) for line in qb_log.read_text().splitlines()]
            assert any(e.get("kind") == "cube" and e.get("zxid") == report.commit.zxid for e in seen)
        finally:
            qb2.stop()
    finally:
        qa.stop()


def test_driver_killed_between_spark_and_commit(spark, ensemble: Ensemble, make_client, tmp_path: Path) -> None:
    client = make_client()
    layout = Layout("p")
    epoch = ProjectEpoch(client, layout)
    epoch.acquire()
    store = MetaStore(client, layout, epoch)
    store.init_project(sales_project("p"), sales_model(), sales_cube_desc(), str(tmp_path / "storage"))
    epoch.release()
    before = store.read_cube(CUBE)
    env = {**os.environ, **SHORT_JVM, FAULT_ENV: "exit-before-commit"}
    proc = subprocess.run(
        [sys.executable, "-m", "zabby.spark.job", "--hosts", ensemble.hosts, "--project", "p", "--storage", str(tmp_path / "storage"),
         "--rows", "5000", "--start", "2024-01-01", "--end", "2024-01-31"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 75, proc.stderr[-3000:]
    written = list((tmp_path / "storage" / "p" / CUBE).glob("*/*.parquet"))
    assert written  # Spark did finish: its files exist, but nothing references them
    after = store.read_cube(CUBE)
    assert after.version == before.version and after.doc.segments == []
    assert client.get_children(layout.segments(CUBE)) == []
    assert [e.action for _, e, _ in store.audit_trail()] == ["CREATE_PROJECT"]
    wait_until(lambda: client.get_children(layout.epoch) == [], 15, "the dead driver's epoch node to go with its session")
