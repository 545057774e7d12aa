"""Run workload ops through kazoo against one server and record what each one did.

Every session's kazoo connection is instrumented: each watch event it reads and each reply
(with the reply header's error) is appended to that session's log, in the order the
connection thread read them.  After an op that may change the tree, the executor

1. waits (bounded) until every container and short-TTL node that is due has been reaped, so
   reaping happens at the same point of the sequence on both systems;
2. sends a read on every session: a server sends a watch event before the reply to any
   later request of that session, so when the read's reply is in, every event the op
   caused is in the log too.

Ops kazoo has no method for (container and TTL creates, multiRead, getEphemerals, ...) go
through kazoo's own connection as raw jute requests (``harness.differential.kazoo_ops``).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from kazoo.client import KazooClient, _prefix_root
from kazoo.exceptions import EXCEPTIONS, KazooException
from kazoo.protocol.serialization import Watch
from kazoo.security import ACL as KazooACL
from kazoo.security import Id as KazooId

from harness.differential.model import CLIENT_USER, CLIENTS, CREDENTIALS, ACLEntry, Event, Op, Outcome, Stat
from harness.differential.servers import SUPER_PASSWORD, SUPER_USER
from harness.differential.kazoo_ops import kazoo_call
from harness.differential.workload import READ_KINDS, TTL_SHORT_MS
from harness.jepsen.clients import kazoo_reconnect_retry
from zabby.opcodes import CreateMode, OpCode
from zabby.wire import jute

SESSION_TIMEOUT_S = 30.0
REAP_WAIT_S = 20.0
REAP_POLL_S = 0.02

logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # connection chatter; errors are results here


def error_name(code: int) -> str:
    """kazoo's exception name for a ZooKeeper error code (0 in a failed multi: rolled back)."""
    return "RolledBackError" if code == 0 else EXCEPTIONS[code].__name__


def as_stat(raw: Any) -> Stat:
    """kazoo's ZnodeStat or a jute Stat as a plain Stat (both in jute field order)."""
    return Stat(*raw) if isinstance(raw, tuple) else Stat(*raw.VALUES(raw))


class LoggedSession(Protocol):
    """A session under test, of whichever client: what it received is appended to ``log``."""

    label: str
    log: list[Event]

    def start(self, user: str | None) -> int: ...

    def stop(self) -> None: ...


class Session:
    """One kazoo session under a label ("a", "b", "c"), with the log of what it received."""

    def __init__(self, hosts: str, label: str, reconnect_max_delay_s: float | None = None) -> None:
        self.label = label
        self.log: list[Event] = []
        retry = None if reconnect_max_delay_s is None else kazoo_reconnect_retry(reconnect_max_delay_s)
        self.client = KazooClient(hosts=hosts, timeout=SESSION_TIMEOUT_S, connection_retry=retry)
        self._instrument()

    def _instrument(self) -> None:
        """Log events and replies in the connection thread, where their order is the wire's."""
        connection = self.client._connection
        read_event, read_response = connection._read_watch_event, connection._read_response

        def on_event(buffer: bytes, offset: int) -> Any:
            watch, _ = Watch.deserialize(buffer, offset)
            self.log.append(("event", watch.type, watch.state, watch.path))
            return read_event(buffer, offset)

        def on_response(header: Any, buffer: bytes, offset: int) -> Any:
            # not the header's zxid: a reaper's failed attempt takes a zxid whenever it runs
            self.log.append(("reply", header.err))
            return read_response(header, buffer, offset)

        connection._read_watch_event = on_event
        connection._read_response = on_response

    def start(self, user: str | None) -> int:
        self.client.start(timeout=SESSION_TIMEOUT_S)
        if user is not None:
            self.client.add_auth("digest", f"{user}:{CREDENTIALS[user]}")
        return int(self.client.client_id[0])

    def stop(self) -> None:
        try:
            self.client.stop()
        finally:
            self.client.close()


