"""The server's answers to inconsistencies, driven in-process with a fake transport:

- a leader streams a SNAP of the tree exactly at the zxid the SNAP declares, even when the
  same Ready commits more after it (the race that killed learners: their snapshot held a txn
  they were then sent again), and drops a learner whose SNAP zxid the tree never was at;
- a learner that receives a snapshot at another zxid than declared, or whose tree digest
  differs from the leader's, raises ``Inconsistency``; the peer task then restarts its core
  from disk, stops serving and asks for a SNAP, and the process goes on.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio

from zabby import config as zoo_config
from zabby.core.messages import Snap, SnapChunk, TreeDigest, decode
from zabby.core.ready import Ready
from zabby.errors import Inconsistency
from zabby.opcodes import OpCode
from zabby.server.node import ZabbyServer
from zabby.server.transport import ForkedStream
from zabby.storage.datadir import DataDir
from zabby.tree.acl import OPEN_ACL_UNSAFE
from zabby.tree.datatree import DataTree
from zabby.tree.txns import Txn, encode_txn, make_zxid
from zabby.wire.framing import FrameDecoder


class FakeTransport:
    def __init__(self) -> None:
        self.peers = {2: None, 3: None}
        self.sent: list[tuple[int, Any]] = []
        self.forked: list[tuple[int, ForkedStream]] = []
        self.dropped: list[int] = []

    def send(self, sid: int, message: Any) -> None:
        self.sent.append((sid, message))

    def send_forked(self, sid: int, stream: ForkedStream) -> None:
        self.forked.append((sid, stream))

    def drop(self, sid: int) -> None:
        self.dropped.append(sid)


def make_server(tmp_path: Path, txns: list[Txn] = ()) -> tuple[ZabbyServer, FakeTransport]:  # type: ignore[assignment]
    data = tmp_path / "data"
    data.mkdir()
    (data / "myid").write_text("1\n")
    config = zoo_config.from_dict({
        "dataDir": str(data), "clientPort": "0", "tickTime": "200",
        "server.1": "127.0.0.1:1:2", "server.2": "127.0.0.1:3:4", "server.3": "127.0.0.1:5:6",
    })  # fmt: skip
    datadir = DataDir(config.data_dir, config.data_log_dir)
    tree, log = datadir.recover()
    if txns:
        log.append([(t.zxid, encode_txn(t)) for t in txns])
        log.sync()
    server = ZabbyServer(config, datadir, tree, log)
    transport = FakeTransport()
    server.transport = transport  # type: ignore[assignment]
    return server, transport


def create(counter: int) -> Txn:
    return Txn(make_zxid(1, counter), 0x77, counter, 1000 + counter, int(OpCode.CREATE),
               (f"/n{counter}", b"v", OPEN_ACL_UNSAFE, 0, counter))  # fmt: skip


def read_stream(stream: ForkedStream) -> list[Any]:
    """Every record the forked child streamed, once it exits."""
    data = bytearray()
    while chunk := os.read(stream.fd, 1 << 20):
        data += chunk
    os.close(stream.fd)
    _, status = os.waitpid(stream.pid, 0)
    assert status == 0
    chunks = [decode(frame) for frame in FrameDecoder(1 << 30).receive_data(bytes(data))]
    assert all(isinstance(chunk, SnapChunk) for chunk in chunks)
    return [record for chunk in chunks for record in chunk.records]


async def process(server: ZabbyServer, ready: Ready) -> None:
    async with trio.open_nursery() as nursery:
        await server._process(ready, nursery)


def test_a_snap_streams_the_tree_at_its_declared_zxid_when_the_same_ready_commits_past_it(tmp_path: Path) -> None:
    server, transport = make_server(tmp_path)
    server._apply([create(1), create(2)])
    ready = Ready(soft_state=server.soft, committed=[create(3), create(4)], messages=[(2, Snap(zxid=make_zxid(1, 3)))])
    trio.run(process, server, ready)
    assert server.tree.last_zxid == make_zxid(1, 4)
    [(sid, stream)] = transport.forked
    records = read_stream(stream)
    assert sid == 2 and records[0][:2] == ("tree", make_zxid(1, 3))
    paths = {record[0] for record in records[1:] if isinstance(record[0], str)}
    assert "/n3" in paths and "/n4" not in paths
    assert transport.sent == [(2, Snap(zxid=make_zxid(1, 3)))]


def test_snaps_at_the_start_and_the_end_of_a_ready(tmp_path: Path) -> None:
    server, transport = make_server(tmp_path)
    server._apply([create(1)])
    snaps = [(2, Snap(zxid=make_zxid(1, 1))), (3, Snap(zxid=make_zxid(1, 3)))]
    trio.run(process, server, Ready(soft_state=server.soft, committed=[create(2), create(3)], messages=snaps))
    streams = dict(transport.forked)
    assert read_stream(streams[2])[0][1] == make_zxid(1, 1)
    assert read_stream(streams[3])[0][1] == make_zxid(1, 3)


def test_a_snap_at_a_zxid_the_tree_never_was_at_drops_that_learner(tmp_path: Path) -> None:
    server, transport = make_server(tmp_path)
    server._apply([create(1)])
    ready = Ready(soft_state=server.soft, committed=[create(2)], messages=[(2, Snap(zxid=make_zxid(1, 9))), (3, TreeDigest(zxid=1, digest=1))])
    trio.run(process, server, ready)
    assert transport.forked == []
    assert transport.dropped == [2]
    assert transport.sent == [(3, TreeDigest(zxid=1, digest=1))]  # the others are served as usual


def test_a_snapshot_at_another_zxid_than_declared_is_refused(tmp_path: Path) -> None:
    server, _ = make_server(tmp_path)
    tree = DataTree()
    tree.apply(create(1))
    tree.apply(create(2))
    server._snap_in[2] = (Snap(zxid=make_zxid(1, 1)), _builder_of(tree))
    server.peer.expects_snapshot = lambda sid, zxid: True  # type: ignore[method-assign]  # as in a SNAP sync
    with pytest.raises(Inconsistency, match="declares 0x100000001 but holds a tree at 0x100000002"):
        trio.run(server._receive_snapshot, 2, SnapChunk(records=(), last=True))


def _builder_of(tree: DataTree) -> Any:
    from zabby.tree.datatree import TreeBuilder

    builder = TreeBuilder()
    builder.add(tree.records())
    return builder


def test_a_digest_that_differs_from_the_leaders_is_an_inconsistency(tmp_path: Path) -> None:
    server, _ = make_server(tmp_path)
    server._apply([create(1), create(2)])
    good = server.tree.digest_at(make_zxid(1, 1))
    server._expected_digests.append((make_zxid(1, 1), good))
    server._check_digests()  # equal: nothing happens
    server._expected_digests.append((make_zxid(1, 2), server.tree.digest ^ 1))
    with pytest.raises(Inconsistency, match="tree digest at 0x100000002"):
        server._check_digests()
    assert server.stats.digest_mismatches == 1


def test_a_digest_ahead_of_the_tree_waits_until_the_tree_gets_there(tmp_path: Path) -> None:
    server, _ = make_server(tmp_path)
    other = DataTree()
    for txn in (create(1), create(2)):
        other.apply(txn)
    server._expected_digests.append((make_zxid(1, 2), other.digest))
    server._check_digests()
    assert len(server._expected_digests) == 1
    server._apply([create(1), create(2)])
    server._check_digests()
    assert not server._expected_digests


def test_repair_restarts_the_core_from_disk_and_asks_for_a_snap(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server, transport = make_server(tmp_path, txns=[create(1), create(2), create(3)])
    server.tree = DataTree()  # an in-memory tree that went wrong
    trio.run(server._repair, Inconsistency("the tree digest at 0x100000002 differs"))
    assert server.tree.last_zxid == make_zxid(1, 3)  # reloaded: snapshot (none) + the whole log
    assert server.peer.snapshot_wanted
    assert not server.serving and server.peer.status().soft_state.state.value == "looking"
    assert sorted(transport.dropped) == [2, 3]
    assert server.stats.repairs == 1
    [line] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert "Inconsistency: the tree digest at 0x100000002 differs; restarting the core" in line.getMessage()
    assert line.exc_info is None  # one line saying what it saw, no traceback
