"""One client connection's I/O: protocol detection, framing, the codec, and the writer.

Theory of operation: the reader task reads the first bytes and tells the protocol
(``zabby.wire.codec.detect``).  A four-letter word is answered from a frozen snapshot of the
server and the connection closes.  Otherwise the connection picks the protocol's codec,
decodes the connect request for its ``ClientSession`` (``zabby.server.session``), which
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
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import trio

from zabby.errors import Err, OversizeError, RemoteProtocolError
from zabby.server import fourletter
from zabby.server.guard import NETWORK_ERRORS
from zabby.server.session import ClientSession, SessionHost
from zabby.server.sockets import receiver
from zabby.server.statistics import Monitored, reset, snapshot
from zabby.wire.codec import ClientCodec, ClientProtocol, MsgpackCodec, detect
from zabby.wire.framing import FrameDecoder
from zabby.wire.jute_codec import JuteCodec
from zabby.wire.messages import connect_refusal

TLS_HANDSHAKE_RECORD = 0x16  # the first byte a TLS client sends (a handshake record)

LOGGER = logging.getLogger("zabby.server.conn")

RECEIVE_BYTES_MAX = 256 * 1024
OUTGOING_BYTES_MAX = 64 * 2**20  # a client that reads nothing cannot make us hold more
HANDSHAKE_TIMEOUT_S = 10.0
LINGER_S = 1.0
FRAME_HEADROOM_BYTES = 1024  # a frame holds jute.maxbuffer of data plus the request's header


class ClientPortHost(SessionHost, Monitored, Protocol):
    """The server behind the client port: its sessions' host, and monitored by the words."""

    def flush_soon(self, connection: Connection) -> None:
        """Call ``connection.flush()`` once the task running now is done with its batch."""
        ...

    def feeding(self) -> AbstractContextManager[None]:
        """Around a burst of requests: what they ask of the server is done at its end."""
        ...


class Connection:
    def __init__(self, server: ClientPortHost, stream: trio.abc.Stream, address: tuple[str, int]) -> None:
        self.server = server
        self.stream = stream
        self.address = address
        self.session = ClientSession(server, self, address)
        self._encode: Callable[[list[Any]], bytes] = MsgpackCodec.encode  # the codec's, once detected
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._wake = trio.Event()
        self._started = trio.Event()
        self._closing = False
        self._queued = False  # asked the server to flush us
        self._sending = False  # the writer task is in a send_all
        self._direct = isinstance(stream, trio.SocketStream)  # flush may write to the socket (TLS: the writer encrypts)

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
            self._queue(frame)

    def session_started(self) -> None:
        self._started.set()

    def close_after_flush(self) -> None:
        self._closing = True
        self._wake.set()

    # ----------------------------------------------------------------- writing
    def _queue(self, frame: bytes) -> None:
        if self._closing and not self._out:
            return
        self._out.append(frame)
        self._out_bytes += len(frame)
        self.session.sent += 1
        if self._out_bytes > OUTGOING_BYTES_MAX:
            LOGGER.warning("closing %s: %d bytes unread by the client", self.address, self._out_bytes)
            self._out.clear()
            self._closing = True
            self._wake.set()
        elif not self._queued:
            self._queued = True
            self.server.flush_soon(self)

    def flush(self) -> None:
        """Send what is queued without waiting: what the socket takes now goes now, the rest
        (all of it, while the writer task is mid-send) goes to the writer task."""
        self._queued = False
        if not self._out:
            return
        if self._sending or self._closing or not self._direct:
            self._wake.set()
            return
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out.clear()
        self._out_bytes = 0
        try:
            sent = os.write(self.stream.socket.fileno(), data)
        except BlockingIOError:
            sent = 0
        except OSError:  # broken: the writer meets the same error and ends the connection
            sent = 0
        self.server.stats.packets_sent += 1
        if sent < len(data):
            self._out.append(data[sent:])
            self._out_bytes = len(data) - sent
            self._wake.set()

    async def _writer(self, cancel_scope: trio.CancelScope) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                if self._out:
                    data = b"".join(self._out)
                    self._out.clear()
                    self._out_bytes = 0
                    self.server.stats.packets_sent += 1
                    self._sending = True
                    await self.stream.send_all(data)
                    self._sending = False
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
            codec = JuteCodec(self.close_after_flush, config.jute_buffer_bytes_max)
        self._encode = codec.encode
        decoder = FrameDecoder(config.jute_buffer_bytes_max + FRAME_HEADROOM_BYTES)
        try:
            frames = decoder.receive_data(data)
            with trio.move_on_after(HANDSHAKE_TIMEOUT_S):
                while not frames:
                    data = await self.stream.receive_some(RECEIVE_BYTES_MAX)
                    if not data:
                        return
                    frames = decoder.receive_data(data)
            if not frames or not self.session.connect(codec.decode_connect(frames.pop(0))):
                return
            await self._started.wait()
            self._handle_frames(codec, frames)
            await self._read_requests(codec, decoder)
        except RemoteProtocolError as exc:
            self._protocol_error(codec, exc)

    def _answer_word(self, word: str) -> None:
        server = self.server
        text = fourletter.answer(word, snapshot(server, fourletter.parts(word)), functools.partial(reset, server))
        self._queue(text.encode())

    async def _read_requests(self, codec: ClientCodec, decoder: FrameDecoder) -> None:
        server = self.server
        receive = receiver(self.stream, RECEIVE_BYTES_MAX)
        while not self._closing:
            if server.outstanding >= server.config.outstanding_requests_max:
                await server.wait_unthrottled()
            data = await receive()
            if not data:
                return
            self._handle_frames(codec, decoder.receive_data(data))

    def _handle_frames(self, codec: ClientCodec, frames: list[bytes]) -> None:
        if not frames:
            return
        session = self.session
        session.touch()
        decode, handle = codec.decode_request, session.handle
        with self.server.feeding():
            for frame in frames:
                if self._closing:
                    break
                handle(decode(frame))
        self.flush()  # the burst's replies in one system call

    def _protocol_error(self, codec: ClientCodec, exc: RemoteProtocolError) -> None:
        LOGGER.warning("closing %s connection %s:%d: %s", codec.name, *self.address, exc)
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


async def open_secure(stream: trio.SocketStream, context: ssl.SSLContext, address: tuple[str, int]) -> trio.SSLStream[trio.SocketStream] | None:
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
            LOGGER.warning("TLS handshake with %s:%d failed: %s", *address, exc.__cause__ or exc)
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
    LOGGER.warning("closing %s:%d: a %s client spoke plaintext on the secure client port", *address, protocol.value)
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
