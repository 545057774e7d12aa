"""Links between servers in ZooKeeper 3.8's peer protocol (``quorum.protocol=zookeeper``): the
same calls as ``zabby.server.peering.transport.Transport`` (``send``, ``flush``, ``drop``,
``send_forked``, ``add_peers``, ``run``), so that the engine and the driver do not know which
protocol their peers speak.

Theory of operation: ZooKeeper's links are not zabby's.

* Election port: one connection per pair of servers, carrying votes both ways.  The dialler
  says who it is first (``zk_quorum.encode_initial_message``); a connection survives only if
  the dialler has the larger id, so a server with the smaller one hangs up after saying who
  it is and waits to be dialled back, and a server dialled by a smaller one hangs up and
  dials it (``QuorumCnxManager``).  The last vote for each server is sent again on each new
  connection with it, as ZooKeeper's ``SendWorker`` does, so none is lost with a connection.
* Quorum port: a learner dials its leader and both talk on that one connection; the leader
  learns the learner's id from its FOLLOWERINFO.  Each connection has a link object of
  ``zabby.core.zk_link`` that turns the core's messages into packets and back.

A broken quorum connection is reported (``link_down``) unless it was dropped on purpose or a
newer connection of the same learner replaced it.  TLS and quorum authentication are zabby
protocol features: the configuration refuses them with this protocol.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import trio

from zabby.config import ZABBY_PROTOCOL, PeerAddress
from zabby.core.messages import FollowerInfo, Logged, Message, Notification, TreeDigest
from zabby.core.zk_link import LeaderLink, LearnerLink, vote_from_zk, vote_to_zk
from zabby.errors import RemoteProtocolError
from zabby.server.peering.gate import InputGate
from zabby.server.process.guard import contained
from zabby.server.process.listeners import serve_peer_ports
from zabby.server.clients.sockets import receiver
from zabby.server.peering.sniff import OTHER_PROTOCOL_ADVICE, protocol_of
from zabby.server.peering.transport import ELECTION, QUORUM, Deliver, ForkedStream, LinkClosed, LinkDown, relay_forked, spawn
from zabby.wire import zk_quorum
from zabby.wire.framing import FrameDecoder

LOGGER = logging.getLogger("zabby.server.zk_transport")

CONNECT_TIMEOUT_S = 2.0
HELLO_TIMEOUT_S = 5.0  # for an election dialler's initial message
LEARNER_CONNECT_TRIES = 5  # Learner.connectToLeader's
LEARNER_CONNECT_DELAY_S = 0.2  # between them (ZooKeeper waits a second)
READ_BYTES = 1 << 20
QUEUE_BYTES_MAX = 256 * 2**20

GATE_KIND = "zookeeper quorum"  # its links' key in the input gate: apart from zabby's with the bridge
SessionTimeout = Callable[[int], int | None]


@dataclass(eq=False)
class _Connection:
    """One TCP connection and what waits to be written on it, in order."""

    sid: int
    kind: str
    stream: trio.abc.Stream | None = None
    link: LeaderLink | LearnerLink | None = None  # quorum connections only
    queue: deque[bytes | ForkedStream] = field(default_factory=deque)
    queued_bytes: int = 0
    wake: trio.Event = field(default_factory=trio.Event)
    closed: bool = False
    dropped: bool = False  # closed on purpose: nobody is told
    until_identified: trio.CancelScope | None = None  # a learner's link until it says who it is

    def put(self, data: bytes | ForkedStream) -> bool:
        """Queue ``data``; False if the queue is over its bound (the connection must go)."""
        if isinstance(data, bytes):
            self.queued_bytes += len(data)
        self.queue.append(data)
        return self.queued_bytes <= QUEUE_BYTES_MAX

    def abandon_queue(self) -> None:
        for item in self.queue:
            if isinstance(item, ForkedStream):
                item.abandon()
        self.queue.clear()
        self.queued_bytes = 0


class ZkTransport:
    """The peer links of one server, in ZooKeeper's protocol.

    Args:
        sid: this server's id.
        peers: every server's addresses (this one's too: where to listen).
        deliver, link_down: as ``Transport``'s.
        session_timeout: a session's timeout, for the touches a learner reports in its pings.
        heard: called with the leader's id while a SNAP's tree arrives, which the core does
            not see until it is whole (its initLimit counts from the last thing it heard).
        digest_of: ZooKeeper's digest after a txn this server proposed, for its learners.
        carried: told the digest its leader sent with each txn, when this server learns.
    """

    def __init__(self, sid: int, peers: dict[int, PeerAddress], deliver: Deliver, link_down: LinkDown, *,
                 session_timeout: SessionTimeout, heard: Callable[[int], None] = lambda sid: None,
                 digest_of: Callable[[int], tuple[int, int] | None] = lambda zxid: None,
                 carried: Callable[[int, tuple[int, int] | None], None] = lambda zxid, digest: None,
                 gate: InputGate | None = None, membership_version: int = 0,
                 warn: Callable[[str, str], None] | None = None,
                 link_closed: LinkClosed = lambda sid, kind: None) -> None:  # fmt: skip
        self.sid = sid
        self.link_closed = link_closed  # a link with a peer closed (its sid and kind): the bridge's
        self.peers = dict(peers)
        self.deliver = deliver
        self.link_down = link_down
        self.session_timeout = session_timeout
        self.heard = heard
        self.digest_of = digest_of
        self.carried = carried
        self.gate = gate
        self.membership_version = membership_version
        self.warn = warn or (lambda kind, message: LOGGER.warning("%s", message))
        self.bytes_sent = 0
        self._config = self._config_bytes()
        self._election: dict[int, _Connection] = {}  # the one election connection per peer
        self._last_votes: dict[int, bytes] = {}  # the last vote sent to each peer: sent again on each new connection
        self._dialling: set[int] = set()
        self._quorum: dict[int, _Connection] = {}  # the quorum connection with each peer
        self._unflushed: list[_Connection] = []
        self._nursery: trio.Nursery | None = None

    def _config_bytes(self) -> bytes:
        members = [(p.sid, p.host, p.quorum_port, p.election_port, p.observer) for p in self.peers.values()]
        return zk_quorum.config_text(members, self.membership_version).encode()

    async def run(self, *, listen: bool = True, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the links; ``listen=False``: another listens on the ports and hands this one
        its connections (``accept_quorum``, ``accept_election``: the bridge)."""
        me = self.peers[self.sid]
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if listen:
                await serve_peer_ports(nursery, me.host, [(QUORUM, me.quorum_port, self.accept_quorum), (ELECTION, me.election_port, self.accept_election)], LOGGER)
            task_status.started()
            if not listen:
                await trio.sleep_forever()

    def add_peers(self, members: Iterable[PeerAddress]) -> None:
        for member in members:
            if member.sid != self.sid and member.host:
                self.peers[member.sid] = member
        self._config = self._config_bytes()

    # ----------------------------------------------------------------- sending
    def send(self, sid: int, message: Message) -> None:
        """Queue ``message`` for ``sid``; it leaves at the next ``flush``."""
        if sid == self.sid or isinstance(message, (TreeDigest, Logged)):  # zabby's own: not in ZooKeeper's protocol
            return
        if isinstance(message, Notification):
            self._send_vote(sid, message)
            return
        if isinstance(message, FollowerInfo):
            self._open_learner_link(sid)
        conn = self._quorum.get(sid)
        if conn is None or conn.closed or conn.link is None:
            return  # its connection broke: the core heard (link_down) or hears it now
        try:
            data = conn.link.send(message)
        except ValueError as exc:
            LOGGER.warning("cannot forward %r to server %d in ZooKeeper's protocol: %s", message, sid, exc)
            return
        if data:
            self._queue(conn, data)

    def send_forked(self, sid: int, forked: ForkedStream) -> None:
        """A SNAP's tree, written by a forked child, on the quorum link to ``sid`` after what
        is queued there now."""
        conn = self._quorum.get(sid)
        if conn is None or conn.closed:
            forked.abandon()
            return
        self._queue(conn, forked)

    def _queue(self, conn: _Connection, data: bytes | ForkedStream) -> None:
        if not conn.queue:
            self._unflushed.append(conn)
        if not conn.put(data):
            LOGGER.warning("send queue to %d (%s) is full: dropping the link", conn.sid, conn.kind)
            self._close(conn, report=True)

    def flush(self) -> None:
        unflushed, self._unflushed = self._unflushed, []
        for conn in unflushed:
            conn.wake.set()

    def drop(self, sid: int) -> None:
        conn = self._quorum.pop(sid, None)
        if conn is not None:
            self._close(conn, report=False)

    def _close(self, conn: _Connection, *, report: bool) -> None:
        if conn.closed:
            return
        conn.closed, conn.dropped = True, not report
        conn.abandon_queue()
        conn.wake.set()
        if conn.stream is not None:
            spawn(self._nursery, trio.aclose_forcefully, conn.stream)
        if conn.kind == QUORUM and self._quorum.get(conn.sid) is conn:
            del self._quorum[conn.sid]
        if conn.kind == ELECTION and self._election.get(conn.sid) is conn:
            del self._election[conn.sid]
            self.link_closed(conn.sid, ELECTION)
        if report and conn.kind == QUORUM:
            self._report_down(conn.sid)

    def _report_down(self, sid: int) -> None:
        """``link_down`` from a task of its own: never inside a call the engine made."""
        spawn(self._nursery, self._call_link_down, sid)

    async def _call_link_down(self, sid: int) -> None:
        self.link_down(sid)

    async def _writer(self, conn: _Connection) -> None:
        """Write what is queued on ``conn`` until it closes (a SNAP's forked stream in its place)."""
        stream = conn.stream
        assert stream is not None
        try:
            while not conn.closed:
                if not conn.queue:
                    await conn.wake.wait()
                    conn.wake = trio.Event()
                    continue
                item = conn.queue.popleft()
                if isinstance(item, ForkedStream):
                    sent, failure = await relay_forked(item, stream)
                    self.bytes_sent += sent
                    if failure is not None:
                        LOGGER.warning("the SNAP to server %d broke off: %s", conn.sid, failure)
                        break
                    continue
                chunk: list[bytes] = [item]
                while conn.queue and len(chunk) < 256 and isinstance(head := conn.queue[0], bytes):
                    conn.queue.popleft()
                    chunk.append(head)
                data = b"".join(chunk)
                conn.queued_bytes -= len(data)
                await stream.send_all(data)
                self.bytes_sent += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            LOGGER.info("link to server %d (%s) broke: %s", conn.sid, conn.kind, exc)
        self._close(conn, report=not conn.dropped)

    # ----------------------------------------------------------------- the election port
    def _send_vote(self, sid: int, note: Notification) -> None:
        frame = self._last_votes[sid] = zk_quorum.election_frame(zk_quorum.encode_vote(vote_to_zk(note, self._config)))
        conn = self._election.get(sid)
        if conn is not None and not conn.closed:
            self._queue(conn, frame)
            return
        self._dial_election(sid)

    def _dial_election(self, sid: int) -> None:
        if sid in self._dialling or sid not in self.peers or self._nursery is None:
            return
        self._dialling.add(sid)
        spawn(self._nursery, contained, f"the election link to server {sid}", LOGGER, self._dial_election_now, sid)

    async def _dial_election_now(self, sid: int) -> None:
        peer, me = self.peers[sid], self.peers[self.sid]
        try:
            with trio.fail_after(CONNECT_TIMEOUT_S):
                stream = await trio.open_tcp_stream(peer.host, peer.election_port)
            await stream.send_all(zk_quorum.encode_initial_message(self.sid, me.host, me.election_port))
        except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
            LOGGER.debug("cannot reach server %d (election): %s", sid, exc)
            return
        finally:
            self._dialling.discard(sid)
        if sid > self.sid:  # it keeps the connection it dials to us, not ours
            await trio.aclose_forcefully(stream)
            return
        await self._serve_election(sid, stream, b"")

    async def accept_election(self, stream: trio.abc.Stream) -> None:
        buffer = bytearray()
        with trio.move_on_after(HELLO_TIMEOUT_S):
            while (found := zk_quorum.read_initial_message(buffer)) is None:
                data = await stream.receive_some(zk_quorum.INITIAL_ADDRESS_BYTES_MAX)
                if not data:
                    return
                buffer += data
        if found is None:
            return
        if protocol_of(buffer) == ZABBY_PROTOCOL:
            self.warn("peer-protocol", f"closing an election link in zabby's peer protocol: this server speaks ZooKeeper's ({OTHER_PROTOCOL_ADVICE})")
            return
        initial, used = found
        sid = initial.sid
        if sid == self.sid or sid not in self.peers:
            self.warn("peer-refused", f"refusing an election link from server {sid}: {'our own id' if sid == self.sid else 'not in our configuration'}")
            return
        if sid < self.sid:  # ours is the connection to keep: dial it
            await trio.aclose_forcefully(stream)
            self._dial_election(sid)
            return
        await self._serve_election(sid, stream, bytes(buffer[used:]))

    async def _serve_election(self, sid: int, stream: trio.abc.Stream, early: bytes) -> None:
        old = self._election.get(sid)
        conn = self._election[sid] = _Connection(sid, ELECTION, stream)
        if old is not None:  # replaced: not a link that closed (link_closed is not called)
            self._close(old, report=False)
        last = self._last_votes.get(sid)
        if last is not None:  # as ZooKeeper's SendWorker sends its last message on a new connection: a vote lost with the old one
            self._queue(conn, last)
            conn.wake.set()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._writer, conn)
            try:
                await self._read_votes(conn, stream, early)
            finally:
                self._close(conn, report=False)
                nursery.cancel_scope.cancel()

    async def _read_votes(self, conn: _Connection, stream: trio.abc.Stream, early: bytes) -> None:
        decoder = FrameDecoder(zk_quorum.ELECTION_FRAME_BYTES_MAX)
        receive = receiver(stream, READ_BYTES)
        data: bytes | bytearray = early
        try:
            while not conn.closed:
                votes = [vote_from_zk(zk_quorum.decode_vote(payload)) for payload in decoder.receive_data(data)]
                if votes:
                    self.deliver(conn.sid, list(votes))
                data = await receive()
                if not data:
                    return
        except RemoteProtocolError as exc:
            self.warn("peer-protocol", f"closing the election link with server {conn.sid}: {exc}")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass

    # ----------------------------------------------------------------- the quorum port
    def _open_learner_link(self, sid: int) -> None:
        """A new connection to our leader, for the FOLLOWERINFO that starts a new sync."""
        old = self._quorum.pop(sid, None)
        if old is not None:
            self._close(old, report=False)
        conn = self._quorum[sid] = _Connection(sid, QUORUM, link=LearnerLink(self.sid, self.session_timeout, carried=self.carried))
        spawn(self._nursery, contained, f"the quorum link to server {sid}", LOGGER, self._dial_leader, conn)

    async def _dial_leader(self, conn: _Connection) -> None:
        peer = self.peers.get(conn.sid)
        stream = None
        for attempt in range(LEARNER_CONNECT_TRIES):
            if conn.closed or peer is None:
                break
            try:
                with trio.fail_after(CONNECT_TIMEOUT_S):
                    stream = await trio.open_tcp_stream(peer.host, peer.quorum_port)
                break
            except (OSError, trio.TooSlowError) as exc:
                LOGGER.debug("cannot reach leader %d (try %d): %s", conn.sid, attempt + 1, exc)
                await trio.sleep(LEARNER_CONNECT_DELAY_S)
        if stream is None or conn.closed:
            if stream is not None:
                await trio.aclose_forcefully(stream)
            self._close(conn, report=True)
            return
        await self._serve_quorum(conn, stream)

    async def accept_quorum(self, stream: trio.abc.Stream) -> None:
        """A learner's link: it must say who it is (FOLLOWERINFO, OBSERVERINFO) within
        ``HELLO_TIMEOUT_S``."""
        conn = _Connection(0, QUORUM, stream, link=LeaderLink(digest_of=self.digest_of))
        with trio.CancelScope(deadline=trio.current_time() + HELLO_TIMEOUT_S) as conn.until_identified:
            await self._serve_quorum(conn, stream)

    async def _serve_quorum(self, conn: _Connection, stream: trio.abc.Stream) -> None:
        conn.stream = stream
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._writer, conn)
            try:
                await self._read_packets(conn, stream)
            finally:
                self._close(conn, report=not conn.dropped)
                nursery.cancel_scope.cancel()

    async def _read_packets(self, conn: _Connection, stream: trio.abc.Stream) -> None:
        link = conn.link
        assert link is not None
        receive = receiver(stream, READ_BYTES)
        try:
            while not conn.closed:
                data = await receive()
                if not data:
                    LOGGER.info("link to server %d (quorum) closed by the peer", conn.sid)
                    return
                messages = link.receive(bytes(data))
                if isinstance(link, LeaderLink) and not conn.sid:
                    if link.sid is None:
                        continue
                    if not self._register_learner(conn, link.sid):
                        return
                if messages:
                    self.deliver(conn.sid, messages)
                elif isinstance(link, LearnerLink) and link.receiving_tree:
                    self.heard(conn.sid)
                if self.gate is not None:
                    await self.gate.admit((conn.sid, GATE_KIND), len(data))
        except RemoteProtocolError as exc:
            self.warn("peer-protocol", f"closing the quorum link with server {conn.sid or 'unknown'}: {exc}")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            LOGGER.info("link to server %d (quorum) broke: %s", conn.sid, exc)
        finally:
            if self.gate is not None:
                self.gate.forget((conn.sid, GATE_KIND))

    def _register_learner(self, conn: _Connection, sid: int) -> bool:
        """A learner said who it is: its connection replaces an older one of it."""
        if sid == self.sid or sid not in self.peers:
            self.warn("peer-refused", f"refusing a learner that says it is server {sid}: {'our own id' if sid == self.sid else 'not in our configuration'}")
            return False
        conn.sid = sid
        if conn.until_identified is not None:
            conn.until_identified.deadline = math.inf
        old = self._quorum.get(sid)
        if old is not None:
            self._close(old, report=False)
        self._quorum[sid] = conn
        return True


