"""Dynamic reconfiguration of real server processes while clients write (issue 14).

Each test changes the membership of a running ensemble (grow 3 → 5, shrink 5 → 3, replace a
server, remove the leader, a reconfig across a partition) while writer threads create
sequential znodes and set one znode each through a SyncClient that knows every server.
Afterwards: no acknowledged write is lost, the remaining servers agree on one (zxid, digest),
``/zookeeper/config`` is the same on all of them at the new version, each server's dynamic
configuration file was rewritten with that version, and ``conf`` shows it.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.local.admin import admin_json, admin_settings
from harness.local.proxied import ProxiedEnsemble
from tests.server.wire import raw_session
from zabby import SyncClient
from zabby.errors import Err
from zabby.membership import Membership
from zabby.opcodes import OpCode
from zabby.ops.logtool import dump
from zabby.testing import Ensemble, ServerProcess, wait_until

TICK_MS = 200
SETTINGS = {"tickTime": TICK_MS, "reconfigEnabled": "true", "skipACL": "yes"}
SERVING = {"leader", "follower", "observer"}


# ----------------------------------------------------------------------------- writers
class Writers:
    """Threads that write without pause, each through its own SyncClient: a sequential create
    under ``/rc`` and a setData of ``/rc-v<worker>`` to an increasing counter, one after the
    other.  A write is acknowledged when the call returned; one that raised has an unknown
    outcome (it may or may not have landed), and the worker goes on."""

    def __init__(self, hosts: str, count: int = 2) -> None:
        self.hosts = hosts
        self.stopping = threading.Event()
        self.created: list[str] = []  # acknowledged creates: the paths the server named
        self.attempted: dict[int, list[int]] = {w: [] for w in range(count)}  # values each worker sent
        self.acked: dict[int, int] = {w: -1 for w in range(count)}  # the last value acknowledged
        self.failures = 0
        self.threads = [threading.Thread(target=self._run, args=(w,), daemon=True) for w in range(count)]

    def __enter__(self) -> Writers:
        setup = SyncClient(self.hosts, timeout=6.0)
        setup.start(timeout=20)
        try:
            setup.ensure_path("/rc")
            for worker in self.attempted:
                setup.ensure_path(f"/rc-v{worker}")
        finally:
            setup.stop()
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(30)
        assert not any(thread.is_alive() for thread in self.threads), "a writer did not stop"

    @property
    def count(self) -> int:
        return len(self.created) + sum(value + 1 for value in self.acked.values())

    def wait_progress(self, writes: int = 100, timeout_s: float = 30.0) -> None:
        """Until ``writes`` more writes are acknowledged than now."""
        target = self.count + writes
        wait_until(lambda: self.count >= target, timeout_s, f"{writes} more acknowledged writes")

    def _run(self, worker: int) -> None:
        client = SyncClient(self.hosts, timeout=6.0)
        client.start(timeout=20)
        try:
            for value in range(1_000_000):
                if self.stopping.is_set():
                    return
                try:
                    self.created.append(client.create(f"/rc/w{worker}-", b"c", sequence=True))
                except Exception:
                    self.failures += 1
                    time.sleep(0.05)
                self.attempted[worker].append(value)
                try:
                    client.set(f"/rc-v{worker}", str(value).encode())
                    self.acked[worker] = value
                except Exception:
                    self.failures += 1
                    time.sleep(0.05)
        finally:
            client.stop()

    def check(self, ensemble: Ensemble, sid: int) -> None:
        """No acknowledged write is lost, read on server ``sid``."""
        client = SyncClient(ensemble.servers[sid].hosts, timeout=6.0)
        client.start(timeout=20)
        try:
            client.sync("/rc")
            present = {f"/rc/{name}" for name in client.get_children("/rc")}
            missing = [path for path in self.created if path not in present]
            assert not missing, f"{len(missing)} of {len(self.created)} acknowledged creates lost, e.g. {missing[:3]}"
            for worker, last in self.acked.items():
                value = int(client.get(f"/rc-v{worker}")[0].decode() or -1)
                later = self.attempted[worker][self.attempted[worker].index(last) + 1 :] if last >= 0 else self.attempted[worker]
                assert value == last or value in later, f"worker {worker}: /rc-v{worker} is {value}, last acknowledged {last}"
        finally:
            client.stop()


# ----------------------------------------------------------------------------- checks


def converged(ensemble: Ensemble, members: set[int]) -> bool:
    seen = set()
    for sid in members:
        try:
            stats = ensemble.servers[sid].mntr()
        except OSError:
            return False
        if "zk_digest" not in stats:
            return False
        seen.add((stats["zk_last_zxid"], stats["zk_digest"]))
    return len(seen) == 1


def config_of(server: ServerProcess) -> bytes:
    """``/zookeeper/config`` as this server has it."""
    with raw_session(server.port) as session:
        return session.call(OpCode.GET_DATA, "/zookeeper/config", False)[3]


def reconfigure(ensemble: Ensemble, sid: int, **change: str) -> Membership:
    """A reconfig asked of server ``sid``; the membership it made."""
    with SyncClient(ensemble.servers[sid].hosts, timeout=10.0) as admin:
        data, _ = admin.reconfig(change.get("joining"), change.get("leaving"), change.get("new_members"))
    return Membership.parse(data.decode())


def check_membership(ensemble: Ensemble, members: set[int], version: int, running: set[int] | None = None) -> None:
    """Every member (that is ``running``) has applied the membership of ``version`` (which
    names exactly ``members``), shows it in /zookeeper/config and conf, and wrote it to its
    files."""
    checked = members if running is None else running

    def applied() -> bool:
        try:
            return all(Membership.parse(config_of(ensemble.servers[sid]).decode()).version == version for sid in checked)
        except OSError:  # not serving yet
            return False

    wait_until(applied, 20.0, f"membership version {version:x} on {sorted(checked)}")
    texts = {sid: config_of(ensemble.servers[sid]) for sid in checked}
    assert len(set(texts.values())) == 1, texts
    membership = Membership.parse(next(iter(texts.values())).decode())
    assert membership.sids == frozenset(members) and membership.version == version
    for sid in checked:
        server = ensemble.servers[sid]
        wait_until(lambda: f"dynamicConfigFile=zoo.cfg.dynamic.{version:x}" in server.config_path.read_text(), 10.0,
                   f"server {sid}'s zoo.cfg naming the new dynamic file")  # fmt: skip
        dynamic = server.config_path.with_name(f"zoo.cfg.dynamic.{version:x}")
        assert Membership.parse(dynamic.read_text()) == membership
        conf = server.four_letter("conf")
        assert f"version={version:x}" in conf, conf
        listed = {int(line.split("=", 1)[0][7:]) for line in conf.splitlines() if line.startswith("server.")}
        assert listed == members, conf


def check_after(ensemble: Ensemble, writers: Writers, members: set[int], version: int) -> None:
    check_membership(ensemble, members, version)
    wait_until(lambda: converged(ensemble, members), 30.0, f"{sorted(members)} at one (zxid, digest)")
    writers.check(ensemble, min(members))
    for sid in members:
        log = ensemble.servers[sid].log_path.read_text()
        assert "Traceback" not in log and " CRITICAL " not in log, (sid, ensemble.servers[sid].log_tail())


@pytest.fixture
def tmp_ensembles(tmp_path: Path) -> Iterator[list[Ensemble]]:
    """Ensembles a test makes; every process of each is killed at the end."""
    made: list[Ensemble] = []
    try:
        yield made
    finally:
        for ensemble in made:
            ensemble.kill_all()


def started(made: list[Ensemble], path: Path, size: int, **overrides: object) -> Ensemble:
    ensemble = Ensemble(path, size, **{**SETTINGS, **overrides})
    made.append(ensemble)
    ensemble.start()
    ensemble.wait_leader()
    return ensemble


# ----------------------------------------------------------------------------- tests
def test_grow_three_to_five_under_writes_and_restart_with_the_new_membership(tmp_path: Path, tmp_ensembles: list[Ensemble]) -> None:
    ensemble = started(tmp_ensembles, tmp_path, 3, **admin_settings())
    with Writers(ensemble.hosts) as writers:
        writers.wait_progress()
        for sid in (4, 5):  # each syncs as a non-voting follower of the old membership first
            ensemble.new_server(sid, {1, 2, 3}).start(30)
        membership = reconfigure(ensemble, 1, joining=f"{ensemble.spec(4)},{ensemble.spec(5)}")
        assert membership.voters == {1, 2, 3, 4, 5}
        writers.wait_progress()
    check_after(ensemble, writers, {1, 2, 3, 4, 5}, membership.version)
    leader = ensemble.wait_leader()
    assert ensemble.servers[leader].mntr()["zk_synced_followers"] == "4"  # the new servers vote now

    ensemble.servers[5].restart()  # its zoo.cfg names the dynamic file: the same membership comes back
    ensemble.servers[5].wait_mode({"follower", "leader"})
    check_membership(ensemble, {1, 2, 3, 4, 5}, membership.version)

    # the admin endpoint: the voting view (ZooKeeper's QuorumServerView), conf, the initial zoo.cfg
    admin = f"http://127.0.0.1:{ensemble.servers[1].admin_port}/commands"
    view = json.load(urllib.request.urlopen(f"{admin}/voting_view", timeout=5))["current_config"]
    quorum, election, client = ensemble.ports[4]
    assert sorted(view) == ["1", "2", "3", "4", "5"]
    assert view["4"] == {"server_addresses": [f"127.0.0.1:{quorum}"], "election_addresses": [f"127.0.0.1:{election}"],
                         "client_address": f"127.0.0.1:{client}", "learner_type": "participant"}  # fmt: skip
    conf = admin_json(ensemble.servers[1].admin_port, "configuration")  # (an administrator's: it names the data folders)
    assert conf["version"] == f"{membership.version:x}" and "server.5" in conf
    initial = admin_json(ensemble.servers[1].admin_port, "icfg")["initial_configuration"]
    assert "server.4" not in initial and "dynamicConfigFile" not in initial  # as it started: three servers


def test_shrink_five_to_three_under_writes(tmp_path: Path, tmp_ensembles: list[Ensemble]) -> None:
    ensemble = started(tmp_ensembles, tmp_path, 5)
    leader = ensemble.wait_leader()
    leaving = sorted(sid for sid in ensemble.servers if sid != leader)[:2]
    remaining = set(ensemble.servers) - set(leaving)
    with Writers(ensemble.hosts) as writers:
        writers.wait_progress()
        membership = reconfigure(ensemble, leader, leaving=",".join(map(str, leaving)))
        assert membership.voters == remaining
        for sid in leaving:  # out of the membership: they can go
            ensemble.servers[sid].stop()
        writers.wait_progress()
    check_after(ensemble, writers, remaining, membership.version)
    assert ensemble.wait_leader() in remaining

    # the whole ensemble restarted: the three come back as a three-server ensemble, where two
    # are a quorum (they would not be of the five)
    for sid in remaining:
        ensemble.servers[sid].kill()
    for sid in remaining:
        ensemble.servers[sid].launch()
    ensemble.servers[max(remaining)].kill()
    two = remaining - {max(remaining)}
    wait_until_leader(ensemble, two)
    check_membership(ensemble, remaining, membership.version, running=two)
    wait_until(lambda: converged(ensemble, two), 30.0, "the two at one (zxid, digest)")
    writers.check(ensemble, min(two))


def test_replace_a_server_with_a_new_one_in_one_reconfig(tmp_path: Path, tmp_ensembles: list[Ensemble]) -> None:
    ensemble = started(tmp_ensembles, tmp_path, 3)
    leader = ensemble.wait_leader()
    gone = min(sid for sid in ensemble.servers if sid != leader)
    with Writers(ensemble.hosts) as writers:
        writers.wait_progress()
        ensemble.new_server(4, {1, 2, 3}).start(30)
        asked = next(sid for sid in (1, 2, 3) if sid not in (gone, leader))  # a follower: it forwards the request
        membership = reconfigure(ensemble, asked, joining=ensemble.spec(4), leaving=str(gone))
        assert membership.voters == {1, 2, 3, 4} - {gone}
        ensemble.servers[gone].stop()
        writers.wait_progress()
    check_after(ensemble, writers, {1, 2, 3, 4} - {gone}, membership.version)


def test_remove_the_leader_under_writes_the_designated_leader_takes_over(tmp_path: Path, tmp_ensembles: list[Ensemble]) -> None:
    ensemble = started(tmp_ensembles, tmp_path, 3)
    with Writers(ensemble.hosts) as writers:
        writers.wait_progress()
        leader = ensemble.wait_leader()
        remaining = set(ensemble.servers) - {leader}
        membership = reconfigure(ensemble, leader, leaving=str(leader))
        assert membership.voters == remaining
        wait_until_leader(ensemble, remaining)
        writers.wait_progress()  # under the new leader, the old one still running
        ensemble.servers[leader].stop()
        writers.wait_progress()
    check_after(ensemble, writers, remaining, membership.version)


def test_a_removed_server_serves_no_session(tmp_path: Path, tmp_ensembles: list[Ensemble]) -> None:
    """A server a reconfig removed still syncs, but the leader takes nothing it forwards: it
    closes its clients' connections and refuses sessions, new or re-attaching, so clients
    move to the members instead of waiting on writes that never go (CI: writers re-attached
    to the removed old leader and stalled)."""
    ensemble = started(tmp_ensembles, tmp_path, 3)
    leader = ensemble.wait_leader()
    removed = next(sid for sid in ensemble.servers if sid != leader)
    port = ensemble.servers[removed].port
    attached = raw_session(port)
    assert attached.create("/before")[2] == 0
    reconfigure(ensemble, leader, leaving=str(removed))
    attached.sock.settimeout(10)
    with pytest.raises(ConnectionError):  # closed by the server, not merely idle
        while True:
            attached.receive()
    wait_until(lambda: ensemble.servers[removed].mode() in SERVING, 30, "the removed server syncing again")
    for session_id, password in ((attached.session_id, attached.password), (0, b"")):
        refused = raw_session(port, session_id=session_id, password=password)
        assert refused.err == Err.NOTREADONLY and "no member" in refused.handshake[-1]
    member = next(sid for sid in ensemble.servers if sid not in (leader, removed))
    moved = raw_session(ensemble.servers[member].port, session_id=attached.session_id, password=attached.password)
    assert moved.err == 0 and moved.create("/after")[2] == 0


def test_a_reconfig_asked_of_the_server_it_removes_is_answered_before_its_clients_are_closed(tmp_path: Path, tmp_ensembles: list[Ensemble]) -> None:
    """The removed server closes its clients' connections once the reconfig has been applied
    there and answered, not when the core first saw it commit: a client that asked the removed
    server got ConnectionLoss instead of the new configuration (go-zookeeper's
    TestIntegration_Reconfig, whose session was on the server its reconfig removes; issue 55)."""
    ensemble = started(tmp_ensembles, tmp_path, 3)
    leader = ensemble.wait_leader()
    removed = next(sid for sid in ensemble.servers if sid != leader)
    with raw_session(ensemble.servers[removed].port) as attached:
        reply = attached.call(OpCode.RECONFIG, None, str(removed), None, -1)
        assert reply[2] == 0, reply
        assert f"server.{removed}=" not in reply[3].decode()
        attached.sock.settimeout(10)
        with pytest.raises(ConnectionError):  # then closed by the server
            while True:
                attached.receive()


def test_a_reconfig_in_a_partition_commits_only_where_both_quorums_are(tmp_path: Path, tmp_ensembles: list[Ensemble]) -> None:
    """Five servers; the links between the leader with one follower and the other three drop
    everything.  A reconfig asked of the old leader (before it notices) is proposed where no
    quorum of the old membership can ack it: it fails and changes nothing anywhere.  The
    majority elects a leader, and a different reconfig asked there commits; when the partition
    heals, the old leader drops its uncommitted proposal and takes the majority's membership."""
    ensemble = ProxiedEnsemble(tmp_path, 5, syncLimit=10, **SETTINGS)  # 2 s: no election by a loaded machine
    tmp_ensembles.append(ensemble)
    ensemble.start()
    leader = ensemble.wait_leader()
    follower = min(sid for sid in ensemble.servers if sid != leader)
    minority = {leader, follower}
    majority = set(ensemble.servers) - minority
    before = {sid: config_of(ensemble.servers[sid]) for sid in ensemble.servers}
    with Writers(",".join(ensemble.servers[sid].hosts for sid in majority)) as writers:
        writers.wait_progress()
        with SyncClient(ensemble.servers[leader].hosts, timeout=4.0) as admin:
            assert ensemble.wait_leader() == leader, "an election meanwhile: the machine is too loaded for this test"
            ensemble.blackhole(minority)
            with pytest.raises(Exception):  # noqa: B017 - refused, timed out or cut: anything but a commit
                admin.reconfig(None, str(min(majority)), None, timeout=6.0)
        proposed = [txn for txn in dump(ensemble.servers[leader].data_dir) if txn.type == OpCode.RECONFIG]
        assert len(proposed) == 1, "the old leader proposed the reconfig (and could not commit it)"
        new_leader = wait_until_leader(ensemble, majority)
        writers.wait_progress()
        for sid in majority:
            assert config_of(ensemble.servers[sid]) == before[sid], "a minority's reconfig reached the majority"
        membership = reconfigure(ensemble, new_leader, leaving=str(follower))
        assert membership.voters == set(ensemble.servers) - {follower}
        for sid in minority:
            assert ensemble.servers[sid].mode() not in SERVING
        ensemble.blackhole(minority, on=False)
        writers.wait_progress()
    ensemble.servers[follower].stop()
    check_after(ensemble, writers, set(ensemble.servers) - {follower}, membership.version)
    assert not [txn for txn in dump(ensemble.servers[leader].data_dir) if txn.zxid == proposed[0].zxid and txn.type == OpCode.RECONFIG]


