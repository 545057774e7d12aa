"""Amplification attacks on the client port: small requests that made the server do or keep far
more than they cost the attacker (issue 56).  Each is a blocking function of the server's
address and its sizes, bounded in count and time, that returns an ``Outcome`` as the attacks of
``harness.jepsen.hostile`` do; ``ATTACKS`` names them for the hostile script, the fault harness's
``clients`` nemesis and the generative adversary (``harness.jepsen.adversary``), which draws their
sizes.  docs/resource-model.md gives the bound each one meets.

They speak zabby's msgpack protocol (its ops are ZooKeeper's, and waitForZxid and addWatch with
``since_zxid`` exist only there), on connections of their own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from harness.jepsen.hostile import Address, Outcome, _connect, _timed
from zabby.opcodes import OpCode
from zabby.wire.framing import FrameDecoder
from zabby.wire.messages import connect_request, pack_frame, unpack

import msgpack

OPEN_ACL = [[31, "world", "anyone"]]
AUTH_ACL = [[31, "auth", ""]]
FRAME_BYTES_MAX = 0xFFFFF - 1024  # what a request may carry under jute.maxbuffer's default
REPLY_BYTES_MAX = 64 * 2**20
WAIT_S = 10.0  # the most an attack waits for one answer


class Session:
    """One raw msgpack session (blocking): requests pipelined with ``send``, replies read in
    order with ``answer`` (watch events are skipped)."""

    def __init__(self, address: Address, outcome: Outcome, *, timeout_ms: int = 10_000, handshake: bool = True) -> None:
        """Connect and ask for a session; ``handshake``: wait for it (else call ``handshake``,
        after asking on other connections too)."""
        self.sock = _connect(address)
        self.outcome = outcome
        self.decoder = FrameDecoder(REPLY_BYTES_MAX)
        self.frames: list[bytes] = []
        self.xid = 0
        self.sock.sendall(pack_frame(connect_request(0, timeout_ms, 0, b"", False)))
        if handshake:
            self.handshake()

    def handshake(self) -> None:
        """The server's answer to the connect, counted. Raises: ConnectionError if refused."""
        answer = self._frame()
        if answer[2]:
            raise ConnectionError(f"the server refused the session: {answer[2]}")
        self.outcome.connections += 1

    def _frame(self) -> list[Any]:
        self.sock.settimeout(WAIT_S)
        while not self.frames:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("the server closed the connection")
            self.frames.extend(self.decoder.receive_data(data))
        return unpack(self.frames.pop(0))

    def send(self, op: int, *args: Any, xid: int | None = None) -> int:
        if xid is None:
            self.xid += 1
            xid = self.xid
        self.sock.sendall(pack_frame([xid, op, *args]))
        return xid

    def answer(self) -> list[Any]:
        """The next reply (not an event), counted in the outcome with its error."""
        while True:
            reply = self._frame()
            if reply[0] != -1:
                self.outcome.replies += 1
                if reply[2]:
                    self.outcome.error(reply[2])
                return reply

    def call(self, op: int, *args: Any, xid: int | None = None) -> list[Any]:
        self.send(op, *args, xid=xid)
        return self.answer()

    def answers(self, count: int) -> None:
        """Read ``count`` replies; a closed connection is counted and ends the reading."""
        try:
            for _ in range(count):
                self.answer()
        except (ConnectionError, OSError):
            self.outcome.closed_by_server += 1

    def pipeline(self, op: int, requests: list[tuple[Any, ...]], xid: int | None = None) -> None:
        """Each of ``requests`` (its arguments) sent at once, then their answers read."""
        for args in requests:
            self.send(op, *args, xid=xid)
        self.answers(len(requests))

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _attack(name: str, body: Callable[[Outcome], None]) -> Outcome:
    """``body`` run as a timed attack; a connection the server refuses or closes is counted."""

    def guarded(outcome: Outcome) -> None:
        try:
            body(outcome)
        except (ConnectionError, OSError, msgpack.ExtraData, ValueError):
            outcome.closed_by_server += 1

    return _timed(name, guarded)


