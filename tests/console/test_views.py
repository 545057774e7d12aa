"""The console's views, as pure functions: a znode page, ensemble rows from mntr answers,
sessions and watches from the four-letter words' data."""

from __future__ import annotations

import base64
from pathlib import Path
from types import SimpleNamespace

import pytest
import trio

from tests.storage.helpers import OPEN_ACL
from zabby.config import ServerConfig
from zabby.membership import Member
from zabby.opcodes import OpCode
from zabby.server.adminport.console import _peer_row
from zabby.server.process.descriptors import Descriptors
from zabby.server.adminport.console_views import BadRequest, ServerRow, ensemble_rows, node_view, row_from_mntr, sessions_view
from zabby.tree.acl import digest
from zabby.tree.datatree import DataTree
from zabby.tree.txns import Txn, make_zxid


def tree_with_children(count: int) -> DataTree:
    tree = DataTree()
    tree.apply(Txn(make_zxid(1, 1), 0, 0, 0, OpCode.CREATE, ("/big", b'{"a": 1}', OPEN_ACL, 0, 1)))
    for index in range(count):
        tree.apply(Txn(make_zxid(1, index + 2), 0, 0, 0, OpCode.CREATE, (f"/big/c{index:04d}", b"\x00\x01", OPEN_ACL, 0, index + 1)))
    return tree


def test_a_node_page_holds_its_stat_data_and_one_page_of_children() -> None:
    tree = tree_with_children(250)
    view = node_view(tree, "/big", offset=100, limit=50)
    assert view["children"] == [f"c{index:04d}" for index in range(100, 150)] and view["children_total"] == 250
    assert base64.b64decode(view["data_base64"]) == b'{"a": 1}' and view["acl"] == ["world:anyone:rwcda"]
    assert view["stat"]["numChildren"] == 250 and view["stat"]["czxid"] == "0x100000001" and view["stat"]["cversion"] == 250
    assert node_view(tree, "/big", offset=300)["children"] == []
    assert node_view(tree, "/nowhere") == {"path": "/nowhere", "exists": False}


def test_a_node_page_is_read_as_the_identity_of_the_request() -> None:
    """GET /console/api/tree?path=/secret returned the protected data and the digests of its
    ACL to anyone (issue 43): now what a client with the same credentials would read."""
    alice = ("digest", digest("alice", "secret"))
    tree = DataTree()
    reader_only = ((1, "digest", alice[1]), (1, "world", "anyone"))
    tree.apply(Txn(make_zxid(1, 1), 0, 0, 0, OpCode.CREATE, ("/secret", b"s3cret", ((31, "digest", alice[1]),), 0, 1)))
    tree.apply(Txn(make_zxid(1, 2), 0, 0, 0, OpCode.CREATE, ("/shared", b"ok", reader_only, 0, 2)))
    stranger = node_view(tree, "/secret")
    assert stranger["exists"] and "NOAUTH" in stranger["error"] and "data_base64" not in stranger and "acl" not in stranger
    owner = node_view(tree, "/secret", auth_ids=[alice])
    assert base64.b64decode(owner["data_base64"]) == b"s3cret" and owner["acl"] == [f"digest:{alice[1]}:rwcda"]
    assert node_view(tree, "/secret", superuser=True)["data_base64"]
    shared = node_view(tree, "/shared")  # READ for anyone, ADMIN for nobody: the digest is hidden
    assert shared["acl"] == ["digest:alice:x:r", "world:anyone:r"]


@pytest.mark.parametrize("path, offset, limit", [("big", 0, 10), ("/big/", 0, 10), ("/big", -1, 10), ("/big", 0, 0), ("/big", 0, 5000)])
def test_bad_requests(path: str, offset: int, limit: int) -> None:
    with pytest.raises(BadRequest):
        node_view(tree_with_children(1), path, offset, limit)


