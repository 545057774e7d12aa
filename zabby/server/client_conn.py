"""One client connection: four-letter-word detection, the session handshake, request routing
and ordered replies.

Theory of operation: the reader task decodes frames and handles each synchronously, in
arrival order.  Writes go to the server's pipeline and leave a slot in ``_slots``; a read that
arrives while slots are waiting joins the queue and runs only when everything before it is
answered, so a session always reads its own writes and hears replies in request order.  A
read with nothing ahead of it runs at once (the fast path).  The writer task sends whatever
accumulated in one ``send_all``, so a burst of pipelined replies costs one system call.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import trio

from zabby.errors import Err, RemoteProtocolError, ZabbyError
from zabby.opcodes import WRITE_OPS, KeeperState, OpCode
from zabby.server import fourletter, jute_conn
from zabby.server.guard import NETWORK_ERRORS
from zabby.server.node import ZabbyServer
from zabby.server.reads import READ_HANDLERS, missed_events
from zabby.server.statistics import ConnectionStatistics, reset, snapshot
from zabby.server.stats import LatencyStat
from zabby.tree import acl as acls
from zabby.tree.prep import Caller
from zabby.tree.txns import Txn
from zabby.wire.framing import FrameDecoder
from zabby.wire.messages import (
    PROTOCOL_NAME,
    PROTOCOL_VERSION,
    XID_NOTIFICATION,
    pack_frame,
    parse_connect_request,
    unpack,
)

LOGGER = logging.getLogger("zabby.server.conn")

RECEIVE_BYTES_MAX = 256 * 1024
OUTGOING_BYTES_MAX = 64 * 2**20  # a client that reads nothing cannot make us hold more
HANDSHAKE_TIMEOUT_S = 10.0
LINGER_S = 1.0


class _Slot:
    __slots__ = ("xid", "op", "args", "reply", "started", "write")

    def __init__(self, xid: int, op: int, args: list[Any], started: float, write: bool) -> None:
        self.xid, self.op, self.args, self.started, self.write = xid, op, args, started, write
        self.reply: list[Any] | None = None  # the reply's values, encoded when sent


class Connection:
    def __init__(self, server: ZabbyServer, stream: trio.SocketStream, address: tuple[str, int]) -> None:
        self.server = server
        self.stream = stream
        self.address = address
        self.session_id = 0
        self.password = b""
        self.timeout_ms = 0
        self.auth_ids: list[acls.AuthId] = [("ip", address[0])]
        self.superuser = False
        self.established_ms = int(time.time() * 1000)
        self.received = self.sent = 0
        self.last_op = "NA"
        self.last_cxid = self.last_zxid = 0
        self.last_response_ms = 0
        self.latency = LatencyStat()
        self._caller = Caller(0, self.auth_ids)
        self._slots: deque[_Slot] = deque()
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._wake = trio.Event()
        self._closing = False
        self._close_after_reply = False  # the next reply is the last (a failed auth)
        self._session_ready = trio.Event()
        self.codec: jute_conn.JuteCodec | None = None  # set when the connection speaks jute
        self._handlers: dict[int, Callable[[list[Any]], list[Any]]] = {
            OpCode.PING: lambda args: [],
            OpCode.AUTH: self._auth,
            OpCode.SET_WATCHES: self._set_watches,
        }

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
            self.server.detach(self)
            with trio.CancelScope(shield=True):
                await self._linger_close()

    async def _linger_close(self) -> None:
        """Close gracefully: FIN first, then drain what the client still sends (bounded), so
        unread input does not turn the close into a reset that destroys our last replies."""
        with trio.move_on_after(LINGER_S):
            try:
                await self.stream.send_eof()
                while await self.stream.receive_some(RECEIVE_BYTES_MAX):
                    pass
            except NETWORK_ERRORS:
                pass
        await self.stream.aclose()

    def close_after_flush(self) -> None:
        self._closing = True
        self._wake.set()

    def reply(self, values: list[Any]) -> None:
        """Send one message, given as the msgpack protocol's values (docs/protocol.md), in
        this connection's codec.  Encoding happens here, in send order, which is what the
        jute codec's bookkeeping of the ops awaiting replies relies on."""
        if self.codec is None:
            self.send(pack_frame(values))
        elif frame := self.codec.encode(values):
            self.send(frame)
        if self._close_after_reply:
            self.close_after_flush()

    def send(self, frame: bytes) -> None:
        if self._closing and not self._out:
            return
        self._out.append(frame)
        self._out_bytes += len(frame)
        self.sent += 1
        if self._out_bytes > OUTGOING_BYTES_MAX:
            LOGGER.warning("closing %s: %d bytes unread by the client", self.address, self._out_bytes)
            self._out.clear()
            self._closing = True
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
                    await self.stream.send_all(data)
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
        first = await self._read_prefix()
        if len(first) >= 4 and first[:4].decode("latin-1") in fourletter.WORDS:
            word = first[:4].decode("latin-1")
            answer = fourletter.answer(word, snapshot(self.server, fourletter.parts(word)), functools.partial(reset, self.server))
            self.send(answer.encode())
            return
        if self.server.config.jute_enabled:  # ZooKeeper's jute protocol on the same port
            first = await jute_conn.read_detect_bytes(self, first)
            if jute_conn.looks_like_jute(first):
                await jute_conn.serve(self, first)
                return
        decoder = FrameDecoder(self.server.config.jute_buffer_bytes_max + 1024)
        try:
            frames = decoder.receive_data(first)
            with trio.move_on_after(HANDSHAKE_TIMEOUT_S):
                while not frames:
                    data = await self.stream.receive_some(RECEIVE_BYTES_MAX)
                    if not data:
                        return
                    frames = decoder.receive_data(data)
            if not frames:
                return
            if not await self._handshake(frames.pop(0)):
                return
            self._handle_frames(frames)
            await self._read_requests(decoder)
        except RemoteProtocolError as exc:
            self._protocol_error(exc)

    async def _read_prefix(self) -> bytes:
        data = b""
        with trio.move_on_after(HANDSHAKE_TIMEOUT_S):
            while len(data) < 4:
                chunk = await self.stream.receive_some(RECEIVE_BYTES_MAX)
                if not chunk:
                    break
                data += chunk
        return data

    async def _read_requests(self, decoder: FrameDecoder) -> None:
        server = self.server
        while not self._closing:
            if server.outstanding >= server.config.outstanding_requests_max:
                await server.wait_unthrottled()
            data = await self.stream.receive_some(RECEIVE_BYTES_MAX)
            if not data:
                return
            self._handle_frames(decoder.receive_data(data))

    def _protocol_error(self, exc: RemoteProtocolError) -> None:
        LOGGER.warning("closing %s:%d: %s", *self.address, exc)
        self.server.stats.connection_drop_count += 1
        if "over the" in str(exc):
            self.server.stats.large_requests_rejected += 1
        self.reply([0, self.server.last_zxid, int(Err.MARSHALLINGERROR), str(exc)])
        self.close_after_flush()

    # ----------------------------------------------------------------- handshake
    async def _handshake(self, frame: bytes) -> bool:
        last_zxid, timeout_ms, session_id, password, _ = parse_connect_request(unpack(frame))
        server = self.server
        if not server.serving:
            return self._refuse(Err.CONNECTIONLOSS, "This ZooKeeper instance is not currently serving requests")
        if server.is_leader and not server.standalone and not server.config.leader_serves:
            return self._refuse(Err.CONNECTIONLOSS, "the leader does not serve clients (leaderServes=no)")
        if last_zxid > server.last_zxid:
            return self._refuse(Err.CONNECTIONLOSS, f"server is behind the client (0x{server.last_zxid:x} < 0x{last_zxid:x})")
        if session_id == 0:
            server.create_session(server.negotiate_timeout(timeout_ms), self._session_created)
            await self._session_ready.wait()
            return True
        known_timeout = server.check_session(session_id, password)
        if known_timeout is None:
            return self._refuse(Err.SESSIONEXPIRED, f"session 0x{session_id:x} has expired or is unknown")
        self._start_session(session_id, password, known_timeout)
        return True

    def _session_created(self, txn: Txn, result: Any) -> None:
        timeout_ms, password = txn.body
        self._start_session(txn.session_id, password, timeout_ms)
        self._session_ready.set()

    def _start_session(self, session_id: int, password: bytes, timeout_ms: int) -> None:
        self.session_id, self.password, self.timeout_ms = session_id, password, timeout_ms
        self._caller = Caller(session_id, self.auth_ids, self.superuser)
        self.server.attach(session_id, self)
        self.server.touch(session_id)
        self.reply([PROTOCOL_NAME, PROTOCOL_VERSION, 0, timeout_ms, session_id, password, self.server.last_zxid, False, ""])

    def _refuse(self, code: Err, message: str) -> bool:
        LOGGER.info("refusing %s:%d: %s", *self.address, message)
        self.reply([PROTOCOL_NAME, PROTOCOL_VERSION, int(code), 0, 0, b"", self.server.last_zxid, False, message])
        self.close_after_flush()
        return False

    # ----------------------------------------------------------------- requests
    def _handle_frames(self, frames: list[bytes]) -> None:
        if not frames:
            return
        self.server.touch(self.session_id)
        for frame in frames:
            if self._closing:
                return
            self._handle(unpack(frame))

    def _handle(self, request: list[Any]) -> None:
        started = time.perf_counter()
        self.received += 1
        self.server.stats.packets_received += 1
        if len(request) < 2 or not isinstance(request[0], int) or not isinstance(request[1], int):
            self._answer_error(0, Err.BADARGUMENTS, "a request must be [xid, op, args...]", started)
            return
        xid, op, args = request[0], request[1], request[2:]
        self.last_cxid = xid
        if op in WRITE_OPS:
            self._write(xid, op, args, started)
        elif op == OpCode.SYNC:
            self._sync(xid, args, started)
        elif op in READ_HANDLERS or op in self._handlers:
            if self._slots:
                self._slots.append(_Slot(xid, op, args, started, False))
            else:
                self.reply(self._execute_read(xid, op, args, started))
        else:
            self._answer_error(xid, Err.UNIMPLEMENTED, f"unknown or unsupported op {op}", started)

    def _answer_error(self, xid: int, code: Err, message: str, started: float) -> None:
        values = [xid, self.server.last_zxid, int(code), message]
        if self._slots:
            slot = _Slot(xid, 0, [], started, True)
            slot.reply = values
            self._slots.append(slot)
        else:
            self.reply(values)

    def _execute_read(self, xid: int, op: int, args: list[Any], started: float) -> list[Any]:
        server = self.server
        self.last_op = _op_name(op)
        try:
            handler = self._handlers.get(op)
            if handler is not None:
                values = handler(args)
            else:
                values = READ_HANDLERS[op](server.tree, server.watches, self, args)
            reply = [xid, server.last_zxid, 0, *values]
        except ZabbyError as exc:
            reply = [xid, server.last_zxid, int(exc.code), str(exc)]
        except (TypeError, ValueError) as exc:
            reply = [xid, server.last_zxid, int(Err.BADARGUMENTS), f"bad arguments: {exc}"]
        self._finish(started, False)
        return reply

    def _finish(self, started: float, write: bool) -> None:
        elapsed = time.perf_counter() - started
        self.server.stats.record_request(elapsed, write)
        self.latency.add(elapsed * 1000)
        self.last_response_ms = int(time.time() * 1000)

    def _write(self, xid: int, op: int, args: list[Any], started: float) -> None:
        slot = _Slot(xid, op, args, started, True)
        self.last_op = _op_name(op)

        def done(txn: Txn, result: Any) -> None:
            if txn.type == OpCode.ERROR:
                slot.reply = [xid, txn.zxid, txn.body[0], txn.body[1] if len(txn.body) > 1 else ""]
            else:
                slot.reply = [xid, txn.zxid, 0, *_write_values(op, result)]
            self.last_zxid = txn.zxid
            self._finish(started, True)
            self._flush_slots()

        try:
            if op == OpCode.CLOSE_SESSION:
                self.server.close_session(self.session_id, xid, done)
            else:
                self.server.submit(op, tuple(args), self._caller, xid, done)
        except ZabbyError as exc:
            slot.reply = [xid, self.server.last_zxid, int(exc.code), str(exc)]
        except (TypeError, ValueError) as exc:
            slot.reply = [xid, self.server.last_zxid, int(Err.BADARGUMENTS), f"bad arguments: {exc}"]
        self._slots.append(slot)
        if slot.reply is not None:
            self._flush_slots()

    def _sync(self, xid: int, args: list[Any], started: float) -> None:
        """sync: answered once this server has everything the leader had committed when it asked."""
        slot = _Slot(xid, OpCode.SYNC, args, started, True)
        path = args[0] if args else None
        if not isinstance(path, str):
            self._answer_error(xid, Err.BADARGUMENTS, "sync takes a path", started)
            return

        def done() -> None:
            slot.reply = [xid, self.server.last_zxid, 0, path]
            self._finish(started, False)
            self._flush_slots()

        try:
            self.server.client_sync(self.session_id, xid, done)
        except ZabbyError as exc:
            slot.reply = [xid, self.server.last_zxid, int(exc.code), str(exc)]
        self._slots.append(slot)
        if slot.reply is not None:
            self._flush_slots()

    def _flush_slots(self) -> None:
        slots = self._slots
        while slots:
            head = slots[0]
            if head.write:
                if head.reply is None:
                    return
                self.reply(head.reply)
            else:
                self.reply(self._execute_read(head.xid, head.op, head.args, head.started))
            slots.popleft()

    # ----------------------------------------------------------------- session-level ops
    def send_event(self, event_type: int, path: str, zxid: int) -> None:
        self.reply([XID_NOTIFICATION, zxid, 0, int(event_type), int(KeeperState.SYNC_CONNECTED), path])

    def _auth(self, args: list[Any]) -> list[Any]:
        scheme, credential = args
        if isinstance(credential, str):
            credential = credential.encode()
        try:
            auth_id = acls.authenticate(scheme, credential)
        except ZabbyError:
            self.server.stats.auth_failed_count += 1
            self._close_after_reply = True  # ZooKeeper answers AUTHFAILED, then closes
            raise
        if auth_id not in self.auth_ids:
            self.auth_ids.append(auth_id)
        if self.server.config.super_digest and auth_id[1] == self.server.config.super_digest:
            self.superuser = True
        self._caller = Caller(self.session_id, self.auth_ids, self.superuser)
        return []

    def _set_watches(self, args: list[Any]) -> list[Any]:
        relative_zxid, data, exist, child, persistent, recursive = args
        watches, tree = self.server.watches, self.server.tree
        missed = missed_events(tree, relative_zxid, data, exist, child)
        fired = {path for _, path in missed}
        for path in data:
            if path not in fired:
                watches.add_data(path, self)
        for path in exist:
            if path not in fired:
                watches.add_data(path, self)
        for path in child:
            if path not in fired:
                watches.add_child(path, self)
        for path in persistent:
            watches.add_persistent(path, self, recursive=False)
        for path in recursive:
            watches.add_persistent(path, self, recursive=True)
        for kind, path in missed:
            self.send_event(kind, path, tree.last_zxid)
        return []

    # ----------------------------------------------------------------- figures (cons, crst)
    def statistics(self) -> ConnectionStatistics:
        return ConnectionStatistics(
            address=self.address, session_id=self.session_id, timeout_ms=self.timeout_ms, established_ms=self.established_ms,
            outstanding_requests=len(self._slots), packets_received=self.received, packets_sent=self.sent,
            last_operation=self.last_op, last_cxid=self.last_cxid, last_zxid=self.last_zxid,
            last_response_ms=self.last_response_ms, latency=self.latency.statistics(),
        )  # fmt: skip

    def reset_statistics(self) -> None:
        self.latency.reset()
        self.received = self.sent = 0


def _write_values(op: int, result: Any) -> list[Any]:
    if op == OpCode.CREATE:
        return [result[0]]
    if op in (OpCode.CREATE2, OpCode.CREATE_CONTAINER, OpCode.CREATE_TTL):
        return [result[0], result[1]]
    if op in (OpCode.SET_DATA, OpCode.SET_ACL):
        return [result]
    if op == OpCode.MULTI:
        return [[[sub_type, err, _multi_value(sub_type, value)] for sub_type, err, value in result]]
    return []


def _multi_value(sub_type: int, value: Any) -> Any:
    if sub_type in (OpCode.CREATE, OpCode.CREATE2, OpCode.CREATE_CONTAINER, OpCode.CREATE_TTL):
        return [value[0], value[1]]
    if sub_type == OpCode.SET_DATA:
        return value
    return None


def _op_name(op: int) -> str:
    try:
        return OpCode(op).name
    except ValueError:
        return str(op)