def _ensure(session: Session, path: str) -> None:
    session.call(OpCode.CREATE, path, b"", OPEN_ACL, 0, 0)  # NODEEXISTS is fine


def _batches(ops: list[list[Any]]) -> list[list[list[Any]]]:
    """``ops`` cut into multis that each fit a request frame (and maxRequestOps)."""
    out: list[list[list[Any]]] = [[]]
    size = 0
    for op in ops:
        op_bytes = len(msgpack.packb(op)) + 8
        if out[-1] and (size + op_bytes > FRAME_BYTES_MAX or len(out[-1]) >= 5_000):
            out.append([])
            size = 0
        out[-1].append(op)
        size += op_bytes
    return out


# ----------------------------------------------------------------------------- the attacks
def auth_expansion(address: Address, ids: int = 1_200, creates: int = 5_000) -> Outcome:
    """``ids`` made-up digest ids, then ``creates`` creates with the ACL ``auth`` in multis:
    each create's ACL became every id of the session (a 135 KB request, a 270 MiB txn)."""

    def body(outcome: Outcome) -> None:
        with Session(address, outcome) as session:
            session.pipeline(OpCode.AUTH, [("digest", f"u{n}:p{n}".encode()) for n in range(ids)], xid=-4)
            _ensure(session, "/amp-auth")
            batches = _batches([[OpCode.CREATE, f"/amp-auth/{time.monotonic_ns()}-{n}", b"", AUTH_ACL, 0, 0] for n in range(creates)])
            session.pipeline(OpCode.MULTI, [(ops,) for ops in batches])

    return _attack("auth-expansion", body)


def auth_flood(address: Address, count: int = 20_000) -> Outcome:
    """``count`` made-up ``addauth digest`` on one connection: each was searched for in a list."""

    def body(outcome: Outcome) -> None:
        with Session(address, outcome) as session:
            session.pipeline(OpCode.AUTH, [("digest", f"flood{n}:p".encode()) for n in range(count)], xid=-4)

    return _attack("auth-flood", body)


def quota_measures(address: Address, nodes: int = 2_000, measures: int = 2_000) -> Outcome:
    """A subtree of ``nodes`` znodes, then multis that create and delete its quota stats node
    ``measures`` times: each create measured the whole subtree in every member's apply."""

    def body(outcome: Outcome) -> None:
        with Session(address, outcome) as session:
            _ensure(session, "/amp-quota")
            session.pipeline(OpCode.MULTI, [(ops,) for ops in _batches([[OpCode.CREATE, f"/amp-quota/n{n}", b"", OPEN_ACL, 0, 0] for n in range(nodes)])])
            _ensure(session, "/zookeeper/quota/amp-quota")
            stats = "/zookeeper/quota/amp-quota/zookeeper_stats"
            churn = [op for _ in range(measures) for op in ([OpCode.CREATE, stats, b"count=0,bytes=0", OPEN_ACL, 0, 0], [OpCode.DELETE, stats, -1])]
            session.pipeline(OpCode.MULTI, [(ops,) for ops in _batches(churn)])

    return _attack("quota-measures", body)


def ip_acl_checks(address: Address, entries: int = 30_000, reads: int = 200, watchers: int = 50) -> Outcome:
    """A znode whose ACL is ``entries`` ip ids (then world READ), ``reads`` reads of it, and
    one setData seen by ``watchers`` recursive watches on ``/``: each check parsed each entry."""

    def body(outcome: Outcome) -> None:
        with Session(address, outcome) as session, ExitStack() as watching:
            acl = [[31, "ip", f"10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}"] for n in range(entries)] + [[1, "world", "anyone"]]
            path = f"/amp-ip-{time.monotonic_ns()}"
            session.call(OpCode.CREATE, path, b"", acl, 0, 0)
            for _ in range(watchers):
                watching.enter_context(Session(address, outcome)).call(OpCode.ADD_WATCH, "/", 1)
            session.pipeline(OpCode.GET_DATA, [(path, False)] * reads)
            session.call(OpCode.SET_DATA, path, b"x", -1)

    return _attack("ip-acl-checks", body)


