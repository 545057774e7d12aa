"""Structured fuzzing of the client port: valid jute and msgpack sessions, then mutated.

Theory of operation: a ``Case`` is what one hostile connection sends: a connect request and a
list of requests, built valid from the op model (docs/protocol.md) and then mutated where a
careless or malicious client would: xids (repeated, decreasing, special, out of range), op
codes, argument types and counts, nesting, and, once encoded, the bytes: a wrong length
prefix, a truncated frame, flipped bytes, frames reordered or glued together.  ``Target``
sends a case to a running server and then checks the one invariant (h11's fuzzing rule, for
a server): whatever came in, the server either answered or closed *that* connection, and
it is still up, still serving a well-behaved client, with every write it acknowledged to
that client still there and nothing logged as a bug of ours (a traceback).

The strategies need hypothesis (the ``test`` extra): ``tests/server/test_fuzz_clients.py`` runs
a short run in the default suite, ``scripts/fuzz_clients.py --seed N`` a long one to replay.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

import msgpack
from hypothesis import strategies as st

from harness.local.jute_session import JuteSession
from zabby.opcodes import OpCode
from zabby.wire import jute
from zabby.wire.messages import PROTOCOL_NAME, PROTOCOL_VERSION

IDLE_S = 0.05  # a connection that sent nothing for this long has answered what it will
CASE_S_MAX = 2.0  # the most one case waits for its answers
SPECIAL_XIDS = (-1, -2, -4, -8)
OPEN_ACL = [[31, "world", "anyone"]]

# ----------------------------------------------------------------------------- the op model, valid
paths = st.one_of(st.sampled_from(["/", "/fuzz", "/fuzz/a", "/fuzz/b/c", "/zookeeper", "/zookeeper/config"]),
                  st.text(alphabet="/abc\x00é.", max_size=12))  # fmt: skip
datas = st.binary(max_size=64)
versions = st.one_of(st.just(-1), st.integers(-3, 5))
acls = st.one_of(st.just(OPEN_ACL), st.lists(st.tuples(st.integers(0, 31), st.sampled_from(["world", "digest", "ip", "auth", "x"]),
                                                       st.sampled_from(["anyone", "u:p", "127.0.0.1", ""])).map(list), max_size=3))  # fmt: skip
flags = st.one_of(st.integers(0, 6), st.integers(-2**31, 2**31 - 1))
watch = st.booleans()


def _op(code: int, *args: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    return st.tuples(st.just(code), *args).map(list)


sub_ops = st.one_of(
    _op(OpCode.CREATE, paths, datas, acls, flags, st.just(0)), _op(OpCode.DELETE, paths, versions),
    _op(OpCode.SET_DATA, paths, datas, versions), _op(OpCode.CHECK, paths, versions),
)  # fmt: skip
read_sub_ops = st.one_of(_op(OpCode.GET_DATA, paths, watch), _op(OpCode.GET_CHILDREN, paths, watch))
path_lists = st.lists(paths, max_size=4)

REQUESTS: st.SearchStrategy[list[Any]] = st.one_of(
    _op(OpCode.CREATE, paths, datas, acls, flags, st.just(0)), _op(OpCode.CREATE2, paths, datas, acls, flags, st.just(0)),
    _op(OpCode.CREATE_TTL, paths, datas, acls, st.sampled_from([5, 6]), st.integers(-1, 10**6)),
    _op(OpCode.DELETE, paths, versions), _op(OpCode.EXISTS, paths, watch), _op(OpCode.GET_DATA, paths, watch),
    _op(OpCode.SET_DATA, paths, datas, versions), _op(OpCode.GET_ACL, paths), _op(OpCode.SET_ACL, paths, acls, versions),
    _op(OpCode.GET_CHILDREN, paths, watch), _op(OpCode.GET_CHILDREN2, paths, watch), _op(OpCode.SYNC, paths),
    _op(OpCode.PING), _op(OpCode.MULTI, st.lists(sub_ops, max_size=5)), _op(OpCode.MULTI_READ, st.lists(read_sub_ops, max_size=5)),
    _op(OpCode.AUTH, st.sampled_from(["digest", "ip", "x"]), st.binary(max_size=16)),
    _op(OpCode.SET_WATCHES, st.integers(0, 2**40), path_lists, path_lists, path_lists, path_lists, path_lists),
    _op(OpCode.CHECK_WATCHES, paths, st.integers(0, 6)), _op(OpCode.REMOVE_WATCHES, paths, st.integers(0, 6)),
    _op(OpCode.GET_EPHEMERALS, paths), _op(OpCode.GET_ALL_CHILDREN_NUMBER, paths),
    _op(OpCode.ADD_WATCH, paths, st.integers(-1, 3)), _op(OpCode.WHO_AM_I), _op(OpCode.CLOSE_SESSION),
)  # fmt: skip

# ----------------------------------------------------------------------------- mutations
msgpack_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.floats(allow_nan=False), st.text(max_size=8), st.binary(max_size=8)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8,
)  # fmt: skip


@st.composite
def mutated_request(draw: st.DrawFn, xid: int) -> list[Any]:
    """One request ``[xid, op, *args]``, valid or with one of a client's mistakes in it."""
    request = [xid, *draw(REQUESTS)]
    mutation = draw(st.sampled_from(["none", "none", "xid", "op", "arg-type", "arg-count", "nesting"]))
    if mutation == "xid":
        request[0] = draw(st.one_of(st.sampled_from([*SPECIAL_XIDS, 0, xid, xid - 1, 2**31, -(2**31) - 1, 2**40]), st.integers(-(2**31), 2**31 - 1)))
    elif mutation == "op":
        request[1] = draw(st.one_of(st.integers(-20, 120), st.integers(-(2**31), 2**31 - 1)))
    elif mutation == "arg-type" and len(request) > 2:
        index = draw(st.integers(2, len(request) - 1))
        request[index] = draw(msgpack_values)
    elif mutation == "arg-count":
        request = request[: draw(st.integers(0, len(request)))] if draw(st.booleans()) else [*request, draw(msgpack_values)]
    elif mutation == "nesting":
        depth = draw(st.sampled_from([7, 50, 600]))
        nested: Any = "/fuzz"
        for _ in range(depth):
            nested = [nested]
        request.append(nested)
    return request


