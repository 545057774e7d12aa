"""One client connection's I/O: protocol detection, framing, the codec, and the writer.

Theory of operation: the reader task reads the first bytes and tells the protocol
(``zabby.wire.codec.detect``).  A four-letter word is answered from a frozen snapshot of the
server and the connection closes.  Otherwise the connection picks the protocol's codec,
decodes the connect request for its ``ClientSession`` (``zabby.server.clients.session``), which
decides everything else, and hands it each decoded request in arrival order.  What the
session sends comes back through ``send`` as the msgpack protocol's values and is encoded
here, once, in send order.  What queued is flushed without waiting, straight onto the
socket, by the task that queued it once it is done with its batch (the reader after a
burst of requests, the server's peer task after applying a Ready): one system call for the
burst, and no task to wake for it.  Only what the socket does not take at once (or what
queues while the writer task is sending) goes through the writer task.

On the secure client port the stream is a ``trio.SSLStream`` whose handshake is done
(``open_secure``); a client that speaks plaintext there is told so in its own protocol where
it has a way to hear it (``refuse_plaintext``), and the connection closes.

Failures: a broken socket ends the writer quietly; a protocol error closes the connection
(with the codec's last word, if it has one); anything else the reader raises leaves through
``guard.contained`` (the caller), so nothing on one connection reaches the server.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import trio

from zabby.errors import Err, OversizeError, RefusedRequest, RemoteProtocolError
from zabby.opcodes import KeeperState
from zabby.server.adminport import fourletter
from zabby.server.clients.budget import ClientMemory
from zabby.server.process.guard import NETWORK_ERRORS
from zabby.server.clients.passes import SMALL_FRAME_BYTES, PassBudget
from zabby.server.clients.session import ClientSession, SessionHost
from zabby.server.clients.sockets import receiver
from zabby.server.adminport.statistics import Monitored, reset, snapshot
from zabby.wire.codec import ClientCodec, ClientProtocol, MsgpackCodec, detect
from zabby.wire.framing import FRAME_HEADROOM_BYTES, FrameDecoder
from zabby.wire.jute_codec import JuteCodec
from zabby.tree.watches import Replayed
from zabby.wire.messages import PROTOCOL_NAME, XID_NOTIFICATION, connect_refusal

TLS_HANDSHAKE_RECORD = 0x16  # the first byte a TLS client sends (a handshake record)

LOGGER = logging.getLogger("zabby.server.conn")

RECEIVE_BYTES_MAX = 256 * 1024
FRAME_PREFIX_BYTES = 4  # every frame of both protocols starts with its length
HANDSHAKE_TIMEOUT_S = 10.0
LINGER_S = 1.0


class ClientPortHost(SessionHost, Monitored, Protocol):
    """The server behind the client port: its sessions' host, and monitored by the words."""

    @property
    def client_memory(self) -> ClientMemory: ...

    @property
    def throttled(self) -> bool:
        """globalOutstandingLimit writes are in flight: connections with requests of their own
        in flight take no more (one with none still may: nobody waits longer than its turn)."""
        ...

    def wake_when_unthrottled(self, connection: Connection) -> None:
        """Call ``connection.requests_answered()`` once ``throttled`` is over."""
        ...

    def flush_soon(self, connection: Connection) -> None:
        """Call ``connection.flush()`` once the task running now is done with its batch."""
        ...

    def begin_batch(self) -> None:
        """A burst of requests begins: what they ask of the server is done at ``end_batch``."""
        ...

    def end_batch(self) -> None: ...

    @property
    def passes(self) -> PassBudget:
        """The request bytes the scheduler's pass may still take, and the lane of the
        connections it stopped (``zabby.server.clients.passes``)."""
        ...



# The last frames each codec encoded for a list of events, with that list (held, so its id is
# not reused) and zxid: ``Connection.send_events`` reuses them for the next connection handed it.
_EVENT_FRAMES: dict[Any, tuple[list[tuple[int, str]], int, bytes, tuple[int, ...]]] = {}