def acl_churn(address: Address, rounds: int = 50, entries: int = 30_000) -> Outcome:
    """``rounds`` setACL of a fresh ACL of ``entries`` entries on one znode, then its delete:
    the intern table kept every one of them, after the delete and a restart."""

    def body(outcome: Outcome) -> None:
        with Session(address, outcome) as session:
            path = f"/amp-churn-{time.monotonic_ns()}"
            session.call(OpCode.CREATE, path, b"", OPEN_ACL, 0, 0)
            acls = [[[31, "ip", f"10.{n % 256}.{k // 256 % 256}.{k % 256}"] for k in range(entries - 1)] + [[31, "world", "anyone"]] for n in range(rounds)]
            session.pipeline(OpCode.SET_ACL, [(path, acl, -1) for acl in acls])
            session.call(OpCode.DELETE, path, -1)

    return _attack("acl-churn", body)


def acl_bytes(address: Address, creates: int = 20, acl_bytes_each: int = 530_000) -> Outcome:
    """``creates`` znodes whose ACLs are ``acl_bytes_each`` bytes of digest ids: ACL bytes
    counted nowhere."""

    def body(outcome: Outcome) -> None:
        with Session(address, outcome) as session:
            ident = "x" * 1000
            acl = [[31, "digest", f"{ident}{k}:h"] for k in range(max(1, acl_bytes_each // (len(ident) + 20)))] + [[31, "world", "anyone"]]
            session.pipeline(OpCode.CREATE, [(f"/amp-aclbytes-{time.monotonic_ns()}-{n}", b"", acl, 0, 0) for n in range(creates)])

    return _attack("acl-bytes", body)


def history_flood(address: Address, multis: int = 200, ops: int = 5_000) -> Outcome:
    """``multis`` multis of ``ops`` setData each: the watch history was bounded in txns only."""

    def body(outcome: Outcome) -> None:
        with Session(address, outcome) as session:
            nodes = min(ops, 50)
            for path in ["/amp-history", *(f"/amp-history/n{n}" for n in range(nodes))]:
                _ensure(session, path)
            batch = [[OpCode.SET_DATA, f"/amp-history/n{n % nodes}", b"", -1] for n in range(ops)]
            session.pipeline(OpCode.MULTI, [(batch,)] * multis)

    return _attack("history-flood", body)


def resume_scans(address: Address, resumes: int = 200) -> Outcome:
    """``resumes`` addWatch of a quiet path with ``since_zxid`` as old as the history serves:
    each scanned the whole history."""

    def body(outcome: Outcome) -> None:
        with Session(address, outcome) as session:
            oldest = 0
            for _ in range(resumes):
                reply = session.call(OpCode.ADD_WATCH, f"/amp-quiet-{time.monotonic_ns()}", 1, oldest)
                if reply[2] == -1000 and isinstance(reply[3], str) and "0x" in reply[3]:  # HISTORYCOMPACTED names the oldest
                    oldest = int(reply[3].rsplit("0x", 1)[1].split()[0], 16)

    return _attack("resume-scans", body)


def zxid_waits(address: Address, connections: int = 20, waits: int = 2_000) -> Outcome:
    """``waits`` waitForZxid of a zxid never reached, with a short timeout, on each of
    ``connections``, while one long wait stays pending: answered waits stayed in the heap."""

    def body(outcome: Outcome) -> None:
        with ExitStack() as sessions:
            sessions.enter_context(Session(address, outcome)).send(OpCode.WAIT_FOR_ZXID, 1 << 62, 60_000)
            for _ in range(connections):
                sessions.enter_context(Session(address, outcome)).pipeline(OpCode.WAIT_FOR_ZXID, [(1 << 62, 1)] * waits)

    return _attack("zxid-waits", body)


def ephemeral_close(address: Address, count: int = 2_000, path_bytes: int = 1_000) -> Outcome:
    """``count`` ephemerals of ``path_bytes``-byte paths, then a closeSession: its txn named
    every one of them."""

    def body(outcome: Outcome) -> None:
        with Session(address, outcome) as session:
            _ensure(session, "/amp-eph")
            stem = "e" * max(1, path_bytes - 20)
            session.pipeline(OpCode.CREATE, [(f"/amp-eph/{stem}{time.monotonic_ns()}{n}", b"", OPEN_ACL, 1, 0) for n in range(count)])
            session.call(OpCode.CLOSE_SESSION)

    return _attack("ephemeral-close", body)


def session_churn(address: Address, sessions: int = 5_000, batch: int = 50) -> Outcome:
    """``sessions`` sessions opened, ``batch`` connections at a time (below maxClientCnxns),
    each connection dropped once its session is made, without a closeSession: every session
    stays open on every server until it expires (``maxSessions`` bounds how many)."""

    def body(outcome: Outcome) -> None:
        left = sessions
        while left > 0:
            batch_sessions = [Session(address, outcome, timeout_ms=60_000, handshake=False) for _ in range(min(batch, left))]
            try:
                for session in batch_sessions:
                    try:
                        session.handshake()
                    except ConnectionError:
                        outcome.refused += 1
            finally:
                for session in batch_sessions:
                    session.close()
            left -= len(batch_sessions)

    return _attack("session-churn", body)


def tree_fill(address: Address, znodes: int = 200_000, data_bytes: int = 1_000, fresh_acls: int = 1) -> Outcome:
    """``znodes`` creates of ``data_bytes`` each in multis, each with an ACL of its own when
    ``fresh_acls`` (16 ip entries): nothing bounded the tree, on every member (``maxZnodes``,
    ``maxTreeBytes`` now do).  What was created is deleted after, so the attacks that follow
    find room: the memory it took is measured as the tree's peak."""

    def acl(n: int) -> list[list[Any]]:
        return [[31, "ip", f"10.{n % 250}.{n // 250 % 250}.{k}"] for k in range(16)] if fresh_acls else OPEN_ACL

    def body(outcome: Outcome) -> None:
        with Session(address, outcome) as session:
            folder = f"/amp-tree-{time.monotonic_ns()}"
            _ensure(session, folder)
            data = b"t" * data_bytes
            made: list[str] = []
            step = 500 if fresh_acls else 5_000  # a txn's distinct ACLs hold at most maxTxnAclEntries (8,192) entries
            for start in range(0, znodes, step):  # built a multi at a time: 200,000 creates' ACLs take ~0.5 GB
                chunk = [[OpCode.CREATE, f"{folder}/n{n}", data, acl(n), 0, 0] for n in range(start, min(znodes, start + step))]
                refused = False
                for ops in _batches(chunk):
                    results = session.call(OpCode.MULTI, ops)[3]
                    if any(result[0] == OpCode.ERROR for result in results):
                        outcome.refused += 1  # the tree is full: the rest would be refused too
                        refused = True
                        break
                    made += [op[1] for op in ops]
                if refused:
                    break
            for ops in _batches([[OpCode.DELETE, path, -1] for path in made]):
                session.call(OpCode.MULTI, ops)
            session.call(OpCode.DELETE, folder, -1)

    return _attack("tree-fill", body)


def watch_storm(address: Address, watchers: int = 59, ops: int = 5_000) -> Outcome:
    """``watchers`` sessions with a recursive watch on a folder (their connections never read),
    then one multi of ``ops`` setData under it: one request, ``watchers`` x ``ops`` events
    (250,000 held a server 0.96 s; ``zabby.engine.engine._deliver``)."""

    def body(outcome: Outcome) -> None:
        with Session(address, outcome) as session, ExitStack() as watching:
            folder = f"/amp-storm-{time.monotonic_ns()}"
            _ensure(session, folder)
            _ensure(session, f"{folder}/n")
            for _ in range(watchers):
                watching.enter_context(Session(address, outcome)).call(OpCode.ADD_WATCH, folder, 1)
            session.call(OpCode.MULTI, [[OpCode.SET_DATA, f"{folder}/n", b"x", -1] for _ in range(ops)])
            session.call(OpCode.DELETE, f"{folder}/n", -1)
            session.call(OpCode.DELETE, folder, -1)

    return _attack("watch-storm", body)


def bad_ops(address: Address, connections: int = 200) -> Outcome:
    """Requests whose op is a list, a map, a float or a string, on ``connections`` connections:
    each logged a full traceback."""
    shapes: list[Any] = [[1], {"op": 1}, 1.5, "create", None, [[1]]]

    def body(outcome: Outcome) -> None:
        for n in range(connections):
            with Session(address, outcome) as session:
                session.sock.sendall(pack_frame([1, shapes[n % len(shapes)], "/x", b"", OPEN_ACL, 0]))
                session.answers(1)

    return _attack("bad-ops", body)


ATTACKS: dict[str, Callable[..., Outcome]] = {
    "auth-expansion": auth_expansion,
    "auth-flood": auth_flood,
    "quota-measures": quota_measures,
    "ip-acl-checks": ip_acl_checks,
    "acl-churn": acl_churn,
    "acl-bytes": acl_bytes,
    "history-flood": history_flood,
    "resume-scans": resume_scans,
    "zxid-waits": zxid_waits,
    "ephemeral-close": ephemeral_close,
    "session-churn": session_churn,
    "tree-fill": tree_fill,
    "watch-storm": watch_storm,
    "bad-ops": bad_ops,
}


def multi_flood(address: Address, connections: int = 60, ops: int = 5_000) -> Outcome:
    """One multi of ``ops`` setData on each of ``connections`` connections at once: each
    connection with nothing in flight may send one request, and every multi is a batch of
    writes to apply."""

    def body(outcome: Outcome) -> None:
        with ExitStack() as stack:
            _ensure(stack.enter_context(Session(address, outcome)), "/amp-multi")
            batch = [[OpCode.SET_DATA, "/amp-multi", b"", -1]] * ops
            sessions = [stack.enter_context(Session(address, outcome)) for _ in range(connections)]
            for session in sessions:
                session.send(OpCode.MULTI, batch)
            for session in sessions:
                session.answers(1)

    return _attack("multi-flood", body)


ATTACKS["multi-flood"] = multi_flood


def set_watches_flood(address: Address, sessions: int = 8, paths: int = 20_000) -> Outcome:
    """One setWatches of ``paths`` paths on each of ``sessions`` sessions at once (jute's
    reconnect request: up to a megabyte of paths), half of them data watches on missing nodes
    (each a NodeDeleted to queue), half existence watches to keep: eight of them stalled a
    leader of 3 servers for 0.4-1.3 s each, past syncLimit."""

    def body(outcome: Outcome) -> None:
        with ExitStack() as stack:
            missing = [f"/amp-set-watches/{n:06d}" for n in range(paths)]
            opened = [stack.enter_context(Session(address, outcome)) for _ in range(sessions)]
            for session in opened:
                session.send(OpCode.SET_WATCHES, 0, missing[: paths // 2], missing[paths // 2 :], [], [], [], xid=-8)
            for session in opened:
                session.answers(1)

    return _attack("set-watches-flood", body)


ATTACKS["set-watches-flood"] = set_watches_flood
