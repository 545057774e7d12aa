"""An ensemble switches peer protocol by a rolling restart with every server serving
(``quorum.protocol.bridge``, ``zabby.server.peering.bridge``): real server processes, kazoo.

Without the bridge, the second restart of a switch moves the majority to the new protocol and
the server still on the old one cannot serve until its own restart, dropping its clients;
with it, that server's client sees no disconnection, and the ensemble's trees stay equal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import trio
import trio.testing
from kazoo.client import KazooClient

from harness.local.mixed import ZABBY, ZABBY_NATIVE, MixedEnsemble
from zabby.config import ZABBY_PROTOCOL, ZOOKEEPER_PROTOCOL, PeerAddress
from zabby.core.messages import Commit, FollowerInfo, Notification, Revalidate, Revalidated
from zabby.server.peering.bridge import SNIFF_TIMEOUT_S, BridgeTransport
from zabby.server.peering.transport import ELECTION, Transport
from zabby.server.peering.zk_transport import HELLO_TIMEOUT_S, ZkTransport
from zabby.server.clients.sockets import PrefixedStream
from zabby.server.peering.sniff import protocol_of
from zabby.testing.processes import stop_processes, wait_until
from zabby.wire import zk_quorum
from zabby.wire.framing import encode_frame

TICK_MS = 500
SERVING = ("leader", "follower")


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[MixedEnsemble]:
    group = MixedEnsemble(tmp_path, {1: ZABBY, 2: ZABBY, 3: ZABBY}, tick_ms=TICK_MS, electionClientHoldMs=TICK_MS)
    try:
        group.start(60)
        yield group
    finally:
        stop_processes([server.proc for server in group.servers.values() if server.proc is not None])


def switch(group: MixedEnsemble, sid: int, kind: str) -> None:
    """Restart server ``sid`` on ``kind``'s protocol, bridging, and wait until all serve."""
    stop_processes([group.servers[sid].proc])
    group.switch_protocol(sid, kind, bridge=True).launch()
    wait_until(lambda: all(mode in SERVING for mode in group.modes().values()), 60, f"every server serving after server {sid}'s switch")


def tree_sizes(group: MixedEnsemble, path: str) -> dict[int, int]:
    sizes = {}
    for sid, member in group.members.items():
        client = KazooClient(hosts=f"127.0.0.1:{member.client_port}", timeout=20)
        client.start(timeout=20)
        try:
            client.sync(path)
            sizes[sid] = len(client.get_children(path))
        finally:
            client.stop()
            client.close()
    return sizes


@pytest.mark.parametrize("there_and_back", [False, True], ids=["onto zabby's protocol", "and back"])
def test_a_rolling_protocol_switch_keeps_every_server_serving(ensemble: MixedEnsemble, there_and_back: bool) -> None:
    leader = ensemble.wait_leader(60, everyone=True)
    order = [sid for sid in sorted(ensemble.servers) if sid != leader] + [leader]
    last = order[-1]
    client = KazooClient(hosts=f"127.0.0.1:{ensemble.members[last].client_port}", timeout=20)
    states: list[str] = []
    client.add_listener(states.append)
    client.start(timeout=20)
    states.clear()  # from now: the start's CONNECTED is not a change
    try:
        client.ensure_path("/switch")
        acked = 0
        phases = [ZABBY_NATIVE, ZABBY] if there_and_back else [ZABBY_NATIVE]
        for kind in phases:
            for sid in order:
                switch(ensemble, sid, kind)
                if sid != last:  # its server still serves: not a state change, and writes go through
                    assert states == [], f"after server {sid}'s switch to {kind} the client on server {last} went through {states}"
                for _ in range(5):
                    client.retry(client.create, "/switch/n-", b"v", sequence=True)
                    acked += 1
            states.clear()  # its own server's restart suspends it, as any restart does
        assert set(tree_sizes(ensemble, "/switch").values()) == {acked}
    finally:
        client.stop()
        client.close()