def _frame_sizes(frames: bytes) -> tuple[int, ...]:
    """The smallest, the largest and the last of the frames' sizes (their length prefixes
    excluded): what ``record_response`` keeps of them, in an order that leaves each right."""
    sizes, offset = [], 0
    while offset < len(frames):  # each frame: a length prefix, then that many bytes
        size = int.from_bytes(frames[offset : offset + FRAME_PREFIX_BYTES], "big")
        sizes.append(size)
        offset += FRAME_PREFIX_BYTES + size
    return (min(sizes), max(sizes), sizes[-1]) if sizes else ()

class Connection:
    """One client connection (see the module's docstring); a ``Holder`` of client memory
    (``zabby.server.clients.budget``): every byte it holds for its client is charged before
    the task holding it waits.  Input taken and replies written within one batch are never
    charged: each request used to cost four charges (its bytes read and taken, its reply
    queued and written), none of which outlived the batch."""

    def __init__(self, server: ClientPortHost, stream: trio.abc.Stream, address: tuple[str, int]) -> None:
        self.server = server
        self.stream = stream
        self.address = address
        self.session = ClientSession(server, self, address)
        self._memory = server.client_memory
        self._outstanding_max = server.config.connection_outstanding_max
        self._encode: Callable[[list[Any]], bytes] = MsgpackCodec.encode  # the codec's, once detected
        self._encode_events: Callable[[int, int, list[tuple[int, str]]], bytes] = MsgpackCodec.encode_events
        self._decoder = FrameDecoder(server.config.jute_buffer_bytes_max + FRAME_HEADROOM_BYTES)
        self._out: list[bytes] = []
        self._out_uncharged = 0  # bytes queued on ``_out`` since the last flush: charged if they stay
        self._wake = trio.Event()
        self._started = trio.Event()
        self._closing = False
        self._close_delay_s = 0.0  # a failed authentication's last answer waits this long
        self._queued = False  # asked the server to flush us
        self._sending = False  # the writer task is in a send_all
        # flush may write to the socket itself (TLS: the writer encrypts)
        self._direct_socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        # what it holds for its client (``held_bytes``): input, requests in flight, and output
        self.held_bytes = 0
        self._input_bytes = 0  # the decoder's partial frame and the frames in ``_pending``
        self._request_bytes = 0  # the session's ``request_bytes``, as last charged
        self._state_bytes = 0  # the session's state here (``hold_state``): in the budget, not in the pause or the limit
        self._pending: deque[bytes] = deque()  # frames read, not yet handed to the session
        self._pending_bytes = 0
        self._paused = False  # the reader waits for ``_resume`` (see ``_may_read``)
        self._resume = trio.Event()
        self._released = False  # the connection ended: nothing more is charged

    # ----------------------------------------------------------------- lifecycle
    async def run(self) -> None:
        """Serve this connection until either side closes it.  A broken socket ends the
        writer quietly; what the reader raises leaves through ``guard.contained`` (the
        caller), so nothing on one connection reaches the server's nurseries."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer, nursery.cancel_scope)
                await self._reader()
                self.close_after_flush()
        finally:
            self.server.detach(self.session)
            self._memory.release(self)
            self._released = True
            self._out.clear()
            with trio.CancelScope(shield=True):
                await self._linger_close()

    async def _linger_close(self) -> None:
        """Close gracefully: FIN first, then drain what the client still sends (bounded), so
        unread input does not turn the close into a reset that destroys our last replies."""
        stream = self.stream
        with trio.move_on_after(LINGER_S):
            try:
                if isinstance(stream, trio.abc.HalfCloseableStream):  # TLS has no half-close
                    await stream.send_eof()
                    while await stream.receive_some(RECEIVE_BYTES_MAX):
                        pass
            except NETWORK_ERRORS:
                pass
        with trio.move_on_after(LINGER_S):  # TLS sends close_notify: bounded, as a client may read nothing
            try:
                await stream.aclose()  # closes the socket even when cancelled
            except NETWORK_ERRORS:
                pass

    # ----------------------------------------------------------------- the session's output
    def send(self, message: list[Any]) -> None:
        frame = self._encode(message)
        if frame:
            if message[0] != PROTOCOL_NAME:  # ZooKeeper's client_response sizes leave out the connect response
                self.server.stats.record_response(len(frame) - FRAME_PREFIX_BYTES)
            self._queue(frame)

    def send_events(self, zxid: int, events: list[tuple[int, str]]) -> None:
        """The frames are encoded once for every connection of this codec that is handed the
        same list (the engine hands one list to every watcher that heard the same events):
        a multi of 5,000 setData seen by 50 recursive watches is 5,000 events encoded, not
        250,000."""
        encoder = self._encode_events
        cached = _EVENT_FRAMES.get(encoder)
        if cached is not None and cached[0] is events and cached[1] == zxid:
            frames, sizes = cached[2], cached[3]
        else:
            frames = encoder(zxid, int(KeeperState.SYNC_CONNECTED), events)
            sizes = _frame_sizes(frames)
            _EVENT_FRAMES[encoder] = (events, zxid, frames, sizes)
        if frames:
            record = self.server.stats.record_response
            for size in sizes:
                record(size)
            self._queue(frames, len(events))

    def send_replay(self, xid: int, events: list[Replayed]) -> None:
        state, encode, record = int(KeeperState.SYNC_CONNECTED), self._encode, self.server.stats.record_response
        frames = [encode([XID_NOTIFICATION, zxid, 0, event_type, state, path, xid]) for zxid, event_type, path in events]
        for frame in frames:
            record(len(frame) - FRAME_PREFIX_BYTES)
        self._queue(b"".join(frames), len(frames))

    def session_started(self) -> None:
        self._started.set()

    def close_after_flush(self, delay_s: float = 0.0) -> None:
        self._closing = True
        self._close_delay_s = max(self._close_delay_s, delay_s)
        self._wake.set()
        self._resume.set()

    def hold_state(self, delta: int) -> None:
        self._state_bytes += delta
        self._charge(delta)

    def requests_answered(self) -> None:
        if not self._queued:  # else the flush due at the end of this batch settles them, once for all its answers
            self._charge_requests()
        if self._paused:
            self._resume.set()

    # ----------------------------------------------------------------- memory
    def _charge(self, delta: int) -> None:
        """Hold ``delta`` bytes more (or fewer) for the client, against its limit and the budget."""
        if self._released:
            return
        self.held_bytes += delta
        memory = self._memory
        memory.charge(self, delta)
        if delta > 0:
            if self.held_bytes - self._state_bytes > memory.connection_bytes_max and not self._closing:
                memory.over_connection_limit(self)
        elif self._paused and self.held_bytes - self._input_bytes - self._state_bytes < memory.resume_bytes:
            self._resume.set()

    def _charge_input(self) -> None:
        held = self._decoder.buffered_bytes + self._pending_bytes
        if held != self._input_bytes:
            delta, self._input_bytes = held - self._input_bytes, held
            self._charge(delta)

    def _settle_out(self) -> None:
        """Charge what was queued since the last flush: it stays queued past this batch."""
        if self._out_uncharged:
            uncharged, self._out_uncharged = self._out_uncharged, 0
            self._charge(uncharged)

    def _charge_requests(self) -> None:
        held = self.session.request_bytes
        if held != self._request_bytes:
            delta, self._request_bytes = held - self._request_bytes, held
            self._charge(delta)

    def close_for_memory(self, reason: str) -> None:
        """Over a memory limit (``zabby.server.clients.budget``): drop what is queued and close."""
        self.server.warn_rate_limited("memory", f"closing {self.address[0]}:{self.address[1]} (session 0x{self.session.session_id:x}): {reason}")
        self.server.stats.connection_drop_count += 1
        self._settle_out()
        released = sum(len(frame) for frame in self._out)
        self._out.clear()
        self._pending.clear()
        self._pending_bytes = 0
        self.close_after_flush()
        self._charge(-released)
        self._charge_input()

    # ----------------------------------------------------------------- writing
    def _queue(self, frame: bytes, count: int = 1) -> None:
        if self._closing and not self._out:
            return
        self._out.append(frame)
        self._out_uncharged += len(frame)  # charged by the flush that ends the batch, if it stays
        self.session.sent += count
        self.server.stats.packets_sent += count  # packets, as ZooKeeper counts them: not socket writes
        if not self._queued and not self._closing:
            self._queued = True
            self.server.flush_soon(self)

    def flush(self) -> None:
        """Send what is queued without waiting: what the socket takes now goes now, the rest
        (all of it, while the writer task is mid-send) goes to the writer task."""
        self._queued = False
        to_charge = self._send_out() if self._out else 0  # the write first: a client may be waiting for it
        if self.session.request_bytes < self._request_bytes:  # answered since the batch began (``requests_answered``)
            self._charge_requests()  # a release only: requests taken are charged after their input (``_handle_frames``)
        if to_charge:  # after the release, as before the write: a charge is checked against the limit
            self._charge(to_charge)

    def _send_out(self) -> int:
        """Write what is queued, as much as the socket takes now (the rest goes to the writer
        task); what to charge for it: the bytes queued since the last charge less those sent."""
        if self._sending or self._closing or self._direct_socket is None:
            self._wake.set()
            uncharged, self._out_uncharged = self._out_uncharged, 0
            return uncharged
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out.clear()
        uncharged, self._out_uncharged = self._out_uncharged, 0
        try:
            sent = os.write(self._direct_socket.fileno(), data)  # -1 once closed: EBADF, never another socket
        except BlockingIOError:
            sent = 0
        except OSError:  # broken: the writer meets the same error and ends the connection
            sent = 0
        if sent < len(data):
            self._out.append(data[sent:])
            self._wake.set()
        return uncharged - sent  # what left is uncharged (a negative figure: charged before)

    async def _writer(self, cancel_scope: trio.CancelScope) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                if self._closing and self._close_delay_s:
                    await trio.sleep(self._close_delay_s)  # slows password guessing, one try per connection
                    self._close_delay_s = 0.0
                if self._out:
                    self._settle_out()
                    data = b"".join(self._out)
                    self._out.clear()
                    self._sending = True
                    await self.stream.send_all(data)
                    self._sending = False
                    self._charge(-len(data))
                if self._closing and not self._out:  # what queued during send_all goes out first
                    return
        except NETWORK_ERRORS as exc:  # the client went away while we wrote to it
            LOGGER.debug("connection %s:%d broke: %r", *self.address, exc)
            self._closing = True
            self._out.clear()
        finally:
            cancel_scope.cancel()  # the reader ends with the writer

    # ----------------------------------------------------------------- reading
    async def _reader(self) -> None:
        protocol, data = await detect_protocol(self.stream, self.server.config.jute_enabled)
        if protocol is ClientProtocol.FOUR_LETTER:
            self._answer_word(data[:4].decode("latin-1"))
            return
        config = self.server.config
        codec: ClientCodec = MsgpackCodec()
        if protocol is ClientProtocol.JUTE:
            codec = JuteCodec(self.close_after_flush, config.jute_buffer_bytes_max, config.request_ops_max)
        self._encode, self._encode_events = codec.encode, codec.encode_events
        try:
            self._take_input(data)
            with trio.move_on_after(HANDSHAKE_TIMEOUT_S):
                while not self._pending:
                    self._charge_input()
                    chunk = await self.stream.receive_some(RECEIVE_BYTES_MAX)
                    if not chunk:
                        return
                    self._take_input(chunk)
            if not self._pending:
                return  # no connect request in time
            if not self.session.connect(codec.decode_connect(self._next_frame())):
                return
            self._charge_input()
            await self._started.wait()
            await self._read_requests(codec)
        except RemoteProtocolError as exc:
            self._protocol_error(codec, exc)

    def _answer_word(self, word: str) -> None:
        server = self.server
        server.stats.packets_received += 1  # ZooKeeper counts the word as a packet received
        text = fourletter.answer(word, snapshot(server, fourletter.parts(word)), functools.partial(reset, server))
        answer = text.encode()
        self._queue(answer, fourletter.packets(answer))

    def _take_input(self, data: bytes | bytearray) -> None:
        """Decode ``data`` into frames; their bytes are charged once the reader waits with them
        (``_handle_frames`` ends by charging what it left, ``_read_requests`` a partial frame)."""
        frames = self._decoder.receive_data(data)
        if frames:
            self._pending.extend(frames)
            self._pending_bytes += sum(map(len, frames))

    def _next_frame(self) -> bytes:
        frame = self._pending.popleft()
        self._pending_bytes -= len(frame)
        return frame

    async def _read_requests(self, codec: ClientCodec) -> None:
        """Hand the session its requests while it may take them (``_may_read``); read the
        socket only when none are left.  A connection that may take no more is not read:
        its client meets back-pressure, and nobody else does."""
        receive = receiver(self.stream, RECEIVE_BYTES_MAX)
        while not self._closing:
            if self._pending:
                self._handle_frames(codec)
                if self._closing:
                    return
                if self._pending and self._may_read():  # the pass's budget stopped it
                    await self._take_turn(codec)
                    continue
            if self._pending or not self._may_read():
                await self._pause()
                continue
            data = await receive()
            if not data:
                return
            self._take_input(data)
            if not self._pending:  # a partial frame: held while the next read waits
                self._charge_input()

    def _may_read(self) -> bool:
        """Holding less than the memory pause in requests and replies (its input does not
        count: it is what waits to be taken), fewer requests in flight than its share, and,
        while the server has globalOutstandingLimit writes in flight, none of its own."""
        in_flight = self.session.in_flight
        held = self.held_bytes + self._out_uncharged - self._input_bytes - self._state_bytes  # this batch's replies count
        if held >= self._memory.pause_bytes or in_flight >= self._outstanding_max:
            return False
        return not (in_flight and self.server.throttled)

    async def _pause(self) -> None:
        self._paused = True
        if self.session.in_flight and self.server.throttled:
            self.server.wake_when_unthrottled(self)
        try:
            await self._resume.wait()
        finally:
            self._paused = False
            self._resume = trio.Event()

    async def _take_turn(self, codec: ClientCodec) -> None:
        """Its turn in the lane of the connections the pass's budget stopped: in a later pass,
        its next frame whatever its size, once a pass has done nothing else large, and the
        frames after it that fit (``zabby.server.clients.passes``)."""
        async with self.server.passes.lane:  # acquiring it yields: a later pass
            while self._pending and not self._closing and self._may_read():
                waiting = len(self._pending)
                self._handle_frames(codec, in_turn=True)
                if len(self._pending) < waiting:
                    return
                await trio.lowlevel.checkpoint()

    def _handle_frames(self, codec: ClientCodec, in_turn: bool = False) -> None:
        """Hand the session the frames read, in order, while it may take them and each fits
        what the scheduler's pass has left (``zabby.server.clients.passes``); the first whatever is
        left if it is small, or, ``in_turn``, if it takes the engine's turn."""
        session = self.session
        decode, handle = codec.decode_request, session.handle
        pending = self._pending
        server = self.server
        passes = server.passes
        left, first = passes.request_bytes_left, True
        server.begin_batch()
        try:
            while pending and not self._closing and self._may_read():
                size = len(pending[0])
                if size > left and not (first and (size <= SMALL_FRAME_BYTES or (in_turn and passes.turn.take_turn()))):
                    break
                left -= size
                first = False
                frame = pending.popleft()
                self._pending_bytes -= size
                try:
                    request = decode(frame)
                except RefusedRequest as refused:
                    session.refuse(refused.xid, refused.code, str(refused))
                    continue
                handle(request, size)
        finally:
            server.end_batch()
        session.touch()  # after the batch's answers left, in the same pass
        passes.request_bytes_left = left
        self._charge_input()
        self._charge_requests()
        self.flush()  # the burst's replies in one system call

    def _protocol_error(self, codec: ClientCodec, exc: RemoteProtocolError) -> None:
        self.server.warn_rate_limited("protocol", f"closing {codec.name} connection {self.address[0]}:{self.address[1]}: {exc}")
        stats = self.server.stats
        stats.connection_drop_count += 1
        if isinstance(exc, OversizeError):
            stats.large_requests_rejected += 1
        frame = codec.encode_protocol_error(self.server.last_zxid, str(exc))
        if frame:
            self._queue(frame)
        self.close_after_flush()


