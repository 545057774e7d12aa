"""Kylin-style metadata backup and restore (no Spark needed): a consistent cut while a
driver commits builds, a restore into another ensemble under the project's epoch, and the
project going on there (the next build's audit entry does not collide with restored ones)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import ROOT
from tests.ops.helpers import admin
from tests.spark.test_metastore import CUBE, driver, segment
from zabby import SyncClient
from zabby.spark.backup import BackupError, backup_project, load_backup, node_file, restore_project
from zabby.spark.demo import metadata_round_trip
from zabby.spark.epoch import EpochTaken, ProjectEpoch
from zabby.spark.metastore import MetaStore
from zabby.spark.model import CubeInstance, CubeStatistics, Layout, sales_cube_desc, sales_model, sales_project
from zabby.testing import ServerProcess


def build_project(store: MetaStore, builds: int) -> None:
    store.init_project(sales_project(store.layout.project), sales_model(), sales_cube_desc())
    for day in range(1, builds + 1):
        store.add_segment(CUBE, segment(f"s{day}", f"2024-01-{day:02d}", f"2024-01-{day + 1:02d}"))


def metadata(client: SyncClient, layout: Layout) -> dict[str, bytes]:
    """Every persistent node's data under the project, by path relative to it."""
    out, todo = {}, [layout.base]
    while todo:
        path = todo.pop()
        data, stat = client.get(path)
        if stat.ephemeralOwner == 0:
            out[path[len(layout.base) :]] = data
            todo += [f"{path}/{child}" for child in client.get_children(path)]
    return out


@pytest.fixture
def target(tmp_path: Path):
    """Another ensemble (a standalone server) and a client of it."""
    server = ServerProcess(tmp_path / "target")
    server.start()
    client = SyncClient(server.hosts, timeout=5.0)
    client.start()
    try:
        yield client
    finally:
        client.stop()
        client.close()
        server.kill()


def test_backup_then_restore_into_another_ensemble(make_client, target: SyncClient, tmp_path: Path) -> None:
    client, epoch, store = driver(make_client)
    epoch.acquire()
    build_project(store, builds=3)
    manifest = backup_project(client, store.layout, tmp_path / "backup")
    assert manifest.zxid >= client.exists(store.layout.cube(CUBE)).mzxid
    files = json.loads((tmp_path / "backup" / "manifest.json").read_text())["files"]
    assert node_file("cube/sales_cube") in files and not any("__lock__" in name for name in files)
    assert len(files) == manifest.znodes == len(metadata(client, store.layout))

    report = restore_project(target, tmp_path / "backup")
    assert report.znodes == manifest.znodes
    assert metadata(target, store.layout) == metadata(client, store.layout)
    epoch.release()
    _, _, moved_store = driver(lambda: target)  # the project goes on in the new ensemble
    moved_store.epoch.acquire()
    moved_store.add_segment(CUBE, segment("s9", "2024-02-01", "2024-02-02"))
    cube = CubeInstance.from_json(target.get(store.layout.cube(CUBE))[0])
    assert [s.id for s in cube.segments] == ["s1", "s2", "s3", "s9"] and len(moved_store.audit_trail()) == 5
    moved_store.epoch.release()


def test_a_name_that_only_ends_in_ten_digits_is_no_sequence_to_advance(make_client, target: SyncClient, tmp_path: Path) -> None:
    """A segment's id can end in ten digits (a UUID's last group, ~1% of them): taken for a
    sequential suffix, it asked the restore for billions of filler creates (the demo's
    process ran out of memory)."""
    client, epoch, store = driver(make_client)
    epoch.acquire()
    store.init_project(sales_project(store.layout.project), sales_model(), sales_cube_desc())
    store.add_segment(CUBE, segment("1c1bfd5b-ccb8-40df-869e-ae6342356988", "2024-01-01", "2024-01-02"))
    backup_project(client, store.layout, tmp_path / "backup")
    epoch.release()

    report = restore_project(target, tmp_path / "backup")
    assert metadata(target, store.layout) == metadata(client, store.layout)
    assert report.seconds < 30
    segments = f"{store.layout.base}/segment/{CUBE}"
    assert target.exists(segments).cversion == client.exists(segments).cversion  # no filler was made


class MeddlingClient:
    """A reader's client that lets a driver commit a build right before the reader fetches
    the cube's statistics, once: the cube instance it already holds is then older than the
    statistics it gets, so that first walk is not a consistent cut."""

    def __init__(self, client: SyncClient, path: str, meddle: Callable[[], object]) -> None:
        self.client, self.path, self.meddle = client, path, meddle
        self.meddled = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def get_async(self, path: str) -> Any:
        if path == self.path and not self.meddled:
            self.meddled = True
            self.client.exists(path)  # FIFO: every read sent before this one is answered
            self.meddle()
            self.client.sync(path)  # our server may be a follower that has not applied the build yet
        return self.client.get_async(path)


