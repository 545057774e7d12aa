"""A ZooKeeper deployment moved onto zabby and back, checked against ZooKeeper itself.

One seed, on one client port that the three servers take in turn (so the workload's clients,
left connected, re-attach to each with their sessions and their ``lastZxidSeen``):

1. Debian's ZooKeeper 3.8 runs a seeded workload (``harness.differential.workload``: every create
   mode, ACLs, multi, deletes, sessions with ephemerals, TTL nodes, containers, sequential
   names), plus a quota on the workload's root, a node with null data and a session that is
   abandoned (its socket closed, its ephemeral left) just before ZooKeeper is killed.  A small
   ``snapCount`` makes ZooKeeper take fuzzy snapshots and roll its log during the run.
2. Its data dir is imported (``zabby-admin zookeeper import``); a zabby server started on the
   result must answer every read as ZooKeeper did (``read_view``: every znode's data, Stat,
   ACL and children, and each session's getEphemerals), and every session must re-attach.
3. The zabby server is stopped and its data dir exported; ZooKeeper 3.8 started on it must answer
   the same again, log no digest mismatch, and take the sessions back.
4. A second zabby server on a copy of the imported dir, which no client re-attaches to, shows the
   abandoned session expire (its ephemeral gone) and the next sequential name ZooKeeper would
   have given.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from harness.differential.execute import Executor
from harness.differential.kazoo_ops import kazoo_call
from harness.differential.servers import COMMON, REAP_INTERVAL_MS, SUPER_DIGEST, SUPER_PASSWORD, SUPER_USER
from harness.differential.workload import Workload
from zabby.testing import free_port
from harness.local.jute_session import OPEN_ACL, JuteSession
from harness.local.zookeeper import ZooKeeperProcess
from zabby.testing import ServerProcess, wait_until
from zabby.opcodes import CreateMode, OpCode
from zabby.ops.zk_export import export_zookeeper
from zabby.ops.zk_import import ImportReport, import_zookeeper
from zabby.storage.zk_files import LogFile
from zabby.wire import jute

SNAP_COUNT = 200  # ZooKeeper snapshots every 100-200 txns: fuzzy snapshots and log rolls all through a run
ABANDONED_TIMEOUT_MS = 8000
REATTACH_MAX_DELAY_S = 0.5
# ZooKeeper 3.8 standalone binds its client port before it loads its data, and a connection that
# arrives in between is neither answered nor closed (ZOOKEEPER-5051: its close path's NPE, "this.zkDb
# is null"); a client waits its handshake timeout, session timeout / number of hosts, before it
# tries again.  Listing the one port this many times makes that wait 30 / 6 = 5 s, well inside the
# session's 30 s (a CI run: session c waited 30 s on a ZooKeeper that had loaded in 0.1 s, and lost).
PORT_LISTED = 6
CONFIG = "/zookeeper/config"  # each server's own membership: left out of a view
DIGEST_MISMATCH = "Digests are not matching"

Node = tuple[bytes | None, tuple[int, ...], tuple[tuple[int, str, str], ...], tuple[str, ...]]


@dataclass
class View:
    """What a server answers: every znode (data, Stat, ACL, children), and each session's ephemerals."""

    nodes: dict[str, Node]
    ephemerals: dict[str, tuple[str, ...]] = field(default_factory=dict)


def admin_client(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=30.0)
    client.start(timeout=30)
    client.add_auth("digest", f"{SUPER_USER}:{SUPER_PASSWORD}")
    return client


def read_view(client: KazooClient) -> View:
    """Every znode but ``/zookeeper/config``, read by a super user a layer at a time, each layer's
    requests pipelined."""
    nodes: dict[str, Node] = {}
    layer = ["/"]
    while layer:
        pending = [(path, client.get_async(path), client.get_acls_async(path), client.get_children_async(path)) for path in layer]
        layer = []
        for path, data_reply, acl_reply, children_reply in pending:
            data, stat = data_reply.get(timeout=30)
            acl, _ = acl_reply.get(timeout=30)
            children = tuple(sorted(children_reply.get(timeout=30)))
            if path != CONFIG:
                nodes[path] = (data, tuple(stat), tuple((a.perms, a.id.scheme, a.id.id) for a in acl), children)
            layer += [f"{path.rstrip('/')}/{name}" for name in children]
    return View(nodes)


def ephemerals_of(client: KazooClient) -> tuple[str, ...]:
    reply = kazoo_call(client, OpCode.GET_EPHEMERALS, jute.GetEphemeralsRequest("/"))
    return tuple(sorted(reply.ephemerals))