async def detect_protocol(stream: trio.abc.ReceiveStream, jute_enabled: bool) -> tuple[ClientProtocol, bytes]:
    """The protocol and the bytes read to tell it; msgpack when the client stops short."""
    data = b""
    with trio.move_on_after(HANDSHAKE_TIMEOUT_S):
        while (protocol := detect(data, fourletter.WORDS, jute_enabled)) is None:
            chunk = await stream.receive_some(RECEIVE_BYTES_MAX)
            if not chunk:
                break
            data += bytes(chunk)  # a few bytes, once per connection
    return protocol or ClientProtocol.MSGPACK, data


async def open_secure(stream: trio.SocketStream, context: ssl.SSLContext, address: tuple[str, int],
                      warn: Callable[[str, str], None]) -> trio.SSLStream[trio.SocketStream] | None:  # fmt: skip
    """The TLS stream of a connection to the secure port, its handshake done.

    Returns None if the client's first byte is no TLS handshake record (it speaks plaintext:
    the caller answers it with ``refuse_plaintext``).

    Raises:
        trio.BrokenResourceError: the handshake failed (logged here with OpenSSL's reason).
        trio.TooSlowError: no handshake within the handshake timeout.
    """
    with trio.fail_after(HANDSHAKE_TIMEOUT_S):
        first = await stream.socket.recv(1, socket.MSG_PEEK)
        if first and first[0] != TLS_HANDSHAKE_RECORD:
            return None
        secure = trio.SSLStream(stream, context, server_side=True)
        try:
            await secure.do_handshake()
        except trio.BrokenResourceError as exc:
            warn("tls", f"TLS handshake with {address[0]}:{address[1]} failed: {exc.__cause__ or exc}")
            raise
    return secure


