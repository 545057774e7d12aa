"""``sync`` makes the next read linearizable, even on a leader cut off from its quorum that has
not noticed yet (ZOOKEEPER-1675): it answers only after a quorum confirmed, in a round started
after the sync arrived, that it still leads.

The leader keeps a long syncLimit (it notices late); the followers a short one (they notice
soon, elect a new leader and take a write).  Every link between the old leader and the
others is blackholed (connections stay open, no byte passes), not cut: a cut connection would
tell the old leader at once.  A client connected to the old leader only then syncs and reads:
it must fail, or see the new write; never the old value.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.local.proxied import ProxiedEnsemble
from zabby import SyncClient
from zabby.errors import KazooException
from zabby.testing import ServerProcess, wait_until

TICK_MS = 200
LEADER_SYNC_LIMIT = 30  # 6 s before the old leader notices
FOLLOWER_SYNC_LIMIT = 2  # 0.4 s before the followers do


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[ProxiedEnsemble]:
    group = ProxiedEnsemble(tmp_path, 3, tickTime=TICK_MS, syncLimit=LEADER_SYNC_LIMIT)
    try:
        group.start()
        yield group
    finally:
        group.kill_all()


def restart_with_sync_limit(server: ServerProcess, sync_limit: int) -> None:
    server.kill()
    server.settings["syncLimit"] = sync_limit
    server.write_config()
    server.start(30)


def test_sync_on_a_leader_cut_off_from_its_quorum_never_reads_a_stale_value(ensemble: ProxiedEnsemble) -> None:
    old = wait_until_leader(ensemble)
    for sid in (1, 2, 3):
        if sid != old:  # the followers notice a silent leader soon
            restart_with_sync_limit(ensemble.servers[sid], FOLLOWER_SYNC_LIMIT)
    wait_until(lambda: all(ensemble.servers[s].mode() == "follower" for s in (1, 2, 3) if s != old), 30, "followers back")
    assert ensemble.leader() == old
    on_old = SyncClient(ensemble.servers[old].hosts, timeout=20.0)
    on_old.start()
    on_old.create("/x", b"old")
    ensemble.blackhole({old})
    others = ",".join(ensemble.servers[s].hosts for s in (1, 2, 3) if s != old)
    writer = SyncClient(others, timeout=10.0)
    writer.start(timeout=20)
    started = time.monotonic()
    writer.retry(writer.set, "/x", b"new")  # a new leader was elected and took the write
    assert ensemble.servers[old].mode() == "leader", "the test needs the old leader not to have noticed yet"
    try:
        on_old.sync("/x")
        value = on_old.get("/x")[0]
    except KazooException:  # it could not confirm its leadership: it stepped down (allowed)
        value = None
    assert value in (None, b"new"), f"a sync on the old leader let a read see {value!r} after b'new' was written"
    assert time.monotonic() - started < LEADER_SYNC_LIMIT * TICK_MS / 1000 + 10
    writer.stop()
    on_old.stop()


def wait_until_leader(ensemble: ProxiedEnsemble) -> int:
    found: list[int] = []
    wait_until(lambda: found.append(ensemble.leader() or 0) or found[-1], 30, "a leader")
    return found[-1]
