"""A client's session on this server, whatever protocol its connection speaks: the
handshake decision, ordered replies, reads, writes, sync, auth and setWatches.

Theory of operation: the connection (``zabby.server.clients.client_conn``) decodes frames with its
codec and hands each request, ``[xid, op, *args]``, to ``ClientSession.handle`` in arrival
order.  Writes go to the server's pipeline and leave a slot in ``_slots``; a read that
arrives while slots are waiting joins the queue and runs only when everything before it is
answered, so a session always reads its own writes and hears replies in request order.  A
read with nothing ahead of it runs at once (the fast path).  Every message leaves through
the ``SessionOutput`` as the msgpack protocol's values (docs/protocol.md), which the
connection encodes in its codec, in send order.

The session never awaits and does no I/O: what it waits for (a new session's txn, a
write's commit, a sync) comes back through the callbacks it hands the server.  It is the
``ClientSink`` the engine holds (a watcher, told of watch events, closed) and the ``Asker``
its reads are checked against.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence, Hashable
from typing import Any, Protocol

from zabby.config import ServerConfig
from zabby.engine.clients import ZXID_WAIT_MS_MAX
from zabby.engine.effects import ClientSink, ClientsKept, Done, SyncDone
from zabby.errors import Err, ZabbyError, shown
from zabby.opcodes import CREATE_OPS, WRITE_OPS, OpCode
from zabby.sasl import DigestMd5Server, SaslFailure
from zabby.server.process.sources import SessionSources, source_of
from zabby.server.clients.reads import READ_HANDLERS, missed_events, resume_watch
from zabby.server.adminport.statistics import ConnectionStatistics
from zabby.engine.stats import LatencyStat, ServerStats
from zabby.tree import acl as acls
from zabby.tree.datatree import DataTree
from zabby.tree.prep import Caller
from zabby.tree.txns import Txn
from zabby.tree.watches import Replayed, WatchHistory, WatchManager
from zabby.wire.codec import ConnectRequest, too_many_ops
from zabby.wire.messages import PROTOCOL_NAME, PROTOCOL_VERSION, XID_AUTH, XID_PING, XID_SET_WATCHES, connect_refusal

LOGGER = logging.getLogger("zabby.server.conn")

XID_MAX = 2**31 - 1  # a jute int: every client's xid counter stays below it
# A failed authentication (auth, a SASL step) is answered this late, then the connection
# closes: a password guesser gets a few tries a second per connection, and a kazoo client
# learns of the failure after it said CONNECTED (its start() then raises AuthFailedError, not
# a time-out: a race a fast server loses otherwise).
AUTH_FAILURE_DELAY_S = 0.2
REQUEST_OP_BYTES = 600  # what each op of a multi held in flight costs beside its bytes: its lists, its txn, its pending records
ZXID_WAIT_BYTES = 400  # a waitForZxid the server holds: its slot, its wait, its place in two heaps
AUTH_ID_BYTES = 160  # what a proved id costs beside its text: its tuple, strings and list slot
SPECIAL_XIDS = frozenset({XID_PING, XID_AUTH, XID_SET_WATCHES})  # repeat by design; never a write's
_MULTI_OPS = (OpCode.MULTI, OpCode.MULTI_READ)
# The members each write's answer is told apart by, as globals (see zabby.opcodes)
_ERROR, _CLOSE_SESSION, _CREATE, _SET_DATA, _MULTI = OpCode.ERROR, OpCode.CLOSE_SESSION, OpCode.CREATE, OpCode.SET_DATA, OpCode.MULTI
_PATH_AND_STAT = frozenset({OpCode.CREATE2, OpCode.CREATE_CONTAINER, OpCode.CREATE_TTL, OpCode.RECONFIG})
_STAT_ONLY = frozenset({OpCode.SET_DATA, OpCode.SET_ACL})

class SessionHost(Protocol):
    """The server as sessions and their connections use it: the engine's trio driver
    (``zabby.server.node.ZabbyServer``) provides it.

    Ordering: every ``done`` callback runs once the txn is applied to ``tree``, in zxid order;
    a callback may never come if the server stops serving, and then it closes every sink.
    """

    @property
    def config(self) -> ServerConfig: ...
    @property
    def stats(self) -> ServerStats: ...
    @property
    def last_zxid(self) -> int: ...
    @property
    def tree(self) -> DataTree: ...
    @property
    def watches(self) -> WatchManager: ...
    @property
    def history(self) -> WatchHistory:
        """The events of the last txns applied, for watches that resume from a zxid."""
        ...

    @property
    def serving(self) -> bool: ...
    @property
    def is_leader(self) -> bool: ...
    @property
    def standalone(self) -> bool: ...
    @property
    def outstanding(self) -> int:
        """Writes in flight (globalOutstandingLimit bounds them: see ``client_conn``)."""
        ...

    def submit(self, op: int, args: tuple[Any, ...], caller: Caller, cxid: int, done: Done) -> None:
        """A client write.  Raises: ZabbyError when it cannot be taken (not serving, disk full)."""
        ...

    def create_session(self, timeout_ms: int, done: Done) -> None: ...

    @property
    def session_sources(self) -> SessionSources:
        """The sessions this server made for each source (``maxSessionsPerHost``)."""
        ...
    def check_member(self) -> None:
        """Raises: ZabbyError NOTREADONLY on a learner the ensemble does not count as a
        member (it serves no session: the leader would take none of its writes)."""
        ...

    @property
    def read_only(self) -> bool:
        """Read-only mode: cut off from a quorum, serving reads to clients that accept it."""
        ...

    def create_local_session(self, timeout_ms: int) -> tuple[int, bytes]:
        """Read-only mode: (session id, password) of a session of this server alone."""
        ...

    def close_session(self, session_id: int, cxid: int, done: Done) -> None: ...
    def client_sync(self, session_id: int, cxid: int, done: SyncDone) -> None: ...
    def wait_for_zxid(self, owner: Hashable, zxid: int, timeout_ms: int, done: Callable[[bool], None]) -> None:
        """``done(True)`` once the tree has applied ``zxid``, ``done(False)`` at the (capped)
        timeout; never if ``owner`` detaches first.  Raises: ZabbyError THROTTLEDOP."""
        ...

    def negotiate_timeout(self, requested_ms: int) -> int: ...
    def check_session(self, session_id: int, password: bytes) -> int | None:
        """The session's timeout if (id, password) names a live session, else None."""
        ...

    def touch(self, session_id: int) -> None: ...
    def attach(self, session_id: int, sink: ClientSink) -> None:
        """``sink`` now holds the session: an earlier holder is closed."""
        ...

    def detach(self, sink: ClientSink) -> None:
        """The connection ended: forget the sink and its watches."""
        ...

    def secret_attempt(self, source: str) -> bool:
        """Whether ``source`` may try a secret now (``zabby.server.clients.throttle``): False, refuse
        it without looking at it."""
        ...

    def warn_rate_limited(self, kind: str, message: str) -> None:
        """Log a warning that a flood of clients could repeat (at most one line a second per kind)."""
        ...


