"""Links between servers: one listener per port kind (election, quorum) and one outgoing
connection per (peer, kind).

Theory of operation: messages from A to B always travel on A's outgoing connection to B, so
each direction is one FIFO stream.  A connection opens with a hello frame ``[sid]``.  Election
notifications use the election port and may be lost (the core re-sends them); Zab packets use
the quorum port, and a broken quorum stream in either direction is reported to the core as
``link_down(sid)``, after which the core resynchronises.  ``drop(sid)`` closes both
directions so the other side notices too.  Send queues are bounded in bytes.

With ``sslQuorum=true`` both kinds of link are TLS with certificates on both ends (the
``ssl.quorum.*`` keys): a server dials with its certificate and checks the peer's against
the trust store, and a listener asks for the dialer's; a link whose handshake fails is
logged (at most once per ``TLS_WARNING_INTERVAL_S``) and retried like one that cannot
connect.

A queue may also hold a ``ForkedStream``: the frames a forked child writes into a pipe (a
snapshot of the tree as it was at the fork).  The sender relays them in their place in the
queue, so what the core sent after the SNAP follows the snapshot on the wire while the
server goes on working, and the pipe's capacity is the only buffer.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from functools import partial

import msgpack
import trio

from zabby import tls
from zabby.config import ZOOKEEPER_PROTOCOL, PeerAddress, PeerLinkLimits, QuorumAuth, TlsConfig
from zabby.core.messages import Inform, Message, Notification, Proposal, decode, encode
from zabby.errors import RemoteProtocolError
from zabby.server.process.guard import contained
from zabby.server.peering import peer_auth
from zabby.server.clients.budget import ClientMemory
from zabby.server.peering.gate import InputGate
from zabby.server.process.listeners import serve_peer_ports
from zabby.server.peering.sniff import OTHER_PROTOCOL_ADVICE, SNIFF_BYTES, protocol_of
from zabby.server.peering.peer_slots import STRANGER_LINKS_MAX, Slot, UnidentifiedSlots
from zabby.server.process.ratelog import RateLimitedLog
from zabby.server.clients.sockets import receiver
from zabby.tree.txns import RECORD_BYTES_MAX
from zabby.wire.framing import FrameDecoder, encode_frame

LOGGER = logging.getLogger("zabby.server.transport")

QUEUE_BYTES_MAX = 256 * 2**20
# The largest frame a member may send, the same on every server whatever its settings: a txn
# is at most maxTxnBytes (a quarter of it), a larger Proposal is split before it is sent, and
# a SNAP chunk is cut by bytes (forks).
MEMBER_FRAME_BYTES_MAX = RECORD_BYTES_MAX
HELLO_BYTES_MAX = 4096  # before a peer has said who it is
STRANGER_FRAME_BYTES_MAX = 64 * 1024  # a learner no membership names sends FOLLOWERINFO, ACKs and pings
PEER_READ_BYTES = 1 << 20  # at most one read of a peer link
LINK_LIVE_S = 5.0
AUTH_WAIT_S = 1.0  # a dialer waits this long for a challenge before it takes the peer for one without quorum.auth  # a link that delivered within this is live: a second hello for its id is refused
CONNECT_TIMEOUT_S = 2.0
TLS_WARNING_INTERVAL_S = 10.0
ELECTION, QUORUM = "election", "quorum"

Deliver = Callable[[int, list[Message]], None]
LinkDown = Callable[[int], None]
LinkClosed = Callable[[int, str], None]


def kind_of(message: Message) -> str:
    return ELECTION if isinstance(message, Notification) else QUORUM


class PeerAuthError(Exception):
    """A peer link that did not authenticate where it must (``quorum.auth``)."""


class _PeerInput:
    """An incoming link's unparsed input, charged to the server's memory budget
    (``zabby.server.clients.budget``): the frame being read may be large; it is charged as it grows,
    and a link over its share is closed like a client connection."""

    def __init__(self, memory: ClientMemory | None, what: str, warn: Callable[[str, str], None]) -> None:
        self.memory, self.what, self.warn = memory, what, warn
        self.held_bytes = 0
        self.scope = trio.CancelScope()

    def hold(self, buffered: int) -> None:
        delta, self.held_bytes = buffered - self.held_bytes, buffered
        if delta and self.memory is not None:
            self.memory.charge(self, delta)

    def close_for_memory(self, reason: str) -> None:
        self.warn("peer-memory", f"closing {self.what}: {reason}")
        self.hold(0)
        self.scope.cancel()

    def release(self) -> None:
        self.hold(0)


@dataclass
class ForkedStream:
    """Frames a forked child writes into the pipe ``fd`` until it exits."""

    pid: int
    fd: int
    what: str  # for log lines
    zookeeper: bool = False  # a SNAP's tree in ZooKeeper's format (for a link in its protocol)

    def abandon(self) -> None:
        """Never relayed (the link went): stop the child and close the pipe."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(self.fd)
        _reap_later(self.pid)