def test_the_cut_is_consistent_while_a_driver_commits(make_client, tmp_path: Path) -> None:
    client, epoch, store = driver(make_client)
    epoch.acquire()
    build_project(store, builds=2)
    reader = MeddlingClient(make_client(), store.layout.statistics(CUBE),
                            lambda: store.add_segment(CUBE, segment("late", "2024-03-01", "2024-03-02")))  # fmt: skip
    manifest = backup_project(reader, store.layout, tmp_path / "backup")
    assert reader.meddled and manifest.zxid >= client.exists(store.layout.cube(CUBE)).mzxid
    _, docs = load_backup(tmp_path / "backup")
    cube = CubeInstance.from_json(docs[f"cube/{CUBE}"])
    stats = CubeStatistics.from_json(docs[f"cube_statistics/{CUBE}"])
    stored = {rel.rsplit("/", 1)[1] for rel in docs if rel.startswith(f"segment/{CUBE}/")}
    assert [ref.id for ref in cube.segments] == ["s1", "s2", "late"] == sorted(stored, key=["s1", "s2", "late"].index)
    assert stats.segment_count == 3


def test_restore_respects_the_epoch_and_existing_metadata(make_client, target: SyncClient, tmp_path: Path) -> None:
    client, epoch, store = driver(make_client)
    epoch.acquire()
    build_project(store, builds=1)
    backup_project(client, store.layout, tmp_path / "backup")
    owner = ProjectEpoch(target, Layout("p"), owner="a running driver")
    owner.acquire()
    with pytest.raises(EpochTaken):
        restore_project(target, tmp_path / "backup", epoch_timeout_s=0.5)
    owner.release()
    restore_project(target, tmp_path / "backup")
    with pytest.raises(BackupError, match="already has .* metadata znodes"):
        restore_project(target, tmp_path / "backup")
    target.set(Layout("p").cube(CUBE), b"{}")
    restore_project(target, tmp_path / "backup", replace=True)
    assert metadata(target, store.layout) == metadata(client, store.layout)


def test_a_damaged_backup_is_refused_before_anything_is_written(make_client, target: SyncClient, tmp_path: Path) -> None:
    client, epoch, store = driver(make_client)
    epoch.acquire()
    build_project(store, builds=1)
    backup_project(client, store.layout, tmp_path / "backup")
    (tmp_path / "backup" / node_file("project")).write_text('{"path": "/kylin/p/project", "data": "tampered"}')
    with pytest.raises(BackupError, match="checksum mismatch"):
        restore_project(target, tmp_path / "backup")
    assert target.exists("/kylin/p") is None
    with pytest.raises(BackupError, match="no manifest.json"):
        restore_project(target, tmp_path)


def test_a_node_file_without_its_stat_is_refused_with_its_name(make_client, target: SyncClient, tmp_path: Path) -> None:
    """A node file that matches its checksum but lacks a field (written by hand, or by another
    tool) is named in a BackupError, not left to a KeyError; nothing is written."""
    client, epoch, store = driver(make_client)
    epoch.acquire()
    build_project(store, builds=1)
    backup = tmp_path / "backup"
    backup_project(client, store.layout, backup)
    name = node_file("project")
    node = json.loads((backup / name).read_text())
    del node["stat"]
    (backup / name).write_text(json.dumps(node))
    manifest = json.loads((backup / "manifest.json").read_text())
    manifest["files"][name] = hashlib.sha256((backup / name).read_bytes()).hexdigest()
    (backup / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BackupError, match=r"project/@node.json: not a node file \(KeyError"):
        restore_project(target, backup)
    assert target.exists("/kylin/p") is None


def test_zabby_admin_kylin_backup_and_restore_under_another_name(make_client, ensemble, target: SyncClient, tmp_path: Path) -> None:
    client, epoch, store = driver(make_client)
    epoch.acquire()
    build_project(store, builds=2)
    code, out, err = admin("kylin", "backup", str(tmp_path / "b"), "--hosts", ensemble.hosts, "--project", "p")
    assert code == 0 and "at zxid 0x" in out, err
    hosts = ",".join(f"{host}:{port}" for host, port in target.hosts)
    code, out, err = admin("kylin", "restore", str(tmp_path / "b"), "--hosts", hosts, "--project", "copy")
    assert code == 0 and "into project copy" in out, err
    assert metadata(target, Layout("copy")) == metadata(client, store.layout)
    code, _, err = admin("kylin", "restore", str(tmp_path / "b"), "--hosts", hosts, "--project", "copy")
    assert code == 1 and "already has" in err


def test_the_demos_round_trip_restores_into_a_new_ensemble(make_client, tmp_path: Path) -> None:
    client, epoch, store = driver(make_client)
    epoch.acquire()
    build_project(store, builds=2)
    said: list[str] = []
    trip = metadata_round_trip(client, store.layout, tmp_path / "backup", tmp_path / "restored", 200, said.append)
    assert trip["equal"] and trip["znodes"] == len(metadata(client, store.layout))
    assert "all" in said[-1] and "znodes equal" in said[-1]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_zabby_demo_runs_end_to_end_with_its_metadata_round_trip(tmp_path: Path) -> None:
    from tests.spark.conftest import java_missing

    if java_missing():
        pytest.skip(java_missing())
    run = subprocess.run([sys.executable, "-m", "zabby.spark.demo", "--rows", "4000", "--days", "4", "--out", str(tmp_path / "out"),
                          "--shuffle-partitions", "2", "--driver-memory", "1g", "--workdir", str(tmp_path)],
                         capture_output=True, text=True, timeout=800, cwd=ROOT)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["metadata_round_trip"]["equal"] and (tmp_path / "out" / "metadata-backup" / "manifest.json").exists()