class SessionOutput(Protocol):
    """Where a session's messages go: its connection."""

    def send(self, message: list[Any]) -> None:
        """Queue one message, given as the msgpack protocol's values, in the connection's codec."""
        ...

    def send_events(self, zxid: int, events: list[tuple[int, str]]) -> None:
        """Queue watch events ``(type, path)``, in order, at once."""
        ...

    def send_replay(self, xid: int, events: list[Replayed]) -> None:
        """Queue a watch's history ``(zxid, type, path)``, in order, at once: events addressed to
        the addWatch request ``xid`` (its watch alone hears them)."""
        ...

    def session_started(self) -> None:
        """The handshake succeeded: the connection may hand over requests."""
        ...

    def close_after_flush(self, delay_s: float = 0.0) -> None:
        """Close once what is queued is sent, ``delay_s`` after the last of it was queued."""
        ...

    def hold_state(self, delta: int) -> None:
        """The session's state on this server (its ids, watches, zxid waits) holds ``delta``
        bytes more (or fewer): charged to the client memory budget, never a reason to stop
        reading (it does not drain as replies do)."""
        ...

    def requests_answered(self) -> None:
        """Requests left the session's queue (``in_flight`` and ``request_bytes`` fell)."""
        ...


class _Slot:
    __slots__ = ("xid", "op", "args", "reply", "started", "write", "size", "ops")

    def __init__(self, xid: int, op: int, args: list[Any], started: float, write: bool, size: int = 0) -> None:
        self.ops = ops = ops_of(op, args)  # what it weighs in flight
        # what it holds: its frame, and what its ops became once decoded and prepared
        if ops > 1:
            size += (ops - 1) * REQUEST_OP_BYTES
        self.xid, self.op, self.args, self.started, self.write, self.size = xid, op, args, started, write, size
        self.reply: list[Any] | None = None  # the reply's values, encoded when sent