def differences(expected: View, actual: View, limit: int = 10) -> list[str]:
    """The first ``limit`` differences, one line each (none: the same answers)."""
    found = []
    for path in sorted(set(expected.nodes) | set(actual.nodes)):
        mine, theirs = expected.nodes.get(path), actual.nodes.get(path)
        if mine != theirs:
            found.append(f"{path}: {mine} != {theirs}")
    for label in sorted(set(expected.ephemerals) | set(actual.ephemerals)):
        if expected.ephemerals.get(label) != actual.ephemerals.get(label):
            found.append(f"session {label} getEphemerals: {expected.ephemerals.get(label)} != {actual.ephemerals.get(label)}")
    return found[:limit]


# ----------------------------------------------------------------------------- servers
def zookeeper(workdir: Path, port: int) -> ZooKeeperProcess:
    properties = {"znode.container.checkIntervalMs": REAP_INTERVAL_MS, "zookeeper.DigestAuthenticationProvider.superDigest": SUPER_DIGEST}
    return ZooKeeperProcess(workdir, port=port, jvm_options=("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"), properties=properties,
                            snapCount=SNAP_COUNT, **COMMON)  # fmt: skip


def zabby(workdir: Path, port: int) -> ServerProcess:
    settings: dict[str, Any] = {**COMMON, "znode.container.checkIntervalMs": REAP_INTERVAL_MS, "superDigest": SUPER_DIGEST}
    return ServerProcess(workdir, port=port, **settings)


def _answers(client: KazooClient) -> bool:
    """Whether ``client``'s session is attached to a server that answers it now."""
    try:
        client.exists("/")
    except Exception:  # noqa: BLE001 -- not attached yet: ConnectionLoss, SessionMoved, a timeout
        return False
    return True


@contextmanager
def running(server: ZooKeeperProcess | ServerProcess) -> Iterator[None]:
    try:
        server.start()
        yield
    finally:
        server.kill()


# ----------------------------------------------------------------------------- one seed
@dataclass
class SeedRun:
    seed: int
    ops: int
    znodes: int = 0
    sessions: int = 0
    imported: ImportReport | None = None
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.problems