def test_the_bridge_tells_the_protocols_apart_by_their_first_bytes() -> None:
    zabby_hello = encode_frame(msgpack.packb([3, "127.0.0.1", 2888, 3888, False]))
    assert protocol_of(zabby_hello[:5]) == ZABBY_PROTOCOL
    assert protocol_of(zk_quorum.encode_initial_message(3, "127.0.0.1", 3888)[:5]) == ZOOKEEPER_PROTOCOL
    follower_info = zk_quorum.packet(zk_quorum.PacketType.FOLLOWERINFO, 0x5_0000_0003, b"")
    assert protocol_of(follower_info[:5]) == ZOOKEEPER_PROTOCOL


def test_a_prefixed_stream_gives_back_what_was_read_first() -> None:
    async def main() -> bytes:
        left, right = trio.testing.memory_stream_pair()
        await left.send_all(b"rest")
        stream = PrefixedStream(right, b"head")
        got = b""
        while len(got) < 8:
            got += await stream.receive_some(3)
        await stream.aclose()
        stream = PrefixedStream(right, b"more")
        await stream.aclose()
        with pytest.raises(trio.ClosedResourceError):
            await stream.receive_some(3)
        return got

    assert trio.run(main) == b"headrest"


class FakeTransport:
    """What the bridge calls on a transport, recorded."""

    def __init__(self, deliver: Any, closed: Any) -> None:
        self.deliver, self.closed = deliver, closed
        self.sent: list[tuple[int, str]] = []
        self.dropped: list[int] = []
        self.peers = {sid: None for sid in (1, 2, 3, 4)}  # the configuration's servers

    def send(self, sid: int, message: Any) -> None:
        self.sent.append((sid, type(message).__name__))

    def drop(self, sid: int) -> None:
        self.dropped.append(sid)


def bridge_of(own: str) -> tuple[BridgeTransport, FakeTransport, FakeTransport, list[tuple[int, Any]]]:
    made: dict[str, FakeTransport] = {}
    delivered: list[tuple[int, Any]] = []

    def maker(name: str) -> Any:
        return lambda deliver, closed: made.setdefault(name, FakeTransport(deliver, closed))

    bridge = BridgeTransport(own, maker("zabby"), maker("zookeeper"), lambda sid, messages: delivered.extend((sid, m) for m in messages))
    return bridge, made["zabby"], made["zookeeper"], delivered


VOTE = Notification(leader=3, zxid=5, peer_epoch=1, election_epoch=1, state="looking")


def test_votes_go_in_both_protocols_until_the_peer_is_heard_and_then_in_zabbys_where_it_speaks_it() -> None:
    bridge, zabby, zookeeper, delivered = bridge_of(ZOOKEEPER_PROTOCOL)
    bridge.send(2, VOTE)
    assert zabby.sent == [(2, "Notification")] and zookeeper.sent == [(2, "Notification")]
    zookeeper.deliver(2, [VOTE])  # it speaks ZooKeeper's: only that from now
    bridge.send(2, VOTE)
    assert zabby.sent == [(2, "Notification")] and len(zookeeper.sent) == 2
    zabby.deliver(2, [VOTE])  # and zabby's too (it bridges): zabby's, whatever ours is
    bridge.send(2, VOTE)
    assert len(zabby.sent) == 2 and len(zookeeper.sent) == 2
    zabby.closed(2, ELECTION)  # its zabby link closed (a restart?): ZooKeeper's again
    bridge.send(2, VOTE)
    assert len(zabby.sent) == 2 and len(zookeeper.sent) == 3
    zookeeper.closed(2, ELECTION)  # nothing open: both
    bridge.send(2, VOTE)
    assert len(zabby.sent) == 3 and len(zookeeper.sent) == 4
    assert [sid for sid, _ in delivered] == [2, 2]