def ops_of(op: int, args: Sequence[Any]) -> int:
    """What a request weighs among the requests in flight: a multi or multiRead its ops (a
    multi of 5,000 setData is 5,000 writes' work, applied in one go), any other one."""
    if op in _MULTI_OPS and args and isinstance(args[0], (list, tuple)):
        return max(1, len(args[0]))
    return 1


class ClientSession:
    """One connection's session (a ``ClientSink`` and an ``Asker``); ``session_id`` is 0 until
    the handshake."""

    def __init__(self, host: SessionHost, output: SessionOutput, address: tuple[str, int]) -> None:
        self.host = host
        self.output = output
        self._send = output.send
        self.address = address
        self._source = ""  # source_of(address), once it asks for a new session (maxSessionsPerHost)
        self.session_id = 0
        self.password = b""
        self.timeout_ms = 0
        self.read_only = False  # a read-only session (the server was cut off from a quorum when it began)
        self.held = False  # idle when the server stopped serving: kept open through the election (``kept``)
        self.auth_ids: list[acls.AuthId] = [("ip", address[0])]
        self.superuser = host.config.skip_acl  # skipACL: no ACL is checked for anyone
        self.reply_bytes_max = host.config.connection_memory_bytes_max // 2  # a larger read is refused (see reads)
        self.established_ms = int(time.time() * 1000)
        self.received = 0
        self.sent = 0  # frames queued to the client, counted by the output as it queues them
        self.last_op: int | None = None  # its name only when asked: cons, the console
        self.last_cxid = self.last_zxid = 0
        self.last_response_ms = 0
        self.latency = LatencyStat()
        self._caller = Caller(0, self.auth_ids)
        self._slots: deque[_Slot] = deque()
        # Requests taken and not yet answered (writes, and the reads queued behind them), each
        # weighing its ops (``ops_of``): the ops of ``_slots``, read before every request taken.
        self.in_flight = 0
        self._state_delta = 0  # watch bytes added or gone, not charged yet (``hold_state``)
        self.request_bytes = 0  # the frames of the requests in ``_slots``, held until answered
        self._broken = False  # it broke the protocol: it is closed once what it asked before is answered
        self._close_after_reply = False  # the next read's reply is the last (a failed auth)
        self._handlers: dict[int, Callable[[list[Any]], list[Any]]] = {
            OpCode.PING: lambda args: [],
            OpCode.AUTH: self._auth,
            OpCode.SASL: self._sasl,
            OpCode.SET_WATCHES: self._set_watches,
            OpCode.ADD_WATCH: self._add_watch,
        }
        self._replay: list[Replayed] = []  # a resumed watch's history, sent right after its reply
        self._sasl_exchange: DigestMd5Server | None = None

    # ----------------------------------------------------------------- handshake
    def connect(self, request: ConnectRequest) -> bool:
        """Decide on a connection's connect request.

        Returns:
          False if refused: the answer is queued and the connection closes after it.  True if
          the session starts, at once (re-attach) or once the server has created it; then
          the connect response is queued and the output hears ``session_started``.
        """
        host = self.host
        self.received += 1  # the connect request is a packet received, as ZooKeeper counts them
        host.stats.packets_received += 1
        if not host.serving:
            if host.read_only and request.read_only:
                return self._connect_read_only(request)
            return self._refuse(Err.CONNECTIONLOSS, "This ZooKeeper instance is not currently serving requests")
        if host.is_leader and not host.standalone and not host.config.leader_serves:
            return self._refuse(Err.CONNECTIONLOSS, "the leader does not serve clients (leaderServes=no)")
        if request.last_zxid_seen > host.last_zxid:
            return self._refuse(Err.CONNECTIONLOSS, f"server is behind the client (0x{host.last_zxid:x} < 0x{request.last_zxid_seen:x})")
        try:
            host.check_member()  # a session new or re-attaching: the leader takes no write through a non-member
            if request.session_id == 0:
                self._source = source_of(self.address[0])
                if not host.session_sources.admit(self._source):
                    return self._refuse(Err.THROTTLEDOP, f"{host.session_sources.per_source_max} sessions made here for {self._source} "
                                                         f"are open, the most maxSessionsPerHost allows", rate_limited=True)  # fmt: skip
                host.create_session(host.negotiate_timeout(request.timeout_ms), self._session_created)
                return True
        except ZabbyError as exc:  # or stopped serving since the check above (a reconfig, a leader stepping down)
            return self._refuse(exc.code, str(exc))
        known_timeout = host.check_session(request.session_id, request.password)
        if known_timeout is None:
            return self._refuse(Err.SESSIONEXPIRED, f"session 0x{request.session_id:x} has expired or is unknown")
        self._start_session(request.session_id, request.password, known_timeout)
        return True

    def _connect_read_only(self, request: ConnectRequest) -> bool:
        """Read-only mode: a client that accepts it reads here, in its own session if this
        server knows it, else in a session local to this server."""
        host = self.host
        if request.session_id:
            known_timeout = host.check_session(request.session_id, request.password)
            if known_timeout is None:
                return self._refuse(Err.SESSIONEXPIRED, f"session 0x{request.session_id:x} has expired or is unknown")
            self._start_session(request.session_id, request.password, known_timeout, read_only=True)
            return True
        session_id, password = host.create_local_session(host.negotiate_timeout(request.timeout_ms))
        self._start_session(session_id, password, host.negotiate_timeout(request.timeout_ms), read_only=True)
        return True

    def _session_created(self, txn: Txn, result: Any) -> None:
        if txn.type == OpCode.ERROR:  # the leader refused it (maxSessions): a flood of them is one line a second
            self._refuse(int(txn.body[0]), str(txn.body[1]) if len(txn.body) > 1 else "", rate_limited=True)
            return
        timeout_ms, password = txn.body
        self.host.session_sources.created(self._source, txn.session_id)
        self._start_session(txn.session_id, password, timeout_ms)

    def _start_session(self, session_id: int, password: bytes, timeout_ms: int, *, read_only: bool = False) -> None:
        self.session_id, self.password, self.timeout_ms, self.read_only = session_id, password, timeout_ms, read_only
        self._caller = Caller(session_id, self.auth_ids, self.superuser)
        self.host.attach(session_id, self)
        self.host.touch(session_id)
        self._send([PROTOCOL_NAME, PROTOCOL_VERSION, 0, timeout_ms, session_id, password, self.host.last_zxid, read_only, ""])
        self.output.session_started()

    def _refuse(self, code: int, message: str, *, rate_limited: bool = False) -> bool:
        if rate_limited:
            self.host.warn_rate_limited("session", f"refusing {self.address[0]}:{self.address[1]}: {message}")
        else:
            LOGGER.info("refusing %s:%d: %s", *self.address, message)
        self._send(connect_refusal(int(code), self.host.last_zxid, message))
        self.output.close_after_flush()
        return False

    def kept(self, keep: ClientsKept) -> bool:
        """Whether the connection stays open when its server closes its clients (see
        ``zabby.engine.engine.Engine._stop_serving``).  ``ClientsKept.IDLE`` holds it if it has a
        read-write session and no request unanswered (an answer it waits for would never come)."""
        if keep is ClientsKept.IDLE:
            self.held = bool(self.session_id) and not self.read_only and not self._slots and not self._broken
        elif keep is ClientsKept.UNHELD:
            return not self.held
        return keep is not ClientsKept.NONE and self.held

    def _left_unserved(self, op: int, refused: ZabbyError) -> bool:
        """A write or sync refused on a read-write session because the server does not serve
        (it was held through an election, or it stopped in the Ready being carried out): the
        connection closes, unanswered, as ZooKeeper's would have been, and the client asks a
        server that serves."""
        if refused.code != Err.CONNECTIONLOSS and (self.host.serving or self.read_only):
            return False
        LOGGER.info("closing %s:%d (session 0x%x): op %d while this server does not serve", *self.address, self.session_id, op)
        self._broken = True
        self.output.close_after_flush()
        return True

    # ----------------------------------------------------------------- requests
    def touch(self) -> None:
        """The client was heard from: its session lives on."""
        self.host.touch(self.session_id)

    def _hold(self, slot: _Slot) -> None:
        self._slots.append(slot)
        self.in_flight += slot.ops

    def handle(self, request: list[Any], size: int = 0) -> None:
        """One decoded request, ``[xid, op, *args]``, in arrival order; ``size``: its frame's bytes.
        The watches a read added are charged once it is answered (a request refused on the
        way adds none)."""
        if self._broken:
            return
        started = time.perf_counter()
        self.received += 1
        self.host.stats.packets_received += 1
        if len(request) < 2 or not isinstance(request[0], int) or not isinstance(request[1], int):
            second_connect = bool(request) and request[0] == PROTOCOL_NAME
            self._break_protocol(0, "a second connect request on a connection" if second_connect else "a request must be [xid, op, args...]")
            return
        xid, op, args = request[0], request[1], request[2:]
        self.last_cxid = xid
        if not (0 <= xid <= XID_MAX or self._xid_allowed(xid, op)):
            return
        if self.host.config.enforce_auth_schemes and op not in (OpCode.AUTH, OpCode.SASL) and not self._authenticated():
            self._break_protocol(xid, f"authentication by {', '.join(sorted(self.host.config.enforce_auth_schemes))} is required "
                                      "(enforce.auth.schemes) before any other request", Err.SESSIONCLOSEDREQUIRESASLAUTH)  # fmt: skip
            return
        if op in _MULTI_OPS and args and isinstance(args[0], list) and len(args[0]) > self.host.config.request_ops_max:
            self._answer_error(xid, Err.BADARGUMENTS, too_many_ops(op, self.host.config.request_ops_max), started)
            return
        if op in WRITE_OPS:
            self._write(xid, op, args, started, size)
        elif op == OpCode.SYNC:
            self._sync(xid, args, started)
        elif op == OpCode.WAIT_FOR_ZXID:
            self._wait_for_zxid(xid, args, started)
        elif op in READ_HANDLERS or op in self._handlers:
            if self._slots:
                self._hold(_Slot(xid, op, args, started, False))
            else:
                self._answer_read(xid, op, args, started)
        else:
            self._answer_error(xid, Err.UNIMPLEMENTED, f"unknown or unsupported op {op}", started)
        if self._state_delta:
            self._settle_state()

    def refuse(self, xid: int, code: Err, message: str) -> None:
        """A request the codec refused before reading it whole: answered in its turn."""
        if self._broken:
            return
        started = time.perf_counter()
        self.received += 1
        self.host.stats.packets_received += 1
        if not (0 <= xid <= XID_MAX or self._xid_allowed(xid, 0)):
            return
        self._answer_error(xid, code, message, started)

    def _xid_allowed(self, xid: int, op: int) -> bool:
        """An xid outside 0..2^31-1: allowed only as a special one (ping, auth, setWatches) on
        an op that is no write.  Anything else breaks the protocol: the connection is refused
        (see ``_break_protocol``).

        An ordinary xid need not be greater than the last, nor new: node-zookeeper-client and
        aiozk start at 0, go-zookeeper and the C client's threaded adaptor take an xid before
        they queue the request (two threads may send theirs in the other order), and every
        counter wraps.  The server answers in arrival order whatever the xids, and a write's
        answer waits under (session, xid) in a queue per key (``engine.clients.Waiters``), so
        a repeated xid cannot take another request's answer."""
        if xid in SPECIAL_XIDS and op not in WRITE_OPS and op != OpCode.SYNC:
            return True
        if not -(2**31) <= xid <= XID_MAX:
            reason = f"xid {xid} is not a 32-bit int"
        else:
            reason = f"xid {xid} is negative and not a special one ({sorted(SPECIAL_XIDS)}) for a request that is no write"
        self._break_protocol(xid if -(2**31) <= xid <= XID_MAX else 0, reason)
        return False

    def _break_protocol(self, xid: int, reason: str, code: Err = Err.BADARGUMENTS) -> None:
        """The client broke the protocol's rules: it is told why (``code``, in its turn),
        nothing it sends from now on is taken, and the connection closes once the requests
        before it are answered.  One log line (rate-limited: a flood of them is a count)."""
        self.host.warn_rate_limited("protocol", f"closing {self.address[0]}:{self.address[1]} (session 0x{self.session_id:x}): {reason}")
        self.host.stats.connection_drop_count += 1
        self._broken = True
        self._answer_error(xid, code, reason, time.perf_counter())
        if not self._slots:
            self.output.close_after_flush()

    def _answer_error(self, xid: int, code: Err, message: str, started: float) -> None:
        values = [xid, self.host.last_zxid, int(code), message]
        if self._slots:
            slot = _Slot(xid, 0, [], started, True)
            slot.reply = values
            self._hold(slot)
        else:
            self._send(values)

    def _answer_read(self, xid: int, op: int, args: list[Any], started: float) -> None:
        host = self.host
        self.last_op = op
        try:
            handler = self._handlers.get(op)
            if handler is not None:
                values = handler(args)
            else:
                values = READ_HANDLERS[op](host.tree, host.watches, self, args)
            reply = [xid, host.last_zxid, 0, *values]
        except ZabbyError as exc:
            reply = [xid, host.last_zxid, int(exc.code), str(exc), *exc.reply_values]
        except (TypeError, ValueError) as exc:
            reply = [xid, host.last_zxid, int(Err.BADARGUMENTS), f"bad arguments: {exc}"]
        self._finish(started, False)
        self._send(reply)
        if self._replay:
            replay, self._replay = self._replay, []
            self.output.send_replay(xid, replay)
        if self._close_after_reply:  # a failed auth or SASL step: answered late, then closed
            self.output.close_after_flush(AUTH_FAILURE_DELAY_S)

    def _finish(self, started: float, write: bool) -> None:
        elapsed = time.perf_counter() - started
        self.host.stats.record_request(elapsed, write)
        self.latency.add(elapsed * 1000)
        self.last_response_ms = int(time.time() * 1000)

    def _write(self, xid: int, op: int, args: list[Any], started: float, size: int) -> None:
        slot = _Slot(xid, op, args, started, True, size)
        self.last_op = op

        def done(txn: Txn, result: Any) -> None:
            if txn.type == _ERROR:
                slot.reply = [xid, txn.zxid, txn.body[0], txn.body[1] if len(txn.body) > 1 else ""]
            else:
                try:
                    slot.reply = [xid, txn.zxid, 0, *_write_values(op, result)]
                except (TypeError, ValueError, IndexError):  # a txn that is not this write's answer
                    slot.reply = [xid, txn.zxid, int(Err.SYSTEMERROR), f"the answer to op {op} does not fit it"]
            self.last_zxid = txn.zxid
            self._finish(started, True)
            self._flush_slots()

        try:
            if op == _CLOSE_SESSION:
                self.host.close_session(self.session_id, xid, done)
            else:
                self.host.submit(op, tuple(args), self._caller, xid, done)
        except ZabbyError as exc:
            if self._left_unserved(op, exc):
                return
            slot.reply = [xid, self.host.last_zxid, int(exc.code), str(exc)]
        except (TypeError, ValueError) as exc:
            slot.reply = [xid, self.host.last_zxid, int(Err.BADARGUMENTS), f"bad arguments: {exc}"]
        self._hold(slot)
        self.request_bytes += slot.size
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
            slot.reply = [xid, self.host.last_zxid, 0, path]
            self._finish(started, False)
            self._flush_slots()

        try:
            self.host.client_sync(self.session_id, xid, done)
        except ZabbyError as exc:
            if self._left_unserved(OpCode.SYNC, exc):
                return
            slot.reply = [xid, self.host.last_zxid, int(exc.code), str(exc)]
        self._hold(slot)
        if slot.reply is not None:
            self._flush_slots()

    def _wait_for_zxid(self, xid: int, args: list[Any], started: float) -> None:
        """waitForZxid (zabby's extension): answered, with the zxid this server has applied,
        once that is at least the one asked for; OPERATIONTIMEOUT after the timeout asked
        (capped by the server).  Requests after it wait their turn, as behind a sync: a read
        that follows it sees the state of that zxid."""
        if len(args) != 2 or not all(isinstance(arg, int) and not isinstance(arg, bool) for arg in args) or min(args) < 0:
            self._answer_error(xid, Err.BADARGUMENTS, f"waitForZxid takes a zxid and a timeout in ms (ints of 0 or more), not {shown(args)}", started)
            return
        zxid, timeout_ms = args
        slot = _Slot(xid, OpCode.WAIT_FOR_ZXID, args, started, True)
        self.last_op = OpCode.WAIT_FOR_ZXID
        waiting = False  # it is in the server's waits, charged to this connection

        def done(applied: bool) -> None:
            if waiting:
                self.output.hold_state(-ZXID_WAIT_BYTES)
            last_zxid = self.host.last_zxid
            if applied:
                slot.reply = [xid, last_zxid, 0, last_zxid]
            else:
                slot.reply = [xid, last_zxid, int(Err.OPERATIONTIMEOUT), f"this server has applied up to 0x{last_zxid:x}, not yet 0x{zxid:x}, "
                              f"after {min(timeout_ms, ZXID_WAIT_MS_MAX)} ms"]  # fmt: skip
            self._finish(started, False)
            self._flush_slots()

        self._hold(slot)
        try:
            self.host.wait_for_zxid(self, zxid, timeout_ms, done)
            if slot.reply is None:  # not answered at once: it waits
                waiting = True
                self.output.hold_state(ZXID_WAIT_BYTES)
        except ZabbyError as exc:
            slot.reply = [xid, self.host.last_zxid, int(exc.code), str(exc)]
            self._flush_slots()

    def _flush_slots(self) -> None:
        slots = self._slots
        answered = False
        while slots:
            head = slots[0]
            if head.write:
                if head.reply is None:
                    break
                self._send(head.reply)
            else:
                self._answer_read(head.xid, head.op, head.args, head.started)
            slots.popleft()
            self.in_flight -= head.ops
            self.request_bytes -= head.size
            answered = True
        if self._state_delta:  # reads answered in their turn add watches too
            self._settle_state()
        if answered:
            self.output.requests_answered()
            if self._broken and not slots:
                self.output.close_after_flush()

    # ----------------------------------------------------------------- the sink the engine holds
    def send_events(self, zxid: int, events: list[tuple[int, str]]) -> None:
        if self._state_delta:  # the one-shot watches that fired for them went
            self._settle_state()
        self.output.send_events(zxid, events)

    def close_after_flush(self) -> None:
        self.output.close_after_flush()

    def hold_state(self, delta: int) -> None:
        """A watch of this session's was added (or went): charged to its connection once the
        request (or the event) that did it is done (``_settle_state``), in one sum: a
        setWatches of 20,000 paths is one charge, not 20,000."""
        self._state_delta += delta

    def _settle_state(self) -> None:
        delta, self._state_delta = self._state_delta, 0
        self.output.hold_state(delta)

    # ----------------------------------------------------------------- session-level ops
    def _auth(self, args: list[Any]) -> list[Any]:
        if len(args) != 2:
            raise ZabbyError(Err.BADARGUMENTS, f"auth takes a scheme and a credential, not {len(args)} arguments")
        scheme, credential = args
        if isinstance(credential, str):
            credential = credential.encode()
        try:
            if not isinstance(scheme, str) or not isinstance(credential, bytes):
                raise ZabbyError(Err.AUTHFAILED, f"auth takes a scheme (a string) and a credential (bytes), not {_type_names(scheme, credential)}")
            auth_id = acls.authenticate(scheme, credential)
        except ZabbyError:
            self.host.stats.auth_failed_count += 1
            self._close_after_reply = True  # ZooKeeper answers AUTHFAILED, then closes
            raise
        if self._prove(auth_id) and self.host.config.super_digest and auth_id[1] == self.host.config.super_digest:
            self.superuser = True
            self._caller = Caller(self.session_id, self.auth_ids, self.superuser)
        return []

    def _prove(self, auth_id: acls.AuthId) -> bool:
        """Add an id the session proved; False if it held it already.  At most ``maxAuthIds``
        (beside its ip): past them the request is refused as a failed auth (AUTHFAILED, then
        the connection closes), so no session makes every ``auth`` ACL it sets, nor every
        check of its requests, as long as it likes.  Each id's bytes are charged to the budget.

        Raises:
            ZabbyError: AUTHFAILED at the bound.
        """
        if auth_id in self.auth_ids:
            return False
        limit = self.host.config.auth_ids_max
        if len(self.auth_ids) > limit:  # the ip id is not counted
            self.host.stats.auth_failed_count += 1
            self._close_after_reply = True
            raise ZabbyError(Err.AUTHFAILED, f"a session proves at most {limit} ids (maxAuthIds)")
        self.auth_ids.append(auth_id)
        self.output.hold_state(AUTH_ID_BYTES + len(auth_id[1]))
        self._caller = Caller(self.session_id, self.auth_ids, self.superuser)
        return True

    def _add_watch(self, args: list[Any]) -> list[Any]:
        """addWatch; with a third argument, ``since_zxid`` (zabby's msgpack extension), the
        watch's history follows the reply (see ``reads.resume_watch``)."""
        host = self.host
        if len(args) == 3 and args[2] is not None:
            self._replay = resume_watch(host.tree, host.watches, host.history, self, args)
            return []
        return READ_HANDLERS[OpCode.ADD_WATCH](host.tree, host.watches, self, args[:2] if len(args) == 3 else args)

    def _authenticated(self) -> bool:
        """Holds an id of a scheme enforce.auth.schemes names (superDigest's counts as digest)."""
        schemes = self.host.config.enforce_auth_schemes
        return any(scheme in schemes for scheme, _ in self.auth_ids)

    def _sasl(self, args: list[Any]) -> list[Any]:
        """One step of a DIGEST-MD5 exchange (zabby.sasl): the token to answer with.  A
        failure is AUTHFAILED, and the connection closes after it, as ZooKeeper drops it."""
        users = self.host.config.sasl_users
        try:
            if users is None:
                raise SaslFailure("SASL is not configured on this server (sasl.jaasConfig)")
            if len(args) != 1 or not isinstance(args[0], bytes):
                raise SaslFailure(f"a SASL request carries one token (bytes), not {_type_names(*args)}")
            if self._sasl_exchange is None:
                self._sasl_exchange = DigestMd5Server(users)
            elif self._sasl_exchange.challenged and not self.host.secret_attempt(self.address[0]):
                self.host.stats.auth_throttled_count += 1
                raise SaslFailure(f"too many attempts from {self.address[0]}: at most a few a second from one address (unread)")
            token = self._sasl_exchange.step(args[0])
        except SaslFailure as exc:
            self.host.stats.auth_failed_count += 1
            self._close_after_reply = True
            self.host.warn_rate_limited("auth", f"SASL authentication of {self.address[0]}:{self.address[1]} failed: {exc}")
            # as ZooKeeper: where SASL is required, the failure says so (SESSIONCLOSEDREQUIRESASLAUTH)
            code = Err.SESSIONCLOSEDREQUIRESASLAUTH if "sasl" in self.host.config.enforce_auth_schemes else Err.AUTHFAILED
            raise ZabbyError(code, f"SASL authentication failed: {exc}") from None
        user = self._sasl_exchange.user
        if user is not None and self._prove(("sasl", user)) and user == self.host.config.sasl_super_user:
            self.superuser = True
            self._caller = Caller(self.session_id, self.auth_ids, self.superuser)
        return [token]

    def _set_watches(self, args: list[Any]) -> list[Any]:
        relative_zxid, data, exist, child, persistent, recursive = _watch_lists(args)
        watches, tree = self.host.watches, self.host.tree
        missed, fired_data, fired_child = missed_events(tree, self, relative_zxid, data, exist, child)
        for path in data:
            if path not in fired_data:
                watches.add_data(path, self)
        for path in exist:
            if path not in fired_data:
                watches.add_data(path, self)
        for path in child:
            if path not in fired_child:
                watches.add_child(path, self)
        for path in persistent:
            watches.add_persistent(path, self, recursive=False)
        for path in recursive:
            watches.add_persistent(path, self, recursive=True)
        if missed:
            self.output.send_events(tree.last_zxid, missed)
        return []

    # ----------------------------------------------------------------- figures (cons, crst)
    def statistics(self) -> ConnectionStatistics:
        return ConnectionStatistics(
            address=self.address, session_id=self.session_id, timeout_ms=self.timeout_ms, established_ms=self.established_ms,
            outstanding_requests=len(self._slots), packets_received=self.received, packets_sent=self.sent,
            last_operation="NA" if self.last_op is None else _op_name(self.last_op), last_cxid=self.last_cxid, last_zxid=self.last_zxid,
            last_response_ms=self.last_response_ms, latency=self.latency.statistics(),
        )  # fmt: skip

    def reset_statistics(self) -> None:
        self.latency.reset()
        self.received = self.sent = 0