class Migration:
    """The servers and clients of one seed (see the module doc)."""

    def __init__(self, workdir: Path, seed: int, ops: int) -> None:
        self.workdir, self.port = workdir, free_port()
        self.hosts = f"127.0.0.1:{self.port}"
        self.root = f"/migrate-{seed}"
        self.run = SeedRun(seed, ops)
        # re-attach promptly once the next server is up: kazoo's own backoff doubles to minutes,
        # and a retry that lands past the session timeout after the next server loaded sees the
        # session expired (a CI run: session c waited 30 s for ZooKeeper to come back, and lost)
        workload_hosts = ",".join([self.hosts] * PORT_LISTED)
        self.executor = Executor(workload_hosts, self.root, reconnect_max_delay_s=REATTACH_MAX_DELAY_S)
        self.workload = Workload(seed, self.root)

    def check(self, ok: bool, problem: str) -> None:
        if not ok:
            self.run.problems.append(problem)

    def execute(self) -> SeedRun:
        started = time.monotonic()
        try:
            expected = self.on_zookeeper()
            self.on_zabby(expected)
            self.back_on_zookeeper(expected)
            self.expiry_and_sequence(expected)
        finally:
            self._stop_clients()
        self.run.seconds = time.monotonic() - started
        return self.run

    def _stop_clients(self) -> None:
        """Stop every client (its server may be gone: nothing is deleted, each run has its own dirs)."""
        for client in [*self._sessions().values(), self.executor.admin.client]:
            with suppress(Exception):
                client.stop()
                client.close()

    def _sessions(self) -> dict[str, KazooClient]:
        return {label: session.client for label, session in self.executor.sessions.items()}  # type: ignore[attr-defined]

    def _session_ids(self) -> dict[str, int]:
        return {label: client.client_id[0] for label, client in self._sessions().items()}

    def on_zookeeper(self) -> View:
        server = zookeeper(self.workdir / "zookeeper", self.port)
        with running(server):
            self.executor.open()
            self._extras()
            for _ in range(self.run.ops):
                op = self.workload.next_op()
                self.workload.observe(op, self.executor.run(op).result)
            self._abandon_a_session()
            expected = self._view()
            self.ids = self._session_ids()  # while connected (kazoo shows none while not)
        self.run.znodes, self.run.sessions = len(expected.nodes), len(self.ids)
        self.zk_data = server.data_dir
        return expected

    def _extras(self) -> None:
        """What the workload does not do: a quota on its root, null data, a sequential counter."""
        admin = self.executor.admin.client
        admin.create(f"/zookeeper/quota{self.root}/zookeeper_limits", b"count=1000,bytes=-1", makepath=True)
        admin.create(f"/zookeeper/quota{self.root}/zookeeper_stats", b"count=0,bytes=0")
        kazoo_call(admin, OpCode.CREATE, jute.CreateRequest(f"{self.root}/null", None, OPEN_ACL, CreateMode.PERSISTENT))
        for _ in range(3):
            admin.create(f"{self.root}/null/seq-", b"", sequence=True)

    def _abandon_a_session(self) -> None:
        session = JuteSession(self.port)
        session.connect(timeout_ms=ABANDONED_TIMEOUT_MS)
        session.send(OpCode.CREATE, jute.CreateRequest(f"{self.root}/abandoned", b"gone soon", OPEN_ACL, CreateMode.EPHEMERAL))
        session.receive_frame()
        session.sock.close()  # no closeSession: the session lives on until its timeout
        self.abandoned = session.response.session_id if session.response is not None else 0

    def _view(self) -> View:
        """The tree through a new super-user session, then each re-attached session's ephemerals."""
        admin = admin_client(self.hosts)
        try:
            view = read_view(admin)
        finally:
            admin.stop()
            admin.close()
        sessions = self._sessions()
        # A round trip each, not kazoo's ``connected``: that stays True until the client notices
        # its last server gone, so a phase could end before a session re-attached to its
        # server, and the session then re-attached to the next server later than its timeout
        # (a CI run: a kazoo client left mid-handshake with a killed server, back 30 s later).
        wait_until(lambda: all(_answers(client) for client in sessions.values()), 60, "the workload's sessions re-attached")
        view.ephemerals = {label: ephemerals_of(client) for label, client in sessions.items()}
        return view

    def on_zabby(self, expected: View) -> None:
        server = zabby(self.workdir / "zabby", self.port)
        self.run.imported = import_zookeeper(self.zk_data, server.data_dir, 1)
        shutil.copytree(server.data_dir, self.workdir / "zabby-alone" / "data")
        with running(server):
            actual = self._view()
            ids = self._session_ids()
            self.check(ids == self.ids, f"sessions did not all re-attach to zabby: {ids} != {self.ids}")
        self.check(not (found := differences(expected, actual)), f"zabby after the import differs from ZooKeeper: {found}")
        self.zabby_data = server.data_dir

    def back_on_zookeeper(self, expected: View) -> None:
        server = zookeeper(self.workdir / "zookeeper-again", self.port)
        export_zookeeper(self.zabby_data, server.data_dir)
        with running(server):
            actual = self._view()
            ids = self._session_ids()
            self.check(ids == self.ids, f"sessions did not all re-attach to ZooKeeper: {ids} != {self.ids}")
        self.check(not (found := differences(expected, actual)), f"ZooKeeper after the export differs: {found}")
        log = server.log_path.read_text(errors="replace")
        self.check(DIGEST_MISMATCH not in log, "ZooKeeper logged a digest mismatch loading the export")

    def expiry_and_sequence(self, expected: View) -> None:
        """On a zabby server nobody re-attaches to: the abandoned session expires, and the next
        sequential name is ZooKeeper's."""
        alone = zabby(self.workdir / "zabby-alone", free_port())
        parent = f"{self.root}/null"
        _, stat, _, _ = expected.nodes[parent]
        creates = (stat[5] + stat[9]) // 2  # a Stat's cversion is 2 * creates - children
        with running(alone):
            admin = admin_client(alone.hosts)
            try:
                self.check(admin.exists(f"{self.root}/abandoned") is not None, "the abandoned session's ephemeral did not come across")
                gone = _poll(lambda: admin.exists(f"{self.root}/abandoned") is None, ABANDONED_TIMEOUT_MS / 1000 * 4)
                self.check(gone, "the abandoned session's ephemeral did not expire on zabby")
                name = admin.create(f"{parent}/seq-", b"", sequence=True)
                self.check(name == f"{parent}/seq-{creates:010d}", f"the next sequential name on zabby is {name}, ZooKeeper's would be seq-{creates:010d}")
            finally:
                admin.stop()
                admin.close()


