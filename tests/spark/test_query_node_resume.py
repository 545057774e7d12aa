"""A query node restarted from its view file resumes the watch feed from the zxid it saved
instead of re-reading the project's metadata; with no usable history or view it re-reads.
Metadata-only commits (no Spark): the same multis a build or merge makes."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest

from zabby import SyncClient
from zabby.spark.epoch import ProjectEpoch
from zabby.spark.metastore import MetaStore
from zabby.spark.model import Layout, sales_cube_desc, sales_model, sales_project
from zabby.spark.query_node import QueryNode
from zabby.spark.scale import metadata_only_build, metadata_only_merge
from zabby.testing import ServerProcess

CUBE = sales_cube_desc().name


def make_store(client: SyncClient, project: str = "p") -> MetaStore:
    layout = Layout(project)
    epoch = ProjectEpoch(client, layout)
    epoch.acquire(timeout=10)
    store = MetaStore(client, layout, epoch)
    store.init_project(sales_project(project), sales_model(), sales_cube_desc(), "/nowhere")
    return store


def commit_days(store: MetaStore, first: int, days: int) -> int:
    """A build of each day, merged into the rest; the last commit's zxid."""
    zxid = 0
    for day in range(first, first + days):
        zxid = metadata_only_build(store, CUBE, f"2024-02-{day:02d}", f"2024-02-{day + 1:02d}")["zxid"]
        if day > first:
            zxid = metadata_only_merge(store, CUBE)["zxid"]
    return zxid


def ready(node: QueryNode) -> list[str]:
    return [s.id for s in node.ready_segments(CUBE)]


def test_a_restarted_node_resumes_from_its_view_file(ensemble, make_client, tmp_path: Path) -> None:
    store = make_store(make_client())
    view = tmp_path / "qn.view.json"
    node = QueryNode(ensemble.hosts, "p", name="qn", view_path=view).start()
    try:
        last = commit_days(store, 1, 3)
        assert node.wait_for_zxid(last, 15)
    finally:
        node.stop()
    saved = json.loads(view.read_text())
    assert saved["mirror"]["zxid"] == node.zxid >= last and saved["cubes"][CUBE]["segments"]
    last = commit_days(store, 10, 10)  # 19 commits while the node is down
    again = QueryNode(ensemble.hosts, "p", name="qn", view_path=view).start()
    try:
        assert again.resumed_from == saved["mirror"]["zxid"]
        assert again.cache.full_reads == 0  # from the feed alone
        assert again.wait_for_zxid(last, 15)
        assert ready(again) == [s.id for s in store.read_cube(CUBE).doc.ready_segments()]
        fresh = QueryNode(ensemble.hosts, "p", name="fresh").start()
        try:
            assert fresh.wait_for_zxid(last, 15) and fresh.cache.full_reads == 1
            assert again.cache.snapshot() == fresh.cache.snapshot()
        finally:
            fresh.stop()
        seen = [c for c in again.changes if c.get("kind") == "segment"]
        assert {c["event"] for c in seen} >= {"NODE_ADDED", "NODE_REMOVED"}  # builds and merges, from events
    finally:
        again.stop()


def test_a_view_older_than_the_history_or_unreadable_loads_afresh(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = ServerProcess(tmp_path / "server", watchHistoryTxns=5)
    server.start()
    try:
        with SyncClient(server.hosts, timeout=4.0) as client:
            store = make_store(client)
            view = tmp_path / "qn.view.json"
            QueryNode(server.hosts, "p", name="qn", view_path=view).start().stop()
            last = commit_days(store, 1, 5)  # 9 commits: more than the server keeps
            node = QueryNode(server.hosts, "p", name="qn", view_path=view).start()
            try:
                assert node.resumed_from is not None and node.cache.full_reads == 1
                assert node.wait_for_zxid(last, 15)
                assert ready(node) == [s.id for s in store.read_cube(CUBE).doc.ready_segments()]
            finally:
                node.stop()
            view.write_text("{not json")
            with caplog.at_level(logging.WARNING, logger="zabby.spark.query_node"):
                node = QueryNode(server.hosts, "p", name="qn", view_path=view).start()
            try:
                assert node.resumed_from is None and node.cache.full_reads == 1 and node.zxid >= last
                assert "unreadable" in caplog.text
            finally:
                node.stop()
    finally:
        server.kill()


def test_query_nodes_of_one_process_share_one_loop_thread(ensemble, make_client) -> None:
    """Many query nodes in one process (the scale run puts 25 in each worker) cost no thread
    each: their mirrors run on the process's one shared loop (docs/reliability.md)."""
    store = make_store(make_client())
    QueryNode(ensemble.hosts, "p", name="first").start().stop()  # the shared loop is up
    before = threading.active_count()
    nodes = [QueryNode(ensemble.hosts, "p", name=f"qn{i}").start() for i in range(6)]
    try:
        assert threading.active_count() == before
        last = commit_days(store, 1, 2)
        assert all(node.wait_for_zxid(last, 15) for node in nodes)
        assert all(ready(node) == ready(nodes[0]) != [] for node in nodes)
    finally:
        for node in nodes:
            node.stop()
