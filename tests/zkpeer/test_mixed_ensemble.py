"""ZooKeeper 3.8 servers and zabby servers in one ensemble (``quorum.protocol=zookeeper``, or
zabby's own with ``quorum.protocol.bridge=true``): zabby as a follower, an observer and the leader.  Through every member, the differential's seeded
ops (kazoo, and ZooKeeper's Java client through the zabby members) answer as a standalone
ZooKeeper answers them, writes of every txn type commit, and afterwards every member holds
the same tree, node by node with every Stat field and ACL, with no digest mismatch (or exit)
in ZooKeeper's logs.  Restarts that sync by DIFF and SNAP both ways, under load, and sessions
moving between the kinds are in the slow set."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from tests.zkpeer.mixed import KINDS_NODES, assert_converged, client_of, need_zookeeper, write_every_kind, zookeeper_log_problems
from harness.differential.java_client import build_driver
from harness.differential.runner import Pair, run_ops
from harness.differential.servers import mixed_ensemble, running_mixed_pair, zookeeper_server
from harness.differential.workload import Workload
from harness.local.javac import JavaUnavailable
from harness.local.mixed import ZABBY, ZABBY_NATIVE, ZOOKEEPER, MixedEnsemble
from harness.local.zookeeper import ZooKeeperProcess
from zabby.testing.processes import ServerProcess

ZK = ZOOKEEPER
# name: (kinds, observers, the roles expected of some servers)
TOPOLOGIES: dict[str, tuple[dict[int, str], tuple[int, ...], dict[int, str]]] = {
    "zabby-follows": ({1: ZABBY, 2: ZK, 3: ZK}, (), {1: "follower"}),  # the largest id of equal logs leads: a ZooKeeper one
    "zabby-leads": ({1: ZK, 2: ZK, 3: ZABBY}, (), {3: "leader"}),
    "one-zookeeper-two-zabby": ({1: ZK, 2: ZABBY, 3: ZABBY}, (), {3: "leader", 1: "follower"}),
    "zabby-observes": ({1: ZK, 2: ZK, 3: ZABBY}, (3,), {3: "observer"}),
    "zookeeper-observes-zabby": ({1: ZK, 2: ZABBY, 3: ZK}, (3,), {2: "leader", 3: "observer"}),
    # on zabby's own protocol with quorum.protocol.bridge=true: it answers ZooKeeper's servers in theirs
    "bridging-zabby-leads": ({1: ZK, 2: ZK, 3: ZABBY_NATIVE}, (), {3: "leader"}),
    "bridging-zabby-follows": ({1: ZABBY_NATIVE, 2: ZK, 3: ZK}, (), {1: "follower"}),
}
BRIDGED = {"bridging-zabby-leads": (3,), "bridging-zabby-follows": (1,)}
DEFAULT_TOPOLOGIES = ("zabby-follows", "zabby-leads", "bridging-zabby-leads")
DIFF_OPS, JAVA_OPS = 200, 150


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone ZooKeeper with the differential's settings: what every member must answer like."""
    need_zookeeper()
    server = zookeeper_server(Path(tmp_path_factory.mktemp("reference")))
    server.start()
    try:
        yield server.hosts
    finally:
        server.kill()


def started(tmp_path: Path, topology: str, **settings: Any) -> MixedEnsemble:
    kinds, observers, roles = TOPOLOGIES[topology]
    ensemble = mixed_ensemble(tmp_path, kinds, observers=observers, bridged=BRIDGED.get(topology, ()), **settings)
    ensemble.start(90)
    ensemble.wait_leader(60, everyone=True)
    modes = ensemble.modes()
    assert {sid: modes[sid] for sid in roles} == roles, modes
    return ensemble


def run_differential(reference: str, member: str, seed: int, ops: int, client: str = "kazoo") -> None:
    root = f"/mixed-{client}-{seed}"
    result = run_ops(Pair(reference, member), seed, root, Workload(seed, root), ops, client)
    assert result.divergence is None, str(result.divergence)


def assert_zabby_learners_checked_digests(ensemble: MixedEnsemble) -> None:
    """Each zabby learner compared its leader's ZooKeeper digest of the txns it applied with
    its own tree's, and none differed (as ZooKeeper's learners check a zabby leader's)."""
    modes = ensemble.modes()
    for sid, server in ensemble.servers.items():
        if isinstance(server, ServerProcess):
            stats = server.mntr()
            assert stats["zk_digest_mismatches_count"] == "0", (sid, stats)
            if modes[sid] != "leader":
                assert int(stats["zk_digests_checked"]) > 0, (sid, modes[sid], stats)


def check_topology(reference: str, tmp_path: Path, topology: str) -> None:
    ensemble = started(tmp_path, topology)
    holders: list[KazooClient] = []
    try:
        java = True
        for sid, server in ensemble.servers.items():
            run_differential(reference, server.hosts, sid, DIFF_OPS)
            if isinstance(server, ServerProcess) and java:
                try:
                    build_driver()
                except JavaUnavailable:
                    java = False
                else:
                    run_differential(reference, server.hosts, 100 + sid, JAVA_OPS, client="java")
            holders.append(write_every_kind(server.hosts, f"/kinds-{sid}"))
        assert assert_converged(ensemble) == 3 + KINDS_NODES * len(ensemble.servers)  # /, /zookeeper, its quota node
        assert not zookeeper_log_problems(ensemble)
        assert_zabby_learners_checked_digests(ensemble)
    finally:
        for holder in holders:
            holder.stop()
            holder.close()
        ensemble.kill_all()