def _watch_lists(args: list[Any]) -> tuple[int, list[str], list[str], list[str], list[str], list[str]]:
    """setWatches' arguments, checked: a zxid and five lists of paths.
    Raises: ZabbyError BADARGUMENTS, saying what is wrong."""
    if len(args) != 6:
        raise ZabbyError(Err.BADARGUMENTS, f"setWatches takes a zxid and five lists of paths, not {len(args)} arguments")
    relative_zxid, *lists = args
    if not isinstance(relative_zxid, int) or isinstance(relative_zxid, bool):
        raise ZabbyError(Err.BADARGUMENTS, f"setWatches' zxid must be an int, not {type(relative_zxid).__name__}")
    for paths in lists:
        if not isinstance(paths, list) or not all(isinstance(path, str) for path in paths):
            raise ZabbyError(Err.BADARGUMENTS, "setWatches' watches must be lists of paths (strings)")
    return relative_zxid, *lists


def _type_names(*values: Any) -> str:
    return ", ".join(type(value).__name__ for value in values)


def _write_values(op: int, result: Any) -> list[Any]:
    if op == _CREATE:
        return [result[0]]
    if op in _STAT_ONLY:
        return [result]
    if op in _PATH_AND_STAT:
        return [result[0], result[1]]  # a reconfig: the new configuration's data and stat
    if op == _MULTI:
        return [[[sub_type, err, _multi_value(sub_type, value)] for sub_type, err, value in result]]
    return []


def _multi_value(sub_type: int, value: Any) -> Any:
    if sub_type in CREATE_OPS:
        return [value[0], value[1]]
    if sub_type == _SET_DATA:
        return value
    return None


_OP_NAMES = {int(op): op.name for op in OpCode}  # looked up per request: OpCode(op) costs an enum call


def _op_name(op: int) -> str:
    return _OP_NAMES.get(op) or str(op)
