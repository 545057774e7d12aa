"""Converting a large ZooKeeper data dir, against ZooKeeper's own restart from it, side by side.

    python scripts/zookeeper_import_bench.py --znodes 1000000 --writes 20000 --runs 3

1. The data dir, as ZooKeeper 3.8 writes it: a tree of ``--znodes`` znodes (1,000 folders of
   leaves with 30-byte values) is loaded into a standalone ZooKeeper, which snapshots it at
   start; then ``--writes`` writes (sets, creates, deletes) go to its log, and it is killed.
2. ``--runs`` times, alternating, on fresh copies of that dir:
   * ZooKeeper's restart: the JVM launched until ``srvr`` answers with a Mode (it loads the
     snapshot, replays the log and writes a new snapshot first), with the times its log gives
     for each part;
   * the conversion: ``zabby-admin zookeeper import`` as a command, launch to exit.
Prints each run and the medians.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: its harness/ is not installed

from harness.local.zookeeper import ZooKeeperProcess, zookeeper_unavailable
from zabby.storage import zk_files
from zabby.testing import free_port
from zabby.tree.datatree import DataTree
from zabby.wire.zk_snapshot import tree_digest

HEAP = "3g"
FOLDER_SIZE = 1000
ACL = ((31, "world", "anyone"),)
TIME_MS = 1_700_000_000_000
SETTINGS = {"tickTime": 2000, "4lw.commands.whitelist": "*", "admin.enableServer": "false", "snapCount": 10_000_000}


def zookeeper(workdir: Path) -> ZooKeeperProcess:
    return ZooKeeperProcess(workdir, port=free_port(), heap=HEAP, jvm_options=("-XX:+UseParallelGC",), **SETTINGS)


def seed_snapshot(snap_dir: Path, znodes: int) -> None:
    """A snapshot of ``znodes`` znodes for ZooKeeper to load (and write again as its own)."""
    records = [tuple(record) for record in list(DataTree().records())[1:]]
    folders = max(1, znodes // FOLDER_SIZE)
    records.append(("/bench", b"", ACL, 1, 1, 1, TIME_MS, TIME_MS, 0, folders, 0, 0))
    zxid = 2
    for folder in range(folders):
        path = f"/bench/f{folder:05d}"
        records.append((path, b"folder", ACL, zxid, zxid, zxid + FOLDER_SIZE, TIME_MS, TIME_MS, 0, FOLDER_SIZE, 0, 0))
        zxid += 1
        for leaf in range(FOLDER_SIZE):
            records.append((f"{path}/n{leaf:04d}", b"%030d" % (folder * FOLDER_SIZE + leaf), ACL, zxid, zxid, zxid, TIME_MS, TIME_MS, 0, 0, 0, 0))
            zxid += 1
    snap_dir.mkdir(parents=True)
    zk_files.write_snapshot(snap_dir, zxid - 1, {}, records, (zxid - 1, tree_digest(records)))


def write_burst(hosts: str, writes: int) -> None:
    client = KazooClient(hosts=hosts, timeout=60)
    client.start(timeout=60)
    try:
        pending = []
        for index in range(writes):
            folder = index % 997
            if index % 3 == 0:
                pending.append(client.set_async(f"/bench/f{folder:05d}/n{index % FOLDER_SIZE:04d}", b"changed %d" % index))
            elif index % 3 == 1:
                pending.append(client.create_async(f"/bench/f{folder:05d}/new{index}", b"new"))
            else:
                pending.append(client.delete_async(f"/bench/f{folder:05d}/n{(index * 7) % FOLDER_SIZE:04d}"))
            if len(pending) >= 500:
                settle(pending)
        settle(pending)
    finally:
        client.stop()
        client.close()


def settle(pending: list[Any]) -> None:
    for result in pending:
        try:
            result.get(timeout=60)
        except KazooException:
            pass  # a delete of a node an earlier write deleted
    pending.clear()


def build(workdir: Path, znodes: int, writes: int) -> Path:
    server = zookeeper(workdir / "build")
    seed_snapshot(server.data_dir / "version-2", znodes)
    server.start(wait_s=600)
    try:
        write_burst(server.hosts, writes)
    finally:
        server.kill()
    return server.data_dir


def zookeeper_restart(data_dir: Path, workdir: Path) -> tuple[float, str]:
    server = zookeeper(workdir)
    shutil.copytree(data_dir, server.data_dir, dirs_exist_ok=True)
    started = time.monotonic()
    server.start(wait_s=600)
    elapsed = time.monotonic() - started
    server.kill()
    log = server.log_path.read_text(errors="replace")
    parts = [f"{what} {match.group(1)} ms" for what, pattern in (("snapshot loaded", r"Snapshot loaded in (\d+) ms"),
             ("txns replayed", r"txns loaded in (\d+) ms"), ("snapshot written", r"Snapshot taken in (\d+) ms"))
             if (match := re.search(pattern, log))]  # fmt: skip
    return elapsed, ", ".join(parts)


def conversion(data_dir: Path, workdir: Path) -> tuple[float, str]:
    workdir.mkdir()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "zabby.cli.admin", "zookeeper", "import", str(data_dir), "--data-dir", str(workdir / "zabby"),
                           "--myid", "1"], capture_output=True, text=True, check=False)  # fmt: skip
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    lines = done.stdout.splitlines()
    return elapsed, "; ".join(line for line in lines if line.startswith(("replayed", "took", "wrote")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--znodes", type=int, default=1_000_000)
    parser.add_argument("--writes", type=int, default=20_000, help="writes in the log after the snapshot (default 20,000)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    why = zookeeper_unavailable()
    if why is not None:
        print(f"ZooKeeper 3.8 cannot run here: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="zookeeper-import-bench-") as scratch:
        workdir = Path(scratch)
        data_dir = build(workdir, args.znodes, args.writes)
        files = sorted((path.name, path.stat().st_size) for path in (data_dir / "version-2").iterdir())
        print(f"ZooKeeper's data dir: {', '.join(f'{name} ({size / 2**20:.1f} MiB)' for name, size in files)}")
        restarts, conversions = [], []
        for run in range(args.runs):
            restart, parts = zookeeper_restart(data_dir, workdir / f"restart{run}")
            restarts.append(restart)
            print(f"run {run + 1}: ZooKeeper restart {restart:.2f} s ({parts})", flush=True)
            converted, said = conversion(data_dir, workdir / f"convert{run}")
            conversions.append(converted)
            print(f"run {run + 1}: zabby-admin zookeeper import {converted:.2f} s ({said})", flush=True)
    print(f"median: ZooKeeper restart {statistics.median(restarts):.2f} s, import {statistics.median(conversions):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
