"""kazoo's ``KazooClient.reconfig(joining, leaving, new_members, from_config)`` against a
3-server zabby ensemble whose super user is a digest identity (zoo.cfg ``superDigest``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoAuthError, UnimplementedError
from kazoo.security import make_digest_acl_credential

import zabby.testing
from tests.jute.conftest import start_kazoo, stop_kazoo
from zabby.membership import Membership
from zabby.testing import Ensemble, ServerProcess


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[Ensemble]:
    super_digest = make_digest_acl_credential("super", "secret")
    with zabby.testing.ensemble(3, workdir=tmp_path, tickTime=200, reconfigEnabled="true", superDigest=super_digest) as group:
        yield group


def test_kazoo_reconfig_add_remove_and_members(ensemble: Ensemble) -> None:
    hosts = ensemble.hosts  # 1..3: a session on server 4 is dropped when its role changes, as in ZooKeeper
    joiner = ensemble.new_server(4, {1, 2, 3})
    joiner.start(30)
    anyone = start_kazoo(hosts)
    admin: KazooClient = start_kazoo(hosts, auth_data=[("digest", "super:secret")])
    try:
        with pytest.raises(NoAuthError):  # not the super user, and /zookeeper/config is read-only to others
            anyone.reconfig(joining=ensemble.spec(4), leaving=None, new_members=None)

        changed = threading.Event()
        data, _ = anyone.get("/zookeeper/config", watch=lambda event: changed.set())
        assert Membership.parse(data.decode()).version == 0

        data, stat = admin.reconfig(joining=ensemble.spec(4), leaving=None, new_members=None)
        grown = Membership.parse(data.decode())
        assert grown.voters == {1, 2, 3, 4} and stat.mzxid == grown.version
        assert changed.wait(10), "the watch on /zookeeper/config fired"
        assert anyone.get("/zookeeper/config")[0] == data

        with pytest.raises(BadVersionError):
            admin.reconfig(joining=None, leaving="4", new_members=None, from_config=0)
        data, _ = admin.reconfig(joining=None, leaving="4", new_members=None, from_config=grown.version)
        assert Membership.parse(data.decode()).voters == {1, 2, 3}

        members = ",".join(ensemble.spec(sid) for sid in (1, 2, 3)) + "," + ensemble.spec(4, observer=True)
        data, _ = admin.reconfig(joining=None, leaving=None, new_members=members)
        final = Membership.parse(data.decode())
        assert final.voters == {1, 2, 3} and final.observers == {4}
        joiner.wait_mode({"observer"})
        for sid, server in ensemble.servers.items():  # a watch on /zookeeper/config used to fail the core
            assert "Traceback" not in server.log_path.read_text(), (sid, server.log_tail())
    finally:
        stop_kazoo(admin)
        stop_kazoo(anyone)
        joiner.stop()


def test_a_standalone_server_has_no_configuration_and_cannot_be_reconfigured(tmp_path: Path) -> None:
    """As ZooKeeper's standalone server: ``/zookeeper/config`` is empty (it was a made-up
    ``server.0=:0:0:participant``) and reconfig answers UNIMPLEMENTED once it is enabled (it
    answered NEWCONFIGNOQUORUM)."""
    server = ServerProcess(tmp_path, reconfigEnabled="true", skipACL="yes")
    server.start()
    kz = start_kazoo(server.hosts)
    try:
        assert kz.get("/zookeeper/config")[0] == b""
        with pytest.raises(UnimplementedError):
            kz.reconfig(joining="server.2=127.0.0.1:1:2;3", leaving=None, new_members=None)
        assert kz.exists("/") is not None
    finally:
        stop_kazoo(kz)
        server.kill()
