"""What the mixed-ensemble tests check on every member: the same tree, node by node with every
Stat field and ACL, and ZooKeeper's logs free of digest mismatches and exits."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.security import make_digest_acl

from harness.differential.kazoo_ops import kazoo_call
from harness.differential.servers import SUPER_PASSWORD, SUPER_USER
from harness.local.mixed import MixedEnsemble
from harness.local.zookeeper import ZooKeeperProcess, ZooKeeperUnavailable, ensure_zookeeper
from zabby.opcodes import CreateMode, OpCode
from zabby.wire import jute

Node = tuple[bytes, tuple[int, ...], tuple[Any, ...]]  # data, every Stat field, ACL
CONFIG_NODE = "/zookeeper/config"  # each server's own view of the membership, on ZooKeeper too
# what ZooKeeper logs when a txn's digest differs from its tree's (DataTree.compareDigest), or
# when it exits (ServiceUtils.requestSystemExit: a COMMIT out of order, an unexpected packet).
# Not counted: a thread of a follower ending when its leader goes (a kill does that to
# ZooKeeper alone too), and ZooKeeper 3.8's own ZOOKEEPER-4394 (a follower given a COMMIT
# between NEWLEADER and UPTODATE with no proposal since NEWLEADER fails its sync on a
# NullPointerException and syncs again): its leader sends that under load; a zabby leader
# never does (zabby.core.zk_link.LeaderLink holds such COMMITs until UPTODATE).
ZK_LOG_PROBLEMS = re.compile(r"digest mismatch|Exiting JVM", re.IGNORECASE)


def need_zookeeper() -> None:
    try:
        ensure_zookeeper()
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"ZooKeeper 3.8 cannot run here: {exc}")


@contextmanager
def client_of(hosts: str, *, superuser: bool = False) -> Iterator[KazooClient]:
    client = KazooClient(hosts=hosts, timeout=20, auth_data=[("digest", f"{SUPER_USER}:{SUPER_PASSWORD}")] if superuser else None)
    client.start(timeout=30)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def read_tree(hosts: str) -> dict[str, Node]:
    """Every node the server holds, after a sync, read by a superuser (any ACL)."""
    tree: dict[str, Node] = {}
    with client_of(hosts, superuser=True) as client:
        client.sync("/")
        level = ["/"]
        while level:
            following = []
            for path in level:
                try:
                    data, stat = client.get(path)
                    acl, _ = client.get_acls(path)
                    children = client.get_children(path)
                except NoNodeError:
                    continue
                if path != CONFIG_NODE:
                    tree[path] = (data, tuple(stat), tuple((a.perms, a.id.scheme, a.id.id) for a in acl))
                following += [f"{path.rstrip('/')}/{name}" for name in children]
            level = following
    return tree


def assert_converged(ensemble: MixedEnsemble) -> int:
    """Every member holds the same tree; its size."""
    trees = {sid: read_tree(server.hosts) for sid, server in ensemble.servers.items()}
    first_sid, first = next(iter(trees.items()))
    for sid, tree in trees.items():
        differing = sorted(path for path in set(tree) | set(first) if tree.get(path) != first.get(path))
        assert not differing, f"server {sid} differs from server {first_sid} at {differing[:5]}: " + "; ".join(
            f"{path}: {tree.get(path)} / {first.get(path)}" for path in differing[:2])  # fmt: skip
    return len(first)


def zookeeper_log_problems(ensemble: MixedEnsemble) -> list[str]:
    found = []
    for sid, server in ensemble.servers.items():
        if isinstance(server, ZooKeeperProcess):
            for path in (server.log_path, server.workdir / "stdout.log"):
                if path.exists():
                    found += [f"server {sid}: {line}" for line in path.read_text(errors="replace").splitlines() if ZK_LOG_PROBLEMS.search(line)]
    return found


KINDS_NODES = 8  # what write_every_kind leaves: its root and 7 nodes under it


def write_every_kind(hosts: str, prefix: str) -> KazooClient:
    """Writes of every txn type through one server: persistent, sequential, ephemeral (its
    session left open: returned), container and TTL creates, setData, setACL, delete, a multi
    that commits and one that fails, writes that fail; then a sync."""
    client = KazooClient(hosts=hosts, timeout=20)
    client.start(timeout=30)
    client.create(prefix, b"root")
    client.create(f"{prefix}/seq-", b"s", sequence=True)
    client.create(f"{prefix}/seq-", None, sequence=True)
    client.create(f"{prefix}/eph", b"e", ephemeral=True)
    open_acl = [jute.ACL(31, jute.Id("world", "anyone"))]
    kazoo_call(client, OpCode.CREATE_CONTAINER, jute.CreateRequest(f"{prefix}/container", b"", open_acl, CreateMode.CONTAINER))
    client.create(f"{prefix}/container/child", b"")
    kazoo_call(client, OpCode.CREATE_TTL, jute.CreateTTLRequest(f"{prefix}/ttl", b"t", open_acl, CreateMode.PERSISTENT_WITH_TTL, 600_000))
    client.create(f"{prefix}/acl", b"a", acl=[make_digest_acl("bob", "secret", all=True)])
    client.set(prefix, b"changed")
    client.set_acls(f"{prefix}/seq-0000000000", [make_digest_acl("bob", "secret", read=True)])
    client.delete(f"{prefix}/seq-0000000001")
    transaction = client.transaction()
    transaction.create(f"{prefix}/multi", b"m")
    transaction.set_data(prefix, b"again")
    transaction.check(prefix, 2)
    assert all(result is not Exception for result in transaction.commit())
    failing = client.transaction()
    failing.set_data(prefix, b"never")
    failing.create(f"{prefix}/missing/child", b"")
    assert isinstance(failing.commit()[1], NoNodeError)
    for bad in (lambda: client.create(prefix), lambda: client.set(f"{prefix}/none", b""), lambda: client.delete(prefix, version=99)):
        try:
            bad()
        except Exception as exc:  # noqa: BLE001 -- each fails on every server alike
            assert type(exc).__name__ in ("NodeExistsError", "NoNodeError", "BadVersionError"), exc
        else:
            raise AssertionError("a write that must fail did not")
    client.sync(prefix)
    return client


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