@pytest.mark.parametrize("topology", DEFAULT_TOPOLOGIES)
def test_every_member_answers_as_zookeeper_and_holds_the_same_tree(reference: str, tmp_path: Path, topology: str) -> None:
    check_topology(reference, tmp_path, topology)


@pytest.mark.slow
@pytest.mark.parametrize("topology", [name for name in TOPOLOGIES if name not in DEFAULT_TOPOLOGIES])
def test_the_other_topologies(reference: str, tmp_path: Path, topology: str) -> None:
    check_topology(reference, tmp_path, topology)


class Writers:
    """Writers through the given servers until stopped: setData and sequential creates."""

    def __init__(self, hosts: list[str]) -> None:
        self.stop = threading.Event()
        self.counts: list[int] = []
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._write, args=(h, n), daemon=True) for n, h in enumerate(hosts)]
        for thread in self.threads:
            thread.start()

    def _write(self, hosts: str, n: int) -> None:
        """Writes, riding out the elections a killed leader causes (ConnectionLoss: the write
        may or may not have happened; either way the trees must agree)."""
        count = 0
        try:
            with client_of(hosts) as client:
                client.ensure_path(f"/load-{n}")
                while not self.stop.is_set():
                    try:
                        client.set(f"/load-{n}", b"%d" % count)
                        client.create(f"/load-{n}/c-", b"", sequence=True, ephemeral=count % 3 == 0)
                        count += 1
                    except ConnectionLoss:
                        time.sleep(0.1)
        except BaseException as exc:  # noqa: BLE001 -- reported by finish()
            self.errors.append(exc)
        self.counts.append(count)

    def finish(self) -> list[int]:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)
        assert not self.errors, self.errors
        return self.counts


@pytest.mark.slow
@pytest.mark.parametrize("topology", ["zabby-follows", "zabby-leads"])
def test_restarts_sync_by_diff_and_snap_under_load(reference: str, tmp_path: Path, topology: str) -> None:
    """Each member is killed and restarted in turn while clients write through the others:
    zabby's commitLogCount and ZooKeeper's forceSnapshotSync make some syncs SNAPs, with the
    leader's fuzzy tree on ZooKeeper's side; the trees end up identical."""
    ensemble = started(tmp_path, topology, commitLogCount=20, zk_properties={"zookeeper.forceSnapshotSync": "true"})
    try:
        for sid, server in ensemble.servers.items():
            others = [s.hosts for other, s in ensemble.servers.items() if other != sid]
            writers = Writers(others)
            time.sleep(1)
            server.kill()
            time.sleep(1)
            server.start(90)
            time.sleep(1)
            assert min(writers.finish()) > 0
            ensemble.wait_leader(60, everyone=True)
        assert assert_converged(ensemble) > 10
        assert not zookeeper_log_problems(ensemble)
        logs = {sid: server.log_path.read_text(errors="replace") for sid, server in ensemble.servers.items()}
        zabby_snaps = sum(len(re.findall(r"installed a snapshot at 0x[1-9a-f]", text)) for text in logs.values())
        zookeeper_snaps = sum(len(re.findall(r"Getting a snapshot from leader 0x[1-9a-f]", text)) for text in logs.values())
        assert zabby_snaps and zookeeper_snaps, (zabby_snaps, zookeeper_snaps)  # SNAPs both ways, not only DIFFs
    finally:
        ensemble.kill_all()


@pytest.mark.slow
def test_sessions_move_between_zookeeper_and_zabby_members(tmp_path: Path) -> None:
    """A session made on a zabby member re-attaches to a ZooKeeper member (the password is
    ZooKeeper's, derived from the id) and the other way round (zabby's REVALIDATE makes it the
    session's owner at ZooKeeper's leader, else its writes would be SESSIONMOVED), and both
    keep their ephemerals and write on."""
    need_zookeeper()
    ensemble = started(tmp_path, "zabby-follows")
    try:
        zabby, zookeeper = ensemble.servers[1], ensemble.servers[2]
        assert isinstance(zookeeper, ZooKeeperProcess)
        for first, second in ((zabby, zookeeper), (zookeeper, zabby)):
            with client_of(first.hosts) as made:
                path = made.create(f"/moved-{first.port}", b"", ephemeral=True)
                moved = KazooClient(hosts=second.hosts, timeout=20, client_id=made.client_id)
                moved.start(timeout=30)
                try:
                    assert moved.client_id[0] == made.client_id[0]
                    moved.set(path, b"written after the move")
                    assert moved.get(path)[0] == b"written after the move"
                    moved.create(f"/after-move-{second.port}", b"")
                finally:
                    moved.stop()
                    moved.close()
        assert assert_converged(ensemble) == 3 + 2  # the ephemerals went with their sessions
        assert not zookeeper_log_problems(ensemble)
    finally:
        ensemble.kill_all()


def test_the_differential_through_a_mixed_ensemble_needs_its_zabby_member(tmp_path: Path) -> None:
    for kinds in ({1: ZK, 2: ZK, 3: ZK}, {1: ZABBY, 2: ZK}):
        with pytest.raises(ValueError), running_mixed_pair(tmp_path, kinds):
            pass