async def refuse_plaintext(stream: trio.SocketStream, address: tuple[str, int], host: ClientPortHost) -> None:
    """A client spoke plaintext on the secure port: say so, in its protocol if that has a way
    to carry the reason, then close.  A jute ConnectResponse has none, so a ZooKeeper client
    only sees the close (as with ZooKeeper); the server's log says why."""
    config = host.config
    message = f"port {config.secure_client_port} is a secure client port (secureClientPort): connect with TLS"
    if config.client_port is not None:
        message += f", or in plaintext to clientPort {config.client_port}"
    protocol, _ = await detect_protocol(stream, config.jute_enabled)
    host.warn_rate_limited("plaintext", f"closing {address[0]}:{address[1]}: a {protocol.value} client spoke plaintext on the secure client port")
    host.stats.connection_drop_count += 1
    answer = b""
    if protocol is ClientProtocol.FOUR_LETTER:
        answer = (message + "\n").encode()
    elif protocol is ClientProtocol.MSGPACK:
        answer = MsgpackCodec.encode(connect_refusal(int(Err.AUTHFAILED), host.last_zxid, message))
    async with stream:
        with trio.move_on_after(LINGER_S):
            try:
                if answer:
                    await stream.send_all(answer)
                await stream.send_eof()
            except NETWORK_ERRORS:
                pass