def test_a_sync_goes_in_one_protocol_at_both_ends_and_drops_the_peers_link_in_the_other() -> None:
    bridge, zabby, zookeeper, _ = bridge_of(ZABBY_PROTOCOL)
    zookeeper.deliver(3, [VOTE])  # our leader-to-be speaks ZooKeeper's only
    bridge.send(3, FollowerInfo(accepted_epoch=1, last_zxid=5))
    bridge.send(3, Revalidate(session_id=7, timeout_ms=10_000))
    assert zookeeper.sent == [(3, "FollowerInfo"), (3, "Revalidate")] and zabby.sent == [] and zabby.dropped == [3]
    assert bridge.speaks_zookeeper(3)
    zabby.deliver(4, [FollowerInfo(accepted_epoch=1, last_zxid=5)])  # a learner syncs with us in zabby's
    bridge.send(4, Revalidated(session_id=7, valid=True))  # ZooKeeper's own: not for a zabby link
    bridge.send(4, Commit(zxid=5))
    assert zabby.sent == [(4, "Commit")] and zookeeper.dropped == [4] and not bridge.speaks_zookeeper(4)
    zookeeper.deliver(99, [VOTE, FollowerInfo(accepted_epoch=1, last_zxid=5)])  # no configuration names it: delivered, not kept
    assert 99 not in bridge.votes_in and 99 not in bridge.syncs_in


def test_a_link_the_engine_asks_for_while_the_server_shuts_down_is_not_an_error() -> None:
    """At a SIGTERM the transports' nurseries close while the engine still runs: a vote it
    sends then (its links closing made it look for a leader) must not fail the core."""
    peers = {sid: PeerAddress(sid, "127.0.0.1", 1, 2) for sid in (1, 2)}

    async def main() -> None:
        transport = ZkTransport(1, peers, lambda sid, messages: None, lambda sid: None, session_timeout=lambda session: None)
        async with trio.open_nursery() as nursery:
            transport._nursery = nursery
        transport.send(2, VOTE)  # the nursery is closed: nothing, no exception
        transport.drop(2)

    trio.run(main)


def test_a_learner_link_that_never_says_who_it_is_is_closed_after_the_hello_deadline() -> None:
    """A connection to a ZooKeeper-protocol quorum port (or one the bridge handed there) that
    sends no FOLLOWERINFO holds nothing for longer than ``HELLO_TIMEOUT_S``."""
    peers = {sid: PeerAddress(sid, "127.0.0.1", 1, 2) for sid in (1, 2)}

    async def main() -> float:
        transport = ZkTransport(1, peers, lambda sid, messages: None, lambda sid: None, session_timeout=lambda session: None)
        mine, theirs = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            transport._nursery = nursery
            started = trio.current_time()
            await transport.accept_quorum(mine)
            return trio.current_time() - started

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) == pytest.approx(HELLO_TIMEOUT_S)


def test_the_bridge_sniffs_inside_the_bound_on_unidentified_links() -> None:
    """A connection that sends fewer bytes than tell its protocol holds an unidentified-link
    slot no longer than ``SNIFF_TIMEOUT_S``, and a connection beyond the slots is refused."""
    peers = {sid: PeerAddress(sid, "127.0.0.1", 1, 2) for sid in (1, 2)}

    async def main() -> tuple[float, int]:
        bridge = BridgeTransport(ZABBY_PROTOCOL, lambda deliver, closed: Transport(1, dict(peers), deliver, lambda sid: None, link_closed=closed),
                                 lambda deliver, closed: ZkTransport(1, dict(peers), deliver, lambda sid: None, session_timeout=lambda s: None,
                                                                     link_closed=closed), lambda sid, messages: None)  # fmt: skip
        handled: list[str] = []

        async def handler(stream: trio.abc.Stream) -> None:
            handled.append("handed over")

        sniff = bridge._sniffing(handler, handler)
        mine, theirs = trio.testing.memory_stream_pair()
        await theirs.send_all(b"\0\0")  # 2 bytes: not enough to tell
        started = trio.current_time()
        await sniff(mine)
        return trio.current_time() - started, len(handled)

    waited, handed = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert waited == pytest.approx(SNIFF_TIMEOUT_S) and handed == 0