async def relay_forked(forked: ForkedStream, stream: trio.abc.SendStream) -> tuple[int, str | None]:
    """Copy what a forked child writes into its pipe to ``stream`` until the child exits.

    Returns:
        (bytes sent, None) or, when the child failed, (bytes sent, the reason): the receiver
        then got a partial stream.  If sending fails (or is cancelled) the child is killed.
    """
    sent = 0
    pipe = trio.lowlevel.FdStream(forked.fd)
    try:
        while data := await pipe.receive_some(1 << 20):
            await stream.send_all(data)
            sent += len(data)
    except BaseException:
        os.kill(forked.pid, signal.SIGKILL)
        _reap_later(forked.pid)
        raise
    finally:
        await pipe.aclose()
    _, status = await trio.to_thread.run_sync(os.waitpid, forked.pid, 0)
    if status != 0:
        return sent, f"the {forked.what} child failed (status {status})"
    return sent, None


def _reap_later(pid: int) -> None:
    """Collect an exited (or killed) child without blocking the event loop."""
    trio.lowlevel.spawn_system_task(trio.to_thread.run_sync, _wait_quietly, pid)


def _wait_quietly(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except OSError:  # already collected
        pass


@dataclass
class _Outgoing:
    sid: int
    kind: str
    queue: deque[bytes | ForkedStream] = field(default_factory=deque)
    queued_bytes: int = 0
    wake: trio.Event = field(default_factory=trio.Event)
    generation: int = 0  # bumped by drop(): queued frames of an older stream are discarded
    fd: int | None = None  # the connected plain socket, which flush may write to directly
    idle: bool = False  # the sender task waits for frames with none queued, and nobody woke it

    def wake_sender(self) -> None:
        self.idle = False
        self.wake.set()


class Transport:
    def __init__(self, sid: int, peers: dict[int, PeerAddress], deliver: Deliver, link_down: LinkDown, quorum_tls: TlsConfig | None = None,
                 *, frame_bytes_max: int = MEMBER_FRAME_BYTES_MAX, memory: ClientMemory | None = None,
                 warn: Callable[[str, str], None] | None = None, auth: QuorumAuth | None = None,
                 gate: InputGate | None = None, limits: PeerLinkLimits = PeerLinkLimits(),
                 link_closed: LinkClosed = lambda sid, kind: None) -> None:  # fmt: skip
        self.sid = sid
        self.link_closed = link_closed  # a peer's link to us closed (its sid and kind): the bridge's
        self.gate = gate  # bounds what each link queues in the engine while it is busy
        self.peers = peers
        self.members = set(peers)  # ids a membership names (the configured, and every membership's since)
        self.frame_bytes_max = frame_bytes_max
        self.memory = memory
        self.auth = auth
        self.warn = warn or (lambda kind, message: LOGGER.warning("%s", message))
        self.unidentified = UnidentifiedSlots(limits, self._member_hosts)  # connections that have not said who they are yet
        self._strangers = 0  # links from servers no membership names
        self._last_heard: dict[tuple[int, str], float] = {}  # when each incoming link last delivered
        self.deliver = deliver
        self.link_down = link_down
        self._outgoing: dict[tuple[int, str], _Outgoing] = {}
        self._unflushed: list[_Outgoing] = []  # links with frames queued since the last flush
        self._incoming: dict[tuple[int, str], trio.abc.Stream] = {}
        self._nursery: trio.Nursery | None = None
        self._last_encoded: tuple[Message | None, bytes] = (None, b"")  # a leader sends each PROPOSAL to every follower
        self.bytes_sent = 0
        self._accept_context = tls.server_context(quorum_tls, "ssl.quorum.") if quorum_tls else None
        self._dial_context = tls.peer_client_context(quorum_tls) if quorum_tls else None
        self._tls_warning = RateLimitedLog(LOGGER, TLS_WARNING_INTERVAL_S).warning

    async def run(self, *, listen: bool = True, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the links; ``listen=False``: another listens on the ports and hands this one
        its connections (``incoming_handler``: the bridge)."""
        me = self.peers[self.sid]
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if not listen:
                task_status.started()
                await trio.sleep_forever()
            context = self._accept_context
            wrap = partial(trio.SSLListener, ssl_context=context) if context is not None else None
            ports = [(kind, port, self.incoming_handler(kind)) for kind, port in ((QUORUM, me.quorum_port), (ELECTION, me.election_port))]
            await serve_peer_ports(nursery, me.host, ports, LOGGER, wrap)
            task_status.started()

    def add_peers(self, members: Iterable[PeerAddress]) -> None:
        """Servers a membership names: where to reach them from now on."""
        for member in members:
            if member.sid != self.sid and member.host:
                self.peers[member.sid] = member
                self.members.add(member.sid)
        self.unidentified.forget_hosts()

    def _member_hosts(self) -> list[str]:
        return [self.peers[sid].host for sid in self.members if sid in self.peers and self.peers[sid].host]

    # ----------------------------------------------------------------- sending
    def send(self, sid: int, message: Message) -> None:
        """Queue ``message`` for ``sid``; it leaves at the next ``flush``."""
        if sid not in self.peers or sid == self.sid:
            return
        last, payload = self._last_encoded
        if message is not last:  # messages are immutable: the same one encodes to the same bytes
            payload = encode(message)
            self._last_encoded = (message, payload)
        if len(payload) > self.frame_bytes_max and isinstance(message, (Proposal, Inform)) and len(message.txns) > 1:
            half = len(message.txns) // 2  # a receiver refuses a frame over its limit: send it in parts, in order
            self.send(sid, type(message)(txns=message.txns[:half]))
            self.send(sid, type(message)(txns=message.txns[half:]))
            return
        self.send_frame(sid, kind_of(message), payload)

    def flush(self) -> None:
        """Send what was queued: straight onto the socket, all of one link's frames in one
        system call, when its link is up, plain TCP and idle; through its sender task for what
        the socket does not take at once, for TLS, and while a link connects or is busy."""
        unflushed, self._unflushed = self._unflushed, []
        for out in unflushed:
            if out.queue and not self._write_now(out):
                out.wake_sender()

    def _write_now(self, out: _Outgoing) -> bool:
        """True if all that is queued on ``out`` went onto its socket now."""
        if not out.idle or out.fd is None:
            return False
        frames = out.queue
        data = frames[0] if len(frames) == 1 else b"".join(frames)  # type: ignore[arg-type]  # idle: bytes only
        assert isinstance(data, bytes)
        try:
            sent = os.write(out.fd, data)
        except OSError:  # would block, or broken: the sender task meets it and handles it
            sent = 0
        self.bytes_sent += sent
        frames.clear()
        if sent == len(data):
            out.queued_bytes = 0
            return True
        frames.append(data[sent:])
        out.queued_bytes = len(data) - sent
        return False

    def send_frame(self, sid: int, kind: str, payload: bytes) -> None:
        out = self._outgoing.get((sid, kind))
        if out is None:
            out = self._outgoing[(sid, kind)] = _Outgoing(sid, kind)
            spawn(self._nursery, self._sender, out)
        frame = encode_frame(payload)
        if out.queued_bytes + len(frame) > QUEUE_BYTES_MAX:
            LOGGER.warning("send queue to %d (%s) is full: dropping the link", sid, kind)
            self.drop(sid)
            if kind == QUORUM:
                self.link_down(sid)
            return
        if not out.queue:
            self._unflushed.append(out)
        out.queue.append(frame)
        out.queued_bytes += len(frame)

    def send_forked(self, sid: int, forked: ForkedStream) -> None:
        """Queue a child's frames on the quorum link to ``sid``, behind what is queued now."""
        out = self._outgoing.get((sid, QUORUM))
        if sid not in self.peers or sid == self.sid or out is None:  # no link: nothing was sent before it
            forked.abandon()
            return
        out.queue.append(forked)
        out.wake_sender()

    def queued_bytes(self, sid: int) -> int:
        out = self._outgoing.get((sid, QUORUM))
        return out.queued_bytes if out else 0

    def drop(self, sid: int) -> None:
        for kind in (QUORUM, ELECTION):
            out = self._outgoing.get((sid, kind))
            if out is not None and kind == QUORUM:
                out.generation += 1
                _clear(out)
                out.wake_sender()
        stream = self._incoming.pop((sid, QUORUM), None)
        if stream is not None:
            spawn(self._nursery, stream.aclose)

    async def _sender(self, out: _Outgoing) -> None:
        peer = self.peers[out.sid]
        port = peer.quorum_port if out.kind == QUORUM else peer.election_port
        backoff_s = 0.05
        while True:
            await out.wake.wait()
            out.wake = trio.Event()
            if not out.queue:
                continue
            generation = out.generation
            try:
                with trio.fail_after(CONNECT_TIMEOUT_S):
                    stream = await self._dial(peer.host, port)
                backoff_s = 0.05
            except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
                LOGGER.debug("cannot reach server %d (%s): %s", out.sid, out.kind, exc)
                self._discard(out)
                await trio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 1.0)
                continue
            await contained(f"the link to server {out.sid} ({out.kind})", LOGGER, self._pump, out, stream, generation)

    async def _dial(self, host: str, port: int) -> trio.abc.Stream:
        """A link to a peer, over TLS with ``sslQuorum``.  Raises: OSError, or
        trio.BrokenResourceError when the TLS handshake fails (logged with its reason)."""
        stream = await trio.open_tcp_stream(host, port)
        if self._dial_context is None:
            return stream
        secure = trio.SSLStream(stream, self._dial_context, server_hostname=host)
        try:
            await secure.do_handshake()
        except trio.BrokenResourceError as exc:
            self._tls_warning(f"TLS handshake with the server at {host}:{port} failed: {exc.__cause__ or exc}")
            await trio.aclose_forcefully(stream)
            raise
        return secure

    def _discard(self, out: _Outgoing) -> None:
        _clear(out)
        if out.kind == QUORUM:
            self.link_down(out.sid)

    async def _pump(self, out: _Outgoing, stream: trio.abc.Stream, generation: int) -> None:
        broke: str | None = None  # stays None when the watcher cancels the send
        try:
            async with stream:
                try:
                    await self._introduce(out, stream)
                except PeerAuthError as exc:
                    broke = f"not authenticated: {exc}"
                    self.warn("peer-auth", f"the {out.kind} link to server {out.sid} is {broke}")
                    return
                async with trio.open_nursery() as nursery:
                    # the peer never writes on this stream after its proof: EOF means it closed
                    # (it died or dropped us), and we notice now rather than lose the next
                    # message into a dead socket
                    nursery.start_soon(self._watch_close, stream, nursery.cancel_scope)
                    broke = await self._send_frames(out, stream, generation)
                    nursery.cancel_scope.cancel()
        finally:  # however the link ended, unless it was dropped on purpose, the core hears of it
            if out.generation == generation:
                LOGGER.info("link to server %d (%s) %s", out.sid, out.kind, broke or "closed by the peer")
                self._discard(out)

    async def _introduce(self, out: _Outgoing, stream: trio.abc.Stream) -> None:
        """Say who we are (the hello); with ``quorum.auth``, answer the peer's challenge and
        check its proof first (zabby.server.peering.peer_auth).

        Raises: PeerAuthError where the peer did not authenticate and it must; the network's
        errors."""
        me = self.peers[self.sid]
        hello: list[Any] = [self.sid, me.host, me.quorum_port, me.election_port, me.observer]
        auth = self.auth
        if auth is None:
            await stream.send_all(encode_frame(msgpack.packb(hello)))
            return
        decoder = FrameDecoder(HELLO_BYTES_MAX)
        challenge = await _read_frame(stream, decoder, AUTH_WAIT_S)
        nonce_b = peer_auth.parse_challenge(challenge) if challenge is not None else None
        if nonce_b is None:
            if auth.required:
                raise PeerAuthError("it sent no challenge (quorum.auth off there?)")
            await stream.send_all(encode_frame(msgpack.packb(hello)))
            return
        nonce_a = os.urandom(peer_auth.NONCE_BYTES)
        hello += [nonce_a, peer_auth.dial_mac(auth.secret, out.kind, self.sid, out.sid, nonce_b, nonce_a)]
        await stream.send_all(encode_frame(msgpack.packb(hello)))
        proof = await _read_frame(stream, decoder, CONNECT_TIMEOUT_S)
        expected = peer_auth.accept_mac(auth.secret, out.kind, out.sid, self.sid, nonce_a, nonce_b)
        if proof is None or not peer_auth.checks_out(expected, peer_auth.parse_proof(proof)):
            raise PeerAuthError("it did not prove it holds the secret (quorum.auth.secretFile)")

    async def _send_frames(self, out: _Outgoing, stream: trio.abc.Stream, generation: int) -> str | None:
        """Send queued frames until the link is dropped; the reason if it broke instead."""
        try:
            if isinstance(stream, trio.SocketStream):
                out.fd = stream.socket.fileno()
            while out.generation == generation:
                if not out.queue:
                    out.idle = True
                    await out.wake.wait()
                    out.idle = False
                    out.wake = trio.Event()
                    continue
                if isinstance(out.queue[0], ForkedStream):
                    forked = out.queue.popleft()
                    assert isinstance(forked, ForkedStream)
                    failed = await self._relay(forked, stream)
                    if failed:
                        return failed
                    continue
                chunk: list[bytes] = []
                while out.queue and len(chunk) < 256 and not isinstance(out.queue[0], ForkedStream):
                    frame = out.queue.popleft()
                    assert isinstance(frame, bytes)
                    out.queued_bytes -= len(frame)
                    chunk.append(frame)
                data = b"".join(chunk)
                await stream.send_all(data)
                self.bytes_sent += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            return f"broke: {exc}"
        finally:
            out.fd, out.idle = None, False
        return None

    async def _relay(self, forked: ForkedStream, stream: trio.abc.Stream) -> str | None:
        """Copy the child's frames to ``stream`` until it exits; a reason if it failed (the
        peer then got a partial stream, so the link must go)."""
        started = time.perf_counter()
        sent, failure = await relay_forked(forked, stream)
        self.bytes_sent += sent
        if failure is None:
            LOGGER.info("sent %s: %d bytes in %.2f s", forked.what, sent, time.perf_counter() - started)
        return failure

    @staticmethod
    async def _watch_close(stream: trio.abc.Stream, scope: trio.CancelScope) -> None:
        try:
            while await stream.receive_some(4096):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        scope.cancel()

    # ----------------------------------------------------------------- receiving
    def incoming_handler(self, kind: str) -> Callable[[trio.abc.Stream], Awaitable[None]]:
        async def handle(stream: trio.abc.Stream) -> None:
            sid = None
            stranger = False
            peer_input: _PeerInput | None = None
            address = peer_host(stream)
            try:
                async with stream:
                    slot = await self.unidentified.take(address)
                    if not isinstance(slot, Slot):
                        self.warn("peer-unidentified", f"refusing a {kind} link from {address}: {slot} that have not said who they are yet")
                        return
                    try:
                        heard = await self._identify(stream, kind)
                    finally:
                        slot.release()
                    if heard is None:
                        return
                    hello, after_hello = heard
                    sid = hello.sid
                    stranger = sid not in self.members
                    self._strangers += stranger
                    if stranger and sid not in self.peers:  # it may sync as a non-voting learner: reach it where it says
                        LOGGER.info("link from server %d at %s, which is not in our configuration", sid, hello.address.host)
                        self.peers[sid] = hello.address
                    decoder = FrameDecoder(STRANGER_FRAME_BYTES_MAX if stranger else self.frame_bytes_max)
                    early_frames = decoder.receive_data(after_hello)
                    old = self._incoming.get((sid, kind))
                    self._incoming[(sid, kind)] = stream
                    if old is not None:
                        await old.aclose()
                    peer_input = _PeerInput(self.memory, f"the {kind} link from server {sid}", self.warn)
                    with peer_input.scope:
                        await self._receive_loop(sid, kind, stream, decoder, peer_input, early_frames)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
            except RemoteProtocolError as exc:
                self.warn("peer-protocol", f"closing a {kind} link from {address if sid is None else f'server {sid}'}: {exc}")
            finally:
                if peer_input is not None:
                    peer_input.release()
                if self.gate is not None and sid is not None:
                    self.gate.forget((sid, kind))
                self._strangers -= stranger
                if sid is not None and self._incoming.get((sid, kind)) is stream:
                    del self._incoming[(sid, kind)]
                    self.link_closed(sid, kind)
                    if kind == QUORUM:
                        self.link_down(sid)

        return handle

    async def _identify(self, stream: trio.abc.Stream, kind: str) -> tuple[peer_auth.Hello, bytes] | None:
        """The TLS handshake, the challenge and the hello of a new link: its hello and what
        came after it if it is admitted (``_admit``), else None."""
        if isinstance(stream, trio.SSLStream) and not await self._accept_handshake(stream, kind):
            return None
        nonce_b = await self._challenge(stream)
        heard = await self._hello(stream)
        if heard is None or not await self._admit(heard[0], kind, stream, nonce_b):
            return None
        return heard

    async def _challenge(self, stream: trio.abc.Stream) -> bytes | None:
        """With ``quorum.auth``: the nonce of the challenge sent to a new link."""
        if self.auth is None:
            return None
        nonce = os.urandom(peer_auth.NONCE_BYTES)
        await stream.send_all(encode_frame(peer_auth.challenge_payload(nonce)))
        return nonce

    async def _admit(self, hello: peer_auth.Hello, kind: str, stream: trio.abc.Stream, nonce_b: bytes | None) -> bool:
        """Whether a link that says it is from server ``hello.sid`` is taken (one log line if
        not): with ``quorum.auth``, only one whose hello proves the secret (or, while it is not
        required, none at all), and it is sent our proof; never our own id; a member's only
        from the host its membership names (and, over TLS, with a certificate for that host),
        and not while its link is live (a second hello must not replace a member's link); a
        stranger's (it may sync as a non-voting learner) only within ``STRANGER_LINKS_MAX``."""
        sid = hello.sid
        if not await self._authenticated(hello, kind, stream, nonce_b):
            return False
        if sid == self.sid:
            self.warn("peer-refused", f"refusing a {kind} link that claims our own id {sid}")
            return False
        address = peer_host(stream)
        if sid in self.members:
            host = self.peers[sid].host if sid in self.peers else ""
            if host and address is not None and not await _same_host(host, address):
                self.warn("peer-refused", f"refusing a {kind} link from {address} that claims server {sid}, which is at {host}")
                return False
            if host and isinstance(stream, trio.SSLStream) and not _certificate_names(stream, host):
                self.warn("peer-refused", f"refusing a {kind} link that claims server {sid}: its certificate is not for {host}")
                return False
            heard = self._last_heard.get((sid, kind))
            if (sid, kind) in self._incoming and heard is not None and time.monotonic() - heard < LINK_LIVE_S:
                self.warn("peer-refused", f"refusing a second {kind} link for server {sid} from {address}: its link is live")
                return False
            return True
        if self._strangers >= STRANGER_LINKS_MAX:
            self.warn("peer-refused", f"refusing a {kind} link from server {sid} at {address}: {STRANGER_LINKS_MAX} servers no membership names are linked")
            return False
        return True

    async def _accept_handshake(self, stream: trio.SSLStream[trio.SocketStream], kind: str) -> bool:
        """The TLS handshake of an incoming link; False (logged) if it failed or took too long."""
        with trio.move_on_after(CONNECT_TIMEOUT_S):
            try:
                await stream.do_handshake()
                return True
            except trio.BrokenResourceError as exc:
                address = stream.transport_stream.socket.getpeername()[:2]
                self._tls_warning(f"TLS handshake of a {kind} link from {address[0]}:{address[1]} failed: {exc.__cause__ or exc}")
                return False
        return False

    async def _authenticated(self, hello: peer_auth.Hello, kind: str, stream: trio.abc.Stream, nonce_b: bytes | None) -> bool:
        auth = self.auth
        if auth is None:
            return True
        if hello.mac is None or hello.nonce is None or nonce_b is None:
            if auth.required:
                self.warn("peer-auth", f"refusing a {kind} link that claims server {hello.sid}: it does not authenticate (quorum.auth.required)")
                return False
            return True
        expected = peer_auth.dial_mac(auth.secret, kind, hello.sid, self.sid, nonce_b, hello.nonce)
        if not peer_auth.checks_out(expected, hello.mac):
            self.warn("peer-auth", f"refusing a {kind} link that claims server {hello.sid}: its proof is wrong (another secret?)")
            return False
        proof = peer_auth.accept_mac(auth.secret, kind, self.sid, hello.sid, hello.nonce, nonce_b)
        await stream.send_all(encode_frame(peer_auth.proof_payload(proof)))
        return True

    async def _hello(self, stream: trio.abc.Stream) -> tuple[peer_auth.Hello, bytes] | None:
        """What a new link says it is (``peer_auth.parse_hello``: every field checked before it
        is used, nothing kept), and the bytes that came after its hello; None if it said
        nothing in time.  Only the hello's own frame is read here, and it is small: what
        follows is read at the limit of who the peer turns out to be.

        Raises: RemoteProtocolError for a hello that is too long or malformed."""
        buffer = bytearray()
        with trio.move_on_after(CONNECT_TIMEOUT_S):
            while len(buffer) < 4 or len(buffer) < 4 + int.from_bytes(buffer[:4], "big"):
                if len(buffer) >= SNIFF_BYTES and protocol_of(buffer) == ZOOKEEPER_PROTOCOL:
                    raise RemoteProtocolError(f"it speaks ZooKeeper's peer protocol, and this server zabby's ({OTHER_PROTOCOL_ADVICE})")
                if len(buffer) >= 4 and int.from_bytes(buffer[:4], "big") > HELLO_BYTES_MAX:
                    raise RemoteProtocolError(f"a hello of {int.from_bytes(buffer[:4], 'big')} bytes (at most {HELLO_BYTES_MAX})")
                data = await stream.receive_some(HELLO_BYTES_MAX)
                if not data:
                    return None
                buffer += data
            length = int.from_bytes(buffer[:4], "big")
            return peer_auth.parse_hello(bytes(buffer[4 : 4 + length])), bytes(buffer[4 + length :])
        return None

    async def _receive_loop(self, sid: int, kind: str, stream: trio.abc.Stream, decoder: FrameDecoder, peer_input: _PeerInput,
                            frames: list[bytes]) -> None:  # fmt: skip
        if frames:  # those that came with the hello
            self._heard(sid, kind, frames)
        receive = receiver(stream, PEER_READ_BYTES)
        while True:
            data = await receive()
            if not data:
                return
            frames = decoder.receive_data(data)
            buffered = decoder.buffered_bytes
            if buffered != peer_input.held_bytes:  # nearly every read ends at a frame's end: nothing held
                peer_input.hold(buffered)
            if frames:
                self._heard(sid, kind, frames)
                gate = self.gate
                if gate is not None and gate.over((sid, kind), len(data)):  # the engine busy and this link over its share
                    await gate.wait((sid, kind))  # read no more meanwhile

    def _heard(self, sid: int, kind: str, frames: list[bytes]) -> None:
        """Hand one read's messages over together (the engine then acts on them at once); those
        before a frame that does not decode still count."""
        self._last_heard[(sid, kind)] = time.monotonic()
        messages: list[Message] = []
        try:
            for frame in frames:
                messages.append(decode(frame))
        finally:
            if messages:
                self.deliver(sid, messages)


def spawn(nursery: trio.Nursery | None, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
    """``nursery.start_soon(fn, *args)``, but nothing once the nursery has closed: the server
    is shutting down, and what the engine still sends or drops meanwhile goes nowhere."""
    if nursery is None:
        return
    try:
        nursery.start_soon(fn, *args)
    except RuntimeError:  # "Nursery is closed to new arrivals"
        LOGGER.debug("not started, shutting down: %s", fn)


def _clear(out: _Outgoing) -> None:
    for item in out.queue:
        if isinstance(item, ForkedStream):
            item.abandon()
    out.queue.clear()
    out.queued_bytes = 0


def peer_host(stream: trio.abc.Stream) -> str | None:
    """The address a link comes from (None when the socket cannot say)."""
    socket_stream = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    try:
        return str(socket_stream.socket.getpeername()[0])  # type: ignore[union-attr]
    except (OSError, AttributeError):
        return None


async def _same_host(configured: str, address: str) -> bool:
    """Whether ``address`` is the host a membership names: the same IP, or a name that
    resolves to it (the hosts file and DNS, at each hello of a member named by host name)."""
    try:
        if ipaddress.ip_address(configured) == ipaddress.ip_address(address):
            return True
    except ValueError:
        pass
    else:
        return False
    try:
        resolved = {str(info[4][0]) for info in await trio.socket.getaddrinfo(configured, None)}
    except OSError:
        return False
    return address in resolved


async def _read_frame(stream: trio.abc.Stream, decoder: FrameDecoder, wait_s: float) -> bytes | None:
    """The next frame on ``stream`` within ``wait_s`` (None: none came, or the peer closed)."""
    with trio.move_on_after(wait_s):
        while True:
            frames = decoder.receive_data(b"")
            if frames:
                return frames[0]
            data = await stream.receive_some(HELLO_BYTES_MAX)
            if not data:
                return None
            frames = decoder.receive_data(data)
            if frames:
                return frames[0]
    return None


def _certificate_names(stream: trio.SSLStream[Any], host: str) -> bool:
    """Whether the peer's certificate names ``host`` (a subjectAltName DNS name or IP, a
    wildcard covering one label, or the subject's commonName where it has no SAN).  A peer
    that showed none passes: ``ssl.quorum.clientAuth`` decided it need not (with ``need``,
    ZooKeeper's default, its handshake failed already)."""
    certificate = stream.getpeercert()
    if not certificate:
        return True
    names = [value for kind, value in certificate.get("subjectAltName", ()) if kind in ("DNS", "IP Address")]
    if not names:
        names = [value for field in certificate.get("subject", ()) for key, value in field if key == "commonName"]
    host = host.lower().rstrip(".")
    for name in (str(n).lower().rstrip(".") for n in names):
        if name == host or (name.startswith("*.") and "." in host and host.split(".", 1)[1] == name[2:]):
            return True
    return False