class Executor:
    """The sessions of one seed on one server, and the ops run through them."""

    def __init__(self, hosts: str, root: str, reconnect_max_delay_s: float | None = None) -> None:
        self.hosts = hosts
        self.root = root
        self.reconnect_max_delay_s = reconnect_max_delay_s  # None: kazoo's own backoff, up to an hour
        self.sessions: dict[str, LoggedSession] = {}
        self.owners: dict[int, str] = {}  # session id → "a1", "a2", ... (label + generation)
        self.reapable: dict[str, CreateMode] = {}  # containers and short-TTL nodes, by path
        self.admin = Session(hosts, "admin")

    # ----------------------------------------------------------------- set-up
    def open(self) -> None:
        self.admin.start(None)
        self.admin.client.add_auth("digest", f"{SUPER_USER}:{SUPER_PASSWORD}")
        self.admin.client.create(self.root, b"")
        for label in CLIENTS:
            self._open_session(label)

    def _new_session(self, label: str) -> LoggedSession:
        return Session(self.hosts, label, self.reconnect_max_delay_s)

    def _open_session(self, label: str) -> None:
        session = self._new_session(label)
        session_id = session.start(CLIENT_USER[label])
        generation = sum(1 for owner in self.owners.values() if owner[0] == label) + 1
        self.owners[session_id] = f"{label}{generation}"
        self.sessions[label] = session

    def close(self) -> None:
        """Stop every session, then delete the seed's tree (the super user passes any ACL)."""
        for session in self.sessions.values():
            session.stop()
        try:
            self.admin.client.delete(self.root, recursive=True)
        finally:
            self.admin.stop()

    # ----------------------------------------------------------------- one op
    def run(self, op: Op) -> Outcome:
        self._gather_logs()
        marks = {label: len(session.log) for label, session in self.sessions.items()}
        result = self._perform(op)
        self._track_reapable(op, result)
        unreaped: tuple[str, ...] = ()
        if op.kind not in READ_KINDS:
            unreaped = self._settle_reaping()
            self._read_on_every_session()
        self._gather_logs()
        logs = {label: session.log[marks.get(label, len(session.log)):] for label, session in self.sessions.items()}
        if op.kind == "reopen":
            logs[op.client] = []  # the new session's log begins after the op
        return Outcome(result, logs, unreaped)

    def _gather_logs(self) -> None:
        """Bring each session's log up to date (kazoo's sessions log as they read)."""

    def _read_on_every_session(self) -> None:
        """A read on every session: its reply follows every event the op made the server send it."""
        for label in self.sessions:
            self._kazoo(label).exists("/")

    def _kazoo(self, label: str) -> KazooClient:
        session = self.sessions[label]
        assert isinstance(session, Session)
        return session.client

    def _perform(self, op: Op) -> tuple[Any, ...]:
        client = self._kazoo(op.client)
        try:
            return getattr(self, f"_do_{op.kind}")(client, op)
        except (KazooException, ValueError) as exc:  # ValueError: kazoo refused the path itself
            return ("error", type(exc).__name__)

    # ----------------------------------------------------------------- reaping
    def _settle_reaping(self) -> tuple[str, ...]:
        """Wait until no container or short-TTL node is due for reaping; what is still due
        when the wait ends.  Reaping cascades (a parent container empties), so the wait ends
        only after a pass that found nothing due and saw nothing go."""
        deadline = time.monotonic() + REAP_WAIT_S
        while True:
            due, gone = self._due_for_reaping()
            if (not due and not gone) or time.monotonic() > deadline:
                return tuple(due)
            time.sleep(REAP_POLL_S)

    def _due_for_reaping(self) -> tuple[list[str], int]:
        """The due paths, and how many tracked paths are gone; children before parents, so a
        child reaped during the pass is seen gone before its parent is looked at."""
        due, gone = [], 0
        for path in sorted(self.reapable, key=lambda p: (-p.count("/"), p)):
            stat = self.admin.client.exists(path)
            if stat is None:
                del self.reapable[path]
                gone += 1
            elif stat.numChildren == 0 and (self.reapable[path] != CreateMode.CONTAINER or stat.cversion > 0):
                due.append(path)  # an empty container that had a child, or an expired TTL node
        return due, gone

    def _track_reapable(self, op: Op, result: tuple[Any, ...]) -> None:
        if op.kind == "create" and result[0] == "created":
            self._note_created(result[1], op.args[3], op.args[4])
        elif op.kind == "multi" and result[0] == "multi":
            for sub, sub_result in zip(op.args[0], result[1], strict=False):
                if sub[0] == "create" and sub_result[0] == "created":
                    self._note_created(sub_result[1], sub[4], sub[5])

    def _note_created(self, path: str, mode: int, ttl_ms: int) -> None:
        if mode == CreateMode.CONTAINER or (CreateMode(mode).is_ttl and ttl_ms == TTL_SHORT_MS):
            self.reapable[path] = CreateMode(mode)
        else:
            self.reapable.pop(path, None)

    # ----------------------------------------------------------------- writes
    def _do_create(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        path, data, acl, mode, ttl_ms, with_stat = op.args
        if mode > CreateMode.EPHEMERAL_SEQUENTIAL or not _kazoo_keeps(path, CreateMode(mode).is_sequential):
            return _multi_result(*_raw_create(client, path, data, acl, mode, ttl_ms, with_stat))
        mode = CreateMode(mode)
        made = client.create(path, data, _kazoo_acl(acl), ephemeral=mode.is_ephemeral,
                             sequence=mode.is_sequential, include_data=with_stat)  # fmt: skip
        return ("created", made[0], as_stat(made[1])) if with_stat else ("created", made, None)

    def _do_delete(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        path, version = op.args
        if _kazoo_keeps(path, False):
            client.delete(path, version)
        else:
            kazoo_call(client, OpCode.DELETE, jute.DeleteRequest(path, version))
        return ("ok",)

    def _do_set(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        return ("stat", as_stat(client.set(*op.args)))

    def _do_set_acl(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        path, acl, version = op.args
        return ("stat", as_stat(client.set_acls(path, _kazoo_acl(acl), version)))

    def _do_multi(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        subs, through_transaction = op.args
        if through_transaction and all(_fits_kazoo_transaction(sub) for sub in subs):
            results = self._kazoo_transaction(client, subs)
        else:
            results = [_multi_result(kind, err, record) for kind, err, record in
                       kazoo_call(client, OpCode.MULTI, jute.MultiRequest([_multi_op(sub) for sub in subs]))]  # fmt: skip
        return ("multi", tuple(results))

    def _kazoo_transaction(self, client: KazooClient, subs: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        transaction = client.transaction()
        for sub in subs:
            if sub[0] == "create":
                _, path, data, acl, mode, _ttl, _stat = sub
                mode = CreateMode(mode)
                transaction.create(path, data, _kazoo_acl(acl), ephemeral=mode.is_ephemeral, sequence=mode.is_sequential)
            elif sub[0] == "delete":
                transaction.delete(sub[1], sub[2])
            elif sub[0] == "set":
                transaction.set_data(sub[1], sub[2], sub[3])
            else:
                transaction.check(sub[1], sub[2])
        return [_transaction_result(sub, result) for sub, result in zip(subs, transaction.commit(), strict=False)]

    # ----------------------------------------------------------------- reads
    def _do_get(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        path, watch = op.args
        data, stat = client.get(path, watch=_ignore if watch else None)
        return ("data", data, as_stat(stat))

    def _do_exists(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        path, watch = op.args
        stat = client.exists(path, watch=_ignore if watch else None)
        return ("none",) if stat is None else ("stat", as_stat(stat))

    def _do_children(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        path, watch, with_stat = op.args
        answer = client.get_children(path, watch=_ignore if watch else None, include_data=with_stat)
        if with_stat:
            return ("children", tuple(sorted(answer[0])), as_stat(answer[1]))
        return ("children", tuple(sorted(answer)), None)

    def _do_get_acl(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        acl, stat = client.get_acls(op.args[0])
        return ("acl", tuple((entry.perms, entry.id.scheme, entry.id.id) for entry in acl), as_stat(stat))

    def _do_sync(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        return ("sync", client.sync(op.args[0]))

    def _do_multi_read(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        reads: list[tuple[int, jute.Record]] = [(OpCode.GET_DATA, jute.GetDataRequest(path, False)) if kind == "get"
                 else (OpCode.GET_CHILDREN, jute.GetChildrenRequest(path, False)) for kind, path in op.args[0]]  # fmt: skip
        results = kazoo_call(client, OpCode.MULTI_READ, jute.MultiRequest(reads))
        return ("multi_read", tuple(_multi_result(kind, err, record) for kind, err, record in results))

    def _do_ephemerals(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        reply = kazoo_call(client, OpCode.GET_EPHEMERALS, jute.GetEphemeralsRequest(op.args[0]))
        return ("ephemerals", tuple(sorted(reply.ephemerals)))

    def _do_all_children(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        reply = kazoo_call(client, OpCode.GET_ALL_CHILDREN_NUMBER, jute.GetAllChildrenNumberRequest(op.args[0]))
        return ("count", reply.total_number)

    def _do_add_watch(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        kazoo_call(client, OpCode.ADD_WATCH, jute.AddWatchRequest(*op.args))
        return ("ok",)

    def _do_remove_watches(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        kazoo_call(client, OpCode.REMOVE_WATCHES, jute.RemoveWatchesRequest(*op.args))
        return ("ok",)

    def _do_check_watches(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        kazoo_call(client, OpCode.CHECK_WATCHES, jute.CheckWatchesRequest(*op.args))
        return ("ok",)

    def _do_who_am_i(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        reply = kazoo_call(client, OpCode.WHO_AM_I)
        return ("who", tuple(sorted((info.auth_scheme, info.user) for info in reply.client_info)))

    # ----------------------------------------------------------------- sessions
    def _do_reopen(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        self.sessions.pop(op.client).stop()
        self._open_session(op.client)
        return ("reopened",)

    def _do_add_auth(self, client: KazooClient, op: Op) -> tuple[Any, ...]:
        user = op.args[0]
        client.add_auth("digest", f"{user}:{CREDENTIALS[user]}")
        return ("ok",)


def _ignore(event: object) -> None:
    """The watch callback kazoo needs to send a watch flag; events are read from the log."""


def _kazoo_acl(acl: tuple[ACLEntry, ...]) -> list[KazooACL]:
    return [KazooACL(perms, KazooId(scheme, ident)) for perms, scheme, ident in acl]


def _jute_acl(acl: tuple[ACLEntry, ...]) -> list[jute.ACL]:
    return [jute.ACL(perms, jute.Id(scheme, ident)) for perms, scheme, ident in acl]


def _kazoo_keeps(path: str, sequential: bool) -> bool:
    """Whether kazoo sends ``path`` as it is (it makes paths absolute and normal, and refuses
    "." and "..")."""
    try:
        return _prefix_root("", path, trailing=sequential) == path
    except ValueError:
        return False


def _raw_create(client: KazooClient, path: str, data: bytes, acl: tuple[ACLEntry, ...], mode: int, ttl_ms: int,
                with_stat: bool) -> tuple[int, int, Any]:  # fmt: skip
    """A create of any mode and path, as ZooKeeper's Java client would send it, as one multi result."""
    code, record = _create_record(path, data, acl, mode, ttl_ms, with_stat)
    return code, 0, kazoo_call(client, code, record)


def _create_record(path: str, data: bytes, acl: tuple[ACLEntry, ...], mode: int, ttl_ms: int,
                   with_stat: bool) -> tuple[int, jute.Record]:  # fmt: skip
    """The op code and request record of a create of any mode, as ZooKeeper's client sends it."""
    if CreateMode(mode).is_ttl:
        return OpCode.CREATE_TTL, jute.CreateTTLRequest(path, data, _jute_acl(acl), mode, ttl_ms)
    if mode == CreateMode.CONTAINER:
        return OpCode.CREATE_CONTAINER, jute.CreateRequest(path, data, _jute_acl(acl), mode)
    return OpCode.CREATE2 if with_stat else OpCode.CREATE, jute.CreateRequest(path, data, _jute_acl(acl), mode)


def _multi_op(sub: tuple[Any, ...]) -> tuple[int, jute.Record]:
    kind = sub[0]
    if kind == "create":
        return _create_record(*sub[1:])
    if kind == "delete":
        return OpCode.DELETE, jute.DeleteRequest(sub[1], sub[2])
    if kind == "set":
        return OpCode.SET_DATA, jute.SetDataRequest(sub[1], sub[2], sub[3])
    return OpCode.CHECK, jute.CheckVersionRequest(sub[1], sub[2])


def _fits_kazoo_transaction(sub: tuple[Any, ...]) -> bool:
    if sub[0] == "create":
        return sub[4] <= CreateMode.EPHEMERAL_SEQUENTIAL and not sub[6] and _kazoo_keeps(sub[1], CreateMode(sub[4]).is_sequential)
    return _kazoo_keeps(sub[1], False)


def _multi_result(kind: int, err: int, record: Any) -> tuple[Any, ...]:
    """One result of a raw multi or multiRead, as a plain tuple."""
    if kind == -1:
        return ("error", error_name(record.err if record is not None else err))
    if isinstance(record, jute.Create2Response):
        return ("created", record.path, as_stat(record.stat))
    if isinstance(record, jute.CreateResponse):
        return ("created", record.path, None)
    if isinstance(record, jute.SetDataResponse):
        return ("stat", as_stat(record.stat))
    if isinstance(record, jute.GetDataResponse):
        return ("data", record.data, as_stat(record.stat))
    if isinstance(record, jute.GetChildrenResponse):
        return ("children", tuple(sorted(record.children or ())), None)
    return ("ok",)  # delete, check


def _transaction_result(sub: tuple[Any, ...], result: Any) -> tuple[Any, ...]:
    """One result of kazoo's transaction, in the form ``_multi_result`` gives."""
    if isinstance(result, Exception):
        return ("error", type(result).__name__)
    if sub[0] == "create":
        return ("created", result, None)
    if sub[0] == "set":
        return ("stat", as_stat(result))
    return ("ok",)