def _poll(predicate: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def run_seed(workdir: Path, seed: int, ops: int) -> SeedRun:
    workdir.mkdir(parents=True, exist_ok=True)
    return Migration(workdir, seed, ops).execute()


# ----------------------------------------------------------------------------- damaged directories
def zookeeper_data(workdir: Path, seed: int, ops: int) -> Path:
    """A ZooKeeper data dir the seeded workload left (several fuzzy snapshots and logs), its
    server killed in the middle of the workload's sessions."""
    migration = Migration(workdir, seed, ops)
    try:
        migration.on_zookeeper()
    finally:
        migration._stop_clients()
    return migration.zk_data


def view_of(server: ZooKeeperProcess | ServerProcess) -> View:
    with running(server):
        admin = admin_client(server.hosts)
        try:
            return read_view(admin)
        finally:
            admin.stop()
            admin.close()


def zookeeper_view(data_dir: Path, workdir: Path) -> tuple[View, str]:
    """What ZooKeeper 3.8 answers when started on (a copy of) ``data_dir``, and its log."""
    server = zookeeper(workdir, free_port())
    shutil.copytree(data_dir, server.data_dir, dirs_exist_ok=True)
    view = view_of(server)
    return view, server.log_path.read_text(errors="replace")


def zabby_view(data_dir: Path, workdir: Path) -> tuple[View, ImportReport]:
    """What zabby answers when started on the import of ``data_dir``."""
    server = zabby(workdir, free_port())
    report = import_zookeeper(data_dir, server.data_dir, 1)
    return view_of(server), report


def newest_snapshot(data_dir: Path) -> Path:
    return max((path for path in (data_dir / "version-2").glob("snapshot.*")), key=lambda p: int(p.name.split(".")[1], 16))


def _node_at(raw: bytes | bytearray, path: str, data: bytes | None) -> int:
    """Where node ``path`` (holding ``data``) ends its data in a snapshot's bytes."""
    encoded = path.encode()
    head = len(encoded).to_bytes(4, "big") + encoded + (b"\xff\xff\xff\xff" if data is None else len(data).to_bytes(4, "big") + data)
    at = raw.find(head)
    if at < 0:
        raise ValueError(f"{path} is not in the snapshot")
    return at + len(head)


def damage_newest_snapshot(data_dir: Path, path: str, data: bytes) -> Path:
    """One byte of ``path``'s data flipped in the newest snapshot: its checksum no longer matches."""
    snapshot = newest_snapshot(data_dir)
    raw = bytearray(snapshot.read_bytes())
    raw[_node_at(raw, path, data) - 1] ^= 0x01
    snapshot.write_bytes(raw)
    return snapshot


def damage_an_owner(data_dir: Path, path: str, data: bytes | None) -> Path:
    """The top byte of persistent ``path``'s ephemeralOwner set in the newest snapshot: the
    checksum no longer matches, and the node reads as a dead session's ephemeral."""
    snapshot = newest_snapshot(data_dir)
    raw = bytearray(snapshot.read_bytes())
    raw[_node_at(raw, path, data) + 8 + 32 + 12] ^= 0x10  # after the ACL id, four longs and three ints
    snapshot.write_bytes(raw)
    return snapshot


def tear_last_record(data_dir: Path) -> tuple[Path, int, int]:
    """The last txn's record torn as a crash tears it in ZooKeeper's preallocated log: its
    second half and end marker never written (zeros).  The log file, the record's offset and
    the zxid of its txn."""
    path = max((data_dir / "version-2").glob("log.*"), key=lambda p: int(p.name.split(".")[1], 16))
    records = list(LogFile(path).records())
    last = records[-1].offset
    raw = bytearray(path.read_bytes())
    length = int.from_bytes(raw[last + 8 : last + 12], "big")
    start = last + 12 + length // 2
    raw[start : last + 12 + length + 1] = bytes(last + 12 + length + 1 - start)
    path.write_bytes(raw)
    return path, last, records[-1].txn.zxid


def lose_a_log(data_dir: Path) -> Path:
    """A log file with a later one after it removed, and the snapshots from its txns on (so the
    replay must pass through the hole): what a purge that went wrong, or a lost disk, leaves."""
    logs = sorted((int(p.name.split(".")[1], 16), p) for p in (data_dir / "version-2").glob("log.*"))
    if len(logs) < 2:
        raise ValueError("one log file only: run more ops")
    first, lost = logs[-2]
    lost.unlink()
    for path in (data_dir / "version-2").glob("snapshot.*"):
        if int(path.name.split(".")[1], 16) >= first:
            path.unlink()
    return lost
