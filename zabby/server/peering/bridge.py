"""Peer links in both protocols at once (``quorum.protocol.bridge=true``): zabby's own
(``Transport``) and ZooKeeper 3.8's (``ZkTransport``) on the same two ports, so that an
ensemble switches peer protocol by a rolling restart while every server serves.

Theory of operation: each port reads the first bytes of a new connection and hands it to the
transport of the protocol they begin (``zabby.server.peering.sniff.protocol_of``).  Each
peer is answered in the protocol it speaks:

* votes go in zabby's protocol to a peer whose votes came in it, else in ZooKeeper's to one
  whose votes came in that; to a peer not heard from (or whose links closed since: it may
  have restarted speaking the other) in both, and a peer that speaks only one reads that
  one and hangs up on the other.  A protocol is forgotten when the peer's election link in
  it closes.  Two bridging servers so settle on zabby's, whatever each one's own;
* a learner syncs with its leader in the protocol its votes are sent in (else this server's
  own, ``quorum.protocol``), and a leader answers each learner in the protocol of its
  FOLLOWERINFO, so that the two ends of a sync always speak the same one; the start of a
  sync in one protocol drops the peer's quorum link in the other (a late close of it would
  end the new sync), and a SNAP's image made for the other is not sent.

A server without the bridge speaks only its own protocol, so each peer's messages say which
it reads.  What ZooKeeper's protocol cannot carry is done its way on every server that
bridges (``ServerConfig.zookeeper_peers``): session passwords derived from the session id,
COMMIT rather than zabby's LOGGED, ZooKeeper's digests for its learners.

Bounds: a connection that has not said what it speaks holds one of zabby's unidentified-link
slots (``UnidentifiedSlots``) for at most ``SNIFF_TIMEOUT_S``, then the bounds of the
transport it goes to; what each peer speaks is kept for the configuration's servers only.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from functools import partial

import trio

from zabby.config import ZABBY_PROTOCOL, ZOOKEEPER_PROTOCOL, PeerAddress
from zabby.core.messages import FollowerInfo, Message, Notification, Revalidate, Revalidated
from zabby.server.peering.sniff import SNIFF_BYTES, protocol_of
from zabby.server.clients.sockets import PrefixedStream
from zabby.server.peering.peer_slots import Slot
from zabby.server.peering.transport import CONNECT_TIMEOUT_S, ELECTION, QUORUM, Deliver, ForkedStream, LinkClosed, Transport, peer_host
from zabby.server.peering.zk_transport import ZkTransport
from zabby.server.process.listeners import serve_peer_ports

LOGGER = logging.getLogger("zabby.server.bridge")

SNIFF_TIMEOUT_S = CONNECT_TIMEOUT_S  # as long as zabby's transport waits for a hello

ZOOKEEPER_ONLY = (Revalidate, Revalidated)  # (the zabby-only ones ZkTransport leaves out itself)
Handler = Callable[[trio.abc.Stream], Awaitable[None]]


class BridgeTransport:
    """The peer links of one server in both protocols, with ``Transport``'s calls.

    Args:
        own: this server's protocol (``quorum.protocol``): what it speaks to a learner's
            leader it has not heard votes from.
        make_zabby, make_zookeeper: make the two transports, given what they deliver to and
            tell of a closed link (this one's, which note what each peer speaks).
        deliver: where the peers' messages go (the engine).
    """

    def __init__(self, own: str, make_zabby: Callable[[Deliver, LinkClosed], Transport],
                 make_zookeeper: Callable[[Deliver, LinkClosed], ZkTransport], deliver: Deliver) -> None:  # fmt: skip
        self.own = own
        self.deliver = deliver
        self.votes_in: dict[int, set[str]] = {}  # the protocols each peer's votes came in, on links still open
        self.syncs_in: dict[int, str] = {}  # the protocol of each learner link, ours to a leader or a learner's to us
        self.zabby = make_zabby(partial(self._delivered, ZABBY_PROTOCOL), partial(self._closed, ZABBY_PROTOCOL))
        self.zookeeper = make_zookeeper(partial(self._delivered, ZOOKEEPER_PROTOCOL), partial(self._closed, ZOOKEEPER_PROTOCOL))

    @property
    def bytes_sent(self) -> int:
        return self.zabby.bytes_sent + self.zookeeper.bytes_sent

    def speaks_zookeeper(self, sid: int) -> bool:
        """Whether the sync with ``sid`` is in ZooKeeper's protocol (its SNAP's format)."""
        return self._sync_protocol(sid) == ZOOKEEPER_PROTOCOL

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        me = self.zabby.peers[self.zabby.sid]
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(self.zabby.run, listen=False))
            await nursery.start(partial(self.zookeeper.run, listen=False))
            ports = [(QUORUM, me.quorum_port, self._sniffing(self.zabby.incoming_handler(QUORUM), self.zookeeper.accept_quorum)),
                     (ELECTION, me.election_port, self._sniffing(self.zabby.incoming_handler(ELECTION), self.zookeeper.accept_election))]  # fmt: skip
            await serve_peer_ports(nursery, me.host, ports, LOGGER)
            task_status.started()

    def _sniffing(self, zabby: Handler, zookeeper: Handler) -> Handler:
        async def handle(stream: trio.abc.Stream) -> None:
            address = peer_host(stream)
            slot = await self.zabby.unidentified.take(address)  # the bound on links that have not said who they are
            if not isinstance(slot, Slot):
                self.zabby.warn("peer-unidentified", f"refusing a peer link from {address}: {slot} that have not said who they are yet")
                await trio.aclose_forcefully(stream)
                return
            try:
                head = await _first_bytes(stream)
            finally:
                slot.release()
            if head is None:
                await trio.aclose_forcefully(stream)
                return
            handler = zabby if protocol_of(head) == ZABBY_PROTOCOL else zookeeper
            await handler(PrefixedStream(stream, head))

        return handle

    def add_peers(self, members: Iterable[PeerAddress]) -> None:
        members = list(members)
        self.zabby.add_peers(members)
        self.zookeeper.add_peers(members)

    # ----------------------------------------------------------------- what peers speak
    def _delivered(self, protocol: str, sid: int, messages: list[Message]) -> None:
        if sid not in self.zookeeper.peers:  # (a server no configuration names: reconfig is off with the bridge)
            self.deliver(sid, messages)  # what it speaks is not kept: the two maps stay as small as the ensemble
            return
        for message in messages:
            if isinstance(message, Notification):
                self.votes_in.setdefault(sid, set()).add(protocol)
            elif isinstance(message, FollowerInfo):
                self._sync_starts(sid, protocol)
        self.deliver(sid, messages)

    def _closed(self, protocol: str, sid: int, kind: str) -> None:
        """A link of ``sid`` in ``protocol`` closed: it may come back speaking the other."""
        heard = self.votes_in.get(sid)
        if kind == ELECTION and heard is not None:
            heard.discard(protocol)
            if not heard:
                del self.votes_in[sid]

    def _votes_protocol(self, sid: int) -> str | None:
        """What ``sid`` is sent votes in (None: both)."""
        heard = self.votes_in.get(sid)
        if not heard:
            return None
        return ZABBY_PROTOCOL if ZABBY_PROTOCOL in heard else ZOOKEEPER_PROTOCOL

    def _sync_starts(self, sid: int, protocol: str) -> None:
        self.syncs_in[sid] = protocol
        (self.zookeeper if protocol == ZABBY_PROTOCOL else self.zabby).drop(sid)

    def _sync_protocol(self, sid: int) -> str:
        return self.syncs_in.get(sid) or self._votes_protocol(sid) or self.own

    def _sync_transport(self, sid: int) -> Transport | ZkTransport:
        return self.zookeeper if self._sync_protocol(sid) == ZOOKEEPER_PROTOCOL else self.zabby

    # ----------------------------------------------------------------- sending
    def send(self, sid: int, message: Message) -> None:
        if isinstance(message, Notification):
            protocol = self._votes_protocol(sid)
            if protocol != ZOOKEEPER_PROTOCOL:
                self.zabby.send(sid, message)
            if protocol != ZABBY_PROTOCOL:
                self.zookeeper.send(sid, message)
            return
        if isinstance(message, FollowerInfo):  # a new sync: in the protocol our leader's votes go in
            self._sync_starts(sid, self._votes_protocol(sid) or self.own)
        transport = self._sync_transport(sid)
        if transport is self.zabby and isinstance(message, ZOOKEEPER_ONLY):
            return  # a leader that speaks zabby's protocol with this learner asks it of no session
        transport.send(sid, message)

    def send_forked(self, sid: int, forked: ForkedStream) -> None:
        if forked.zookeeper != self.speaks_zookeeper(sid):  # the learner synced again meanwhile, in the other protocol
            forked.abandon()
            self.drop(sid)
            return
        self._sync_transport(sid).send_forked(sid, forked)

    def flush(self) -> None:
        self.zabby.flush()
        self.zookeeper.flush()

    def drop(self, sid: int) -> None:
        self.zabby.drop(sid)
        self.zookeeper.drop(sid)


async def _first_bytes(stream: trio.abc.Stream) -> bytes | None:
    """The first ``SNIFF_BYTES`` or more a new link sent; None if it sent fewer in time."""
    head = b""
    with trio.move_on_after(SNIFF_TIMEOUT_S):
        while len(head) < SNIFF_BYTES:
            data = await stream.receive_some(4096)
            if not data:
                return None
            head += data
    return head if len(head) >= SNIFF_BYTES else None
