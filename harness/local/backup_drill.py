"""The disaster drill: back up a live 3-server ensemble under write load, destroy every data
dir, restore a new ensemble from the backup, and check it.

Shared by ``tests/ops/test_backup_flow.py`` (small in the default run, 100k znodes marked
slow) and ``scripts/backup_restore.py`` (which prints the figures).  ``zabby-admin`` runs
in-process (``zabby.cli.admin.main_captured``).  Steps and checks:

1. load ``znodes`` znodes (a multi per folder of 1000), then start a writer that keeps changing
   ``/churn`` (its own session) for as long as the backup runs;
2. ``zabby-admin snapshot save`` from the leader's admin endpoint, while the writer writes;
3. stop the writer, SIGKILL every server and delete every data dir;
4. ``zabby-admin snapshot restore`` into each server of a new ensemble (new ports, new
   folders), start it, and wait for a leader;
5. every new server reports the snapshot's digest at the snapshot's zxid (``/commands/hash``),
   a snapshot saved from the new ensemble has exactly the backup's znodes (``snapshot
   compare``, sessions aside: those of the old clients expire in the new ensemble), and the
   new ensemble's writes are in a later epoch.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zabby import SyncClient
from zabby.cli.admin import main_captured
from harness.local.admin import admin_settings, digest_at, LOCAL_ADMIN
from zabby.testing import Ensemble
from zabby.ops import compare, snapfile
from zabby.tree.txns import zxid_epoch

FOLDER_ZNODES = 1000
WRITER_SECONDS_MAX = 600.0


@dataclass
class DrillResult:
    znodes: int
    load_s: float
    save_s: float
    writes_during_save: int
    snapshot: snapfile.SnapshotInfo
    restore_s: float  # the three restores
    start_s: float  # until the new ensemble has a leader
    digests_equal: bool
    differences: list[str]
    new_epoch: int

    def lines(self) -> list[str]:
        info = self.snapshot
        return [
            f"znodes loaded: {self.znodes:,} in {self.load_s:.1f} s",
            f"snapshot saved from the leader in {self.save_s:.2f} s while {self.writes_during_save:,} writes landed: "
            f"zxid 0x{info.zxid:x}, {info.znodes:,} znodes, {info.file_bytes / 2**20:.1f} MiB file, "
            f"{info.data_bytes / 2**20:.1f} MiB of paths and data, digest 0x{info.digest:016x}",
            f"restored 3 data dirs in {self.restore_s:.2f} s; new ensemble serving in {self.start_s:.1f} s, epoch {self.new_epoch}",
            f"digest at 0x{info.zxid:x} equal on all new servers: {self.digests_equal}",
            f"znodes differing from the backup: {len(self.differences)}",
        ]


def load(hosts: str, znodes: int) -> None:
    """``znodes`` persistent znodes under /load: one multi per folder of FOLDER_ZNODES, 100
    bytes of data each.  Each multi creates its own folder, so the multis in flight do not
    depend on one another (SyncClient's async calls may go out in any order)."""
    with SyncClient(hosts, timeout=20.0) as client:
        client.create("/load", b"")
        pending = []
        for first in range(0, znodes, FOLDER_ZNODES):
            folder = f"/load/f{first // FOLDER_ZNODES:04d}"
            tx = client.transaction()
            tx.create(folder, b"")
            for index in range(first, min(first + FOLDER_ZNODES, znodes)):
                tx.create(f"{folder}/n{index:07d}", f"value-{index:08d}".encode().ljust(100, b"."))
            pending.append(tx.commit_async())
            if len(pending) >= 4:  # a few multis in flight
                _check(pending.pop(0).get(timeout=120))
        for result in pending:
            _check(result.get(timeout=120))


def _check(results: list[object]) -> None:
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        raise RuntimeError(f"loading failed: {failed[0]!r}")


class Writer(threading.Thread):
    """Changes /churn in a loop (creates and sets) until ``stop``; counts what landed."""

    def __init__(self, hosts: str) -> None:
        super().__init__(daemon=True)
        self.client = SyncClient(hosts, timeout=10.0)
        self.client.start()
        self.client.ensure_path("/churn")
        self.done = threading.Event()
        self.writes = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        deadline = time.monotonic() + WRITER_SECONDS_MAX
        try:
            while not self.done.is_set() and time.monotonic() < deadline:
                self.client.create(f"/churn/c{self.writes:07d}", b"x" * 50)
                self.client.set("/churn", str(self.writes).encode())
                self.writes += 2
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def stop(self) -> int:
        self.done.set()
        self.join(60)
        self.client.stop()
        self.client.close()
        if self.error is not None:
            raise RuntimeError(f"the writer failed: {self.error!r}")
        return self.writes


def _save(ensemble: Ensemble, target: Path) -> None:
    leader = ensemble.servers[ensemble.wait_leader()]
    code, out, err = main_captured(["snapshot", "save", str(target), "--server", f"127.0.0.1:{leader.admin_port}", "--timeout", "600",
                                    "--auth", ":".join(LOCAL_ADMIN)])  # fmt: skip
    if code != 0:
        raise RuntimeError(f"snapshot save failed ({code}): {err}{out}")


def _destroy(ensemble: Ensemble) -> None:
    ensemble.kill_all()
    for server in ensemble.servers.values():
        shutil.rmtree(server.data_dir)


def _restore(backup: Path, ensemble: Ensemble) -> None:
    for sid, server in ensemble.servers.items():
        code, _, err = main_captured(["snapshot", "restore", str(backup), "--data-dir", str(server.data_dir), "--myid", str(sid)])
        if code != 0:
            raise RuntimeError(f"restore of server {sid} failed ({code}): {err}")


def run_drill(workdir: Path, znodes: int, say: Callable[[str], object] = print) -> DrillResult:
    old = Ensemble(workdir / "old", 3, tickTime=500, **admin_settings())
    new = Ensemble(workdir / "new", 3, tickTime=500, **admin_settings())
    backup = workdir / "backup.snapshot"
    try:
        old.start(wait_s=120)
        started = time.monotonic()
        load(old.hosts, znodes)
        load_s = time.monotonic() - started
        say(f"loaded {znodes:,} znodes in {load_s:.1f} s; saving a snapshot under write load")
        writer = Writer(old.hosts)
        writer.start()
        time.sleep(0.5)  # the writer is under way before the save starts
        before, started = writer.writes, time.monotonic()
        _save(old, backup)
        save_s, during = time.monotonic() - started, writer.writes - before
        writer.stop()
        _destroy(old)
        say(f"saved in {save_s:.2f} s ({during} writes meanwhile); every data dir deleted; restoring")
        started = time.monotonic()
        _restore(backup, new)
        restore_s = time.monotonic() - started
        started = time.monotonic()
        new.start(wait_s=300)
        new.wait_leader(wait_s=120)
        start_s = time.monotonic() - started
        return _check_new(new, backup, workdir, znodes, load_s, save_s, during, restore_s, start_s)
    finally:
        old.kill_all()
        new.kill_all()


def _expected(difference: str) -> bool:
    """Differences a restored ensemble has by design: the old clients' sessions, each
    ensemble's own membership in /zookeeper/config (outside the digest, as in ZooKeeper),
    and the one write made since the restore (which changes the root's figures too)."""
    if difference.startswith("Session "):
        return True
    path = difference.split()[1]
    return path in ("/", "/after-restore") or path == "/zookeeper" or path.startswith("/zookeeper/")


def _check_new(new: Ensemble, backup: Path, workdir: Path, znodes: int, load_s: float, save_s: float, during: int,
               restore_s: float, start_s: float) -> DrillResult:  # fmt: skip
    info = snapfile.status(backup)
    digests = [digest_at(server.admin_port, info.zxid) for server in new.servers.values()]
    with SyncClient(new.hosts, timeout=10.0) as client:
        _, stat = client.create("/after-restore", b"", include_data=True)
    _save(new, workdir / "after.snapshot")
    left = compare.tree_info(snapfile.load_tree(backup))
    right = compare.tree_info(snapfile.load_tree(workdir / "after.snapshot"))
    differences = [line.text for line in compare.compare(left, right) if line.difference and not _expected(line.text)]
    return DrillResult(znodes, load_s, save_s, during, info, restore_s, start_s, all(d == info.digest for d in digests),
                       differences, zxid_epoch(stat.czxid))  # fmt: skip