MNTR = "zk_version\t3.8.4\nzk_server_state\t{state}\nzk_last_zxid\t{zxid}\nzk_digest\t{digest}\nzk_num_alive_connections\t3\nzk_avg_latency\t0.5\nzk_max_latency\t4.0\n"


def test_ensemble_rows_show_lag_and_a_digest_that_differs() -> None:
    rows = ensemble_rows([
        row_from_mntr(1, "h1:2181", MNTR.format(state="leader", zxid="0x200000010", digest="0xaa")),
        row_from_mntr(2, "h2:2181", MNTR.format(state="follower", zxid="0x20000000a", digest="0xbb")),
        row_from_mntr(3, "h3:2181", MNTR.format(state="follower", zxid="0x20000000a", digest="0xcc")),
        row_from_mntr(4, "h4:2181", MNTR.format(state="observer", zxid="0x1000000ff", digest="0xdd")),
        row_from_mntr(5, "h5:2181", "This ZooKeeper instance is not currently serving requests\n"),
        ServerRow(6, "h6:2181", "down", note="connection refused"),
    ])  # fmt: skip
    assert [row.lag_txns for row in rows] == [0, 6, 6, None, None, None]
    assert rows[1].note == rows[2].note == "digest differs from another server at this zxid" and rows[0].note == ""
    assert rows[4].mode == "not serving" and rows[0].connections == 3 and rows[0].latency_max_ms == 4.0
    assert rows[0].as_dict()["zxid"] == "0x200000010"


def test_sessions_join_the_expiry_table_with_connections_here() -> None:
    dump = {"expiry_time_to_session_ids": {"4000": ["0x1", "0x2"]}, "session_id_to_ephemeral_paths": {"0x2": ["/e"]}}
    cons = {"connections": [{"session_id": "0x2", "remote_socket_address": "127.0.0.1:5000", "session_timeout": 4000,
                             "last_operation": "GETD", "avg_latency": 0.2}, {"session_id": "0x0"}]}  # fmt: skip
    sessions = sessions_view(dump, cons, now_ms=1500)
    assert [s["session_id"] for s in sessions] == ["0x1", "0x2"]
    assert sessions[0]["client"] is None and sessions[1]["client"] == "127.0.0.1:5000" and sessions[1]["ephemerals"] == ["/e"]
    assert sessions[0]["expires_in_ms"] == 2500  # on the server's monotonic clock: not a date in 1970


def test_a_followers_sessions_are_its_connections_with_no_expiry_of_its_own() -> None:
    dump = {"expiry_time_to_session_ids": {}, "session_id_to_ephemeral_paths": {}}
    cons = {"connections": [{"session_id": "0x10", "remote_socket_address": "127.0.0.1:5001", "session_timeout": 4000}]}
    [session] = sessions_view(dump, cons, now_ms=0)
    assert session["session_id"] == "0x10" and session["expires_in_ms"] is None and session["timeout_ms"] == 4000


def test_a_peer_with_no_plaintext_client_port_is_a_row_not_a_crash() -> None:
    # a secure-only server (no clientPort) and a membership line with no client port: there is
    # no port to ask mntr on; the ensemble page shows the peer instead of failing (TypeError)
    config = ServerConfig(Path("/nonexistent"), Path("/nonexistent"), server_id=1, client_port=None, secure_client_port=2281)
    server = SimpleNamespace(config=config, descriptors=Descriptors(capacity=1))
    row = trio.run(_peer_row, server, Member(2, "127.0.0.1", 2888, 3888))
    assert row.sid == 2 and row.mode == "error" and "client port" in row.note


def test_a_peer_is_not_asked_when_no_descriptor_is_free() -> None:
    config = ServerConfig(Path("/nonexistent"), Path("/nonexistent"), server_id=1)
    server = SimpleNamespace(config=config, descriptors=Descriptors(capacity=0))
    row = trio.run(_peer_row, server, Member(2, "127.0.0.1", 2888, 3888, client_port=1))
    assert row.mode == "error" and "no descriptor free" in row.note and server.descriptors.held == 0