def wait_until_leader(ensemble: Ensemble, group: set[int], timeout_s: float = 30.0) -> int:
    """The leader ``group`` elected among itself."""
    found: list[int] = []

    def elected() -> bool:
        modes = {sid: ensemble.servers[sid].mode() for sid in group}
        found[:] = [sid for sid, mode in modes.items() if mode == "leader"]
        return len(found) == 1 and all(mode in SERVING for mode in modes.values())

    wait_until(elected, timeout_s, f"a leader among {sorted(group)}")
    return found[0]


def client_address(ensemble: Ensemble, sid: int) -> tuple[str, int]:
    return ("127.0.0.1", ensemble.ports[sid][2])


def connected_to(ensemble: Ensemble, client: SyncClient) -> int | None:
    """The server the client's session is on now."""
    host = client._client._current_host if client.connected else None  # noqa: SLF001 - no public name for it
    return next((sid for sid in ensemble.servers if client_address(ensemble, sid) == host), None)


def test_follow_config_moves_the_host_list_and_the_session_off_a_removed_server(tmp_path: Path, tmp_ensembles: list[Ensemble]) -> None:
    ensemble = started(tmp_ensembles, tmp_path, 3)
    fixed = SyncClient(ensemble.hosts, timeout=6.0)
    follower = SyncClient(ensemble.servers[1].hosts, timeout=6.0, follow_config=True)  # knows one server to begin with
    ensemble.new_server(4, {1, 2, 3}).start(30)
    follower.start(timeout=20)
    fixed.start(timeout=20)
    try:
        def hosts_are(client: SyncClient, sids: set[int]) -> bool:
            return set(client.hosts) == {client_address(ensemble, sid) for sid in sids}

        wait_until(lambda: hosts_are(follower, {1, 2, 3}), 10.0, "the host list from /zookeeper/config")
        session = follower.client_id
        reconfigure(ensemble, 2, joining=ensemble.spec(4))
        wait_until(lambda: hosts_are(follower, {1, 2, 3, 4}), 10.0, "the added server in the host list")
        assert hosts_are(fixed, {1, 2, 3})  # only a client that follows the configuration moves

        wait_until(lambda: connected_to(ensemble, follower) is not None, 10.0, "a connection")
        current = connected_to(ensemble, follower)
        assert current is not None
        membership = reconfigure(ensemble, 4 if current != 4 else 1, leaving=str(current))
        remaining = {1, 2, 3, 4} - {current}
        wait_until(lambda: hosts_are(follower, remaining), 10.0, "the host list without the removed server")
        wait_until(lambda: connected_to(ensemble, follower) in remaining, 10.0, "the session on a remaining server")
        ensemble.servers[current].stop()
        assert follower.client_id == session  # the same session, moved
        follower.create("/moved", b"m")
        assert follower.get("/moved")[0] == b"m"
        check_membership(ensemble, remaining, membership.version)

        # update_server_list by hand: a client whose server is not in the new list moves
        target = min(remaining)
        fixed.update_server_list(f"127.0.0.1:{ensemble.ports[target][2]}")
        wait_until(lambda: connected_to(ensemble, fixed) == target, 10.0, "the client on the one server listed")
        assert fixed.exists("/moved") is not None
        for sid in remaining:  # the client's watch on /zookeeper/config is on every server it visited
            assert "Traceback" not in ensemble.servers[sid].log_path.read_text(), ensemble.servers[sid].log_tail()
    finally:
        follower.stop()
        fixed.stop()
