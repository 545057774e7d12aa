"""The writer never writes what the reader refuses (issue 56): on 3 servers, the largest txn
``maxTxnBytes`` allows is proposed, logged by every member, and read back by each after a
restart; one op more is refused before it is proposed, with the limit named."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadArgumentsError

from harness.differential.kazoo_ops import kazoo_call
from tests.jute.conftest import start_kazoo, stop_kazoo
from zabby.opcodes import OpCode
from zabby.storage.txnlog import list_segments, read_segment
from zabby.testing import Ensemble
from zabby.wire import jute

TXN_BYTES_MAX = 256 * 1024  # maxTxnBytes, low so the test stays small: the rule is the same at 2 MiB
IDS = 32  # maxAuthIds: each create's ACL ``auth`` becomes 32 entries
AUTH = [jute.ACL(31, jute.Id("auth", ""))]


def _multi(kz: KazooClient, prefix: str, count: int) -> object:
    ops = [(OpCode.CREATE, jute.CreateRequest(f"/big/{prefix}{n}", b"", AUTH, 0)) for n in range(count)]
    return kazoo_call(kz, OpCode.MULTI, jute.MultiRequest(ops), timeout_s=30)


def test_the_largest_allowed_txn_is_logged_by_every_member_and_read_back_after_a_restart(tmp_path: Path) -> None:
    ensemble = Ensemble(tmp_path, 3, maxTxnBytes=TXN_BYTES_MAX, **{"jute.maxbuffer": TXN_BYTES_MAX // 2})
    ensemble.start()
    try:
        ensemble.wait_leader(everyone=True)
        kz = start_kazoo(ensemble.servers[1].hosts)
        try:
            for n in range(IDS):
                kz.add_auth("digest", f"user{n}:secret{n}")
            kz.create("/big")
            count = _fit(kz)
            with pytest.raises(BadArgumentsError):  # one more create is over the limit, refused before it is proposed
                _multi(kz, "n", count + 1)
            _multi(kz, "n", count)
            assert len(kz.get_children("/big")) == count
        finally:
            stop_kazoo(kz)
        ensemble.kill_all()
        sizes = [max(len(payload) for _, path in list_segments(server.data_dir / "version-2") for _, payload, _ in read_segment(path))
                 for server in ensemble.servers.values()]  # fmt: skip
        assert all(0.95 * TXN_BYTES_MAX < size <= TXN_BYTES_MAX for size in sizes), sizes  # within a few ops of the limit
        ensemble.start()
        ensemble.wait_leader(everyone=True)
        for server in ensemble.servers.values():
            reader = start_kazoo(server.hosts)
            try:
                reader.add_auth("digest", "user0:secret0")
                children = reader.get_children("/big")
                assert len(children) == count
                acl = reader.get_acls(f"/big/{children[0]}")[0]
                assert len(acl) == IDS and {entry.id.scheme for entry in acl} == {"digest"}
            finally:
                stop_kazoo(reader)
    finally:
        ensemble.kill_all()


def _fit(kz: KazooClient) -> int:
    """The most creates one multi may hold: the largest count the server takes, by bisection
    over refused tries (each refused before it is proposed; none changes the tree)."""
    low, high = 0, 4_000  # 4,000 creates of 32 ids each are far over the limit
    while high - low > 1:
        middle = (low + high) // 2
        try:
            _multi(kz, "n", middle)
        except BadArgumentsError:
            high = middle
        else:
            kz.delete("/big", recursive=True)
            kz.create("/big")
            low = middle
    return low


def test_at_global_outstanding_limit_only_connections_with_writes_in_flight_wait(tmp_path: Path) -> None:
    """globalOutstandingLimit: with the followers stopped no write commits; a client that
    pipelines more writes than the limit is read only up to it, while another client, with
    nothing in flight, still reads at once.  Once the followers are back every write is
    answered."""
    import signal
    import time

    from tests.server.wire import raw_session
    from zabby.testing import wait_until

    limit = 20
    ensemble = Ensemble(tmp_path, 3, globalOutstandingLimit=limit)
    ensemble.start()
    try:
        leader = ensemble.wait_leader(everyone=True)
        writer, reader = raw_session(ensemble.servers[leader].port), raw_session(ensemble.servers[leader].port)
        followers = [server for sid, server in ensemble.servers.items() if sid != leader]
        for server in followers:
            assert server.proc is not None
            server.proc.send_signal(signal.SIGSTOP)
        try:
            for n in range(5 * limit):
                writer.send(OpCode.CREATE, f"/pending{n}", b"", [[31, "world", "anyone"]], 0, 0)
            wait_until(lambda: int(ensemble.servers[leader].mntr()["zk_outstanding_requests"]) >= limit, 10, "the limit reached")
            time.sleep(0.3)
            assert int(ensemble.servers[leader].mntr()["zk_outstanding_requests"]) == limit
            assert reader.call(OpCode.EXISTS, "/", False)[2] == 0  # a bystander is read and answered meanwhile
        finally:
            for server in followers:
                assert server.proc is not None
                server.proc.send_signal(signal.SIGCONT)
        answers = [writer.receive() for _ in range(5 * limit)]
        assert all(reply[2] == 0 for reply in answers)
    finally:
        ensemble.kill_all()