@st.composite
def mutated_bytes(draw: st.DrawFn, frames: list[bytes]) -> bytes:
    """The frames as sent: whole, or with their bytes broken where a stream breaks."""
    mutation = draw(st.sampled_from(["none", "none", "none", "length", "truncate", "flip", "reorder", "garbage"]))
    if mutation == "reorder" and len(frames) > 1:
        frames = draw(st.permutations(frames))
    stream = b"".join(frames)
    if mutation == "length" and frames:
        index = draw(st.integers(0, len(frames) - 1))
        start = sum(len(f) for f in frames[:index])
        length = draw(st.sampled_from([0, 1, 2**31 - 1, 0xFFFFFFFF, len(frames[index]) + 7, 2**20 + 2048]))
        stream = stream[:start] + (length & 0xFFFFFFFF).to_bytes(4, "big") + stream[start + 4 :]
    elif mutation == "truncate" and stream:
        stream = stream[: draw(st.integers(0, len(stream) - 1))]
    elif mutation == "flip" and stream:
        data = bytearray(stream)
        for _ in range(draw(st.integers(1, 8))):
            position = draw(st.integers(0, len(data) - 1))
            data[position] = draw(st.integers(0, 255))
        stream = bytes(data)
    elif mutation == "garbage":
        stream = stream[: draw(st.integers(0, len(stream)))] + draw(st.binary(min_size=1, max_size=64))
    return stream


@dataclass(frozen=True, slots=True)
class Case:
    protocol: str  # "msgpack" or "jute"
    stream: bytes  # what the connection sends, connect request first
    requests: tuple[tuple[Any, ...], ...]  # the requests before encoding (for the report)


def _msgpack_connect(session_id: int) -> bytes:
    payload = msgpack.packb([PROTOCOL_NAME, PROTOCOL_VERSION, 0, 10_000, session_id, b"", False], use_bin_type=True)
    return len(payload).to_bytes(4, "big") + payload


def _jute_connect() -> bytes:
    return jute.frame(jute.ConnectRequest(0, 0, 10_000, 0, bytes(16), False).encode())


@st.composite
def msgpack_cases(draw: st.DrawFn) -> Case:
    requests = [draw(mutated_request(xid)) for xid in range(1, draw(st.integers(1, 6)) + 1)]
    frames = [_msgpack_connect(draw(st.sampled_from([0, 0, 0, 12345])))]
    for request in requests:
        try:
            payload = msgpack.packb(request, use_bin_type=True)
        except (ValueError, OverflowError, TypeError):  # a value msgpack cannot carry: send garbage in its place
            payload = b"\xc1"
        frames.append(len(payload).to_bytes(4, "big") + payload)
    return Case("msgpack", draw(mutated_bytes(frames)), tuple(tuple(r) for r in requests))


def _sub_records(subs: list[Any]) -> list[tuple[int, jute.Record]]:
    """A multi's or multiRead's ops as (op, record); every op the model puts there has one."""
    out = []
    for sub in subs:
        record = _jute_record(sub[0], sub[1:])
        if record is None:
            raise ValueError(f"op {sub[0]} has no record in a multi")
        out.append((int(sub[0]), record))
    return out


def _jute_record(op: int, args: list[Any]) -> jute.Record | None:
    """The jute record of a well-typed request of the op model, or None (no record for it)."""
    acl = [jute.ACL(p, jute.Id(s, i)) for p, s, i in args[2]] if op in (OpCode.CREATE, OpCode.CREATE2) else None
    records: dict[int, Any] = {
        OpCode.CREATE: lambda: jute.CreateRequest(args[0], args[1], acl, args[3]),
        OpCode.CREATE2: lambda: jute.CreateRequest(args[0], args[1], acl, args[3]),
        OpCode.DELETE: lambda: jute.DeleteRequest(args[0], args[1]),
        OpCode.EXISTS: lambda: jute.ExistsRequest(args[0], args[1]),
        OpCode.GET_DATA: lambda: jute.GetDataRequest(args[0], args[1]),
        OpCode.SET_DATA: lambda: jute.SetDataRequest(args[0], args[1], args[2]),
        OpCode.GET_CHILDREN: lambda: jute.GetChildrenRequest(args[0], args[1]),
        OpCode.SYNC: lambda: jute.SyncRequest(args[0]),
        OpCode.AUTH: lambda: jute.AuthPacket(0, args[0], args[1]),
        OpCode.SET_WATCHES: lambda: jute.SetWatches(min(args[0], 2**63 - 1), args[1], args[2], args[3]),
        OpCode.MULTI: lambda: jute.MultiRequest(_sub_records(args[0])),
        OpCode.MULTI_READ: lambda: jute.MultiRequest(_sub_records(args[0])),
        OpCode.CHECK: lambda: jute.CheckVersionRequest(args[0], args[1]),
    }
    make = records.get(op)
    return None if make is None else make()


@st.composite
def jute_cases(draw: st.DrawFn) -> Case:
    frames, requests = [_jute_connect()], []
    for xid in range(1, draw(st.integers(1, 6)) + 1):
        request = draw(mutated_request(xid))
        requests.append(tuple(request))
        try:
            record = _jute_record(request[1], request[2:])
            frame = jute.encode_request(request[0], request[1], record)
        except (struct.error, TypeError, ValueError, IndexError, AttributeError, KeyError, OverflowError):
            frame = jute.frame(struct.pack(">ii", xid, 1) + b"\x00\x00")  # a request it cannot carry: a cut create
        frames.append(frame)
    return Case("jute", draw(mutated_bytes(frames)), tuple(requests))


CASES = st.one_of(msgpack_cases(), jute_cases())


# ----------------------------------------------------------------------------- the target
@dataclass(slots=True)
class Sent:
    """What one case got back."""

    answered_bytes: int
    closed: bool


class Target:
    """A running server (``host:port``, its log) and a well-behaved jute client beside the
    cases: after each case it reads, and every few it writes a counter it then expects back."""

    def __init__(self, port: int, log_path: Any, host: str = "127.0.0.1") -> None:
        self.address = (host, port)
        self.log_path = log_path
        self.acked = 0  # the last value of /fuzz-acked the server acknowledged
        self.cases = 0
        self._log_read = 0  # what bugs_logged has read of the log
        self._client = self._connect()
        self._client.call(OpCode.CREATE, jute.CreateRequest("/fuzz-acked", b"0", [jute.ACL(31, jute.Id("world", "anyone"))], 0))
        self._client.call(OpCode.CREATE, jute.CreateRequest("/fuzz", b"", [jute.ACL(31, jute.Id("world", "anyone"))], 0))

    def _connect(self) -> JuteSession:
        session = JuteSession(self.address[1], host=self.address[0], timeout_s=10.0)
        session.connect(timeout_ms=30_000)
        return session

    def send(self, case: Case) -> Sent:
        answered, closed = 0, False
        with socket.create_connection(self.address, timeout=5.0) as sock:
            try:
                sock.sendall(case.stream)
            except OSError:
                return Sent(0, True)
            deadline = time.monotonic() + CASE_S_MAX
            sock.settimeout(IDLE_S)
            while time.monotonic() < deadline:
                try:
                    chunk = sock.recv(65536)
                except TimeoutError:
                    break
                except OSError:
                    closed = True
                    break
                if not chunk:
                    closed = True
                    break
                answered += len(chunk)
        self.cases += 1
        return Sent(answered, closed)

    def check(self) -> None:
        """The invariant after a case: the server logged no error of its own, the well-behaved
        client is served, and what was acknowledged to it is there (every fifth case it writes
        again).  Raises: AssertionError, saying which."""
        bugs = self.bugs_logged()
        assert not bugs, "the server logged an error of its own:\n" + "\n".join(bugs)
        header, reply = self._client.call(OpCode.GET_DATA, jute.GetDataRequest("/fuzz-acked", False))
        assert header.err == 0, f"the well-behaved client's read failed: {header.err}"
        assert reply.data == str(self.acked).encode(), f"acknowledged {self.acked}, read {reply.data!r}"
        if self.cases % 5 == 0:
            value = self.acked + 1
            header, _ = self._client.call(OpCode.SET_DATA, jute.SetDataRequest("/fuzz-acked", str(value).encode(), -1))
            assert header.err == 0, f"the well-behaved client's write failed: {header.err}"
            self.acked = value

    def bugs_logged(self) -> list[str]:
        """Log lines since the last call that say one of our own errors surfaced (an ERROR, a
        traceback), each with the lines that follow it."""
        with open(self.log_path, "rb") as log:
            log.seek(self._log_read)
            text = log.read().decode(errors="replace")
            self._log_read = log.tell()
        lines = text.splitlines()
        return ["\n".join(lines[i : i + 12]) for i, line in enumerate(lines) if "Traceback" in line or " ERROR " in line]

    def close(self) -> None:
        self._client.close()
