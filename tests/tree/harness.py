"""A tiny driver for the state machine: prepare → Txn → apply, with increasing zxids."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zabby.opcodes import CreateMode, OpCode
from zabby.tree import acl as acls
from zabby.tree.datatree import DataTree
from zabby.tree.prep import Caller, Preparer, PrepLimits
from zabby.tree.txns import Txn, decode_txn, encode_txn

OPEN = acls.OPEN_ACL_UNSAFE



@dataclass(eq=False)
class Session:
    """What the watch manager needs of a watcher: identity, proven ids, and where its watches'
    bytes are charged (``held``)."""

    name: str
    auth_ids: list[acls.AuthId] = field(default_factory=lambda: [("ip", "127.0.0.1")])
    superuser: bool = False
    held: int = 0

    def hold_state(self, delta: int) -> None:
        self.held += delta


class Harness:
    """One tree and its preparer, as a server would drive them (optionally through msgpack)."""

    def __init__(self, limits: PrepLimits | None = None, *, wire: bool = True) -> None:
        self.tree = DataTree()
        self.prep = Preparer(self.tree, limits)
        self.zxid = 0
        self.now = 1_000
        self.cxid = 0
        self.wire = wire
        self.last_acls: list[tuple[acls.ACL, ...]] = []

    # ------------------------------------------------------------ building blocks
    @staticmethod
    def caller(session_id: int = 1, auth_ids: list[acls.AuthId] | None = None, superuser: bool = False) -> Caller:
        return Caller(session_id, list(auth_ids) if auth_ids is not None else [("ip", "127.0.0.1")], superuser)

    def _txn(self, session_id: int, txn_type: int, body: tuple[Any, ...]) -> Txn:
        self.cxid += 1
        txn = Txn(self.zxid, session_id, self.cxid, self.now, txn_type, body)
        return decode_txn(encode_txn(txn)) if self.wire else txn

    def prepare(self, op: int, args: tuple[Any, ...], caller: Caller | None = None) -> Txn:
        """Prepare one write (raises ZabbyError on failure; no zxid is consumed then)."""
        caller = caller or self.caller()
        self.now += 7
        txn_type, body = self.prep.prepare(op, args, caller, self.zxid + 1, self.now)
        self.zxid += 1
        return self._txn(caller.session_id, txn_type, body)

    def apply(self, txn: Txn) -> tuple[Any, list[tuple[int, str]]]:
        """Apply ``txn``; its watch triggers as (type, path), their ACLs kept in ``last_acls``."""
        result, events = self.tree.apply(txn)
        self.prep.applied(txn.zxid)
        self.last_acls = [acl for _, _, acl in events]
        return result, [(event_type, path) for event_type, path, _ in events]

    def run(self, op: int, args: tuple[Any, ...], caller: Caller | None = None) -> tuple[Any, list[tuple[int, str]]]:
        return self.apply(self.prepare(op, args, caller))

    # ------------------------------------------------------------ conveniences
    def create(self, path: str, data: bytes = b"", acl: Any = OPEN, mode: int = CreateMode.PERSISTENT,
               ttl: int | None = None, caller: Caller | None = None, op: int = OpCode.CREATE) -> str:
        (created, _stat), _events = self.run(op, (path, data, acl, int(mode), ttl), caller)
        return created

    def delete(self, path: str, version: int = -1, caller: Caller | None = None) -> list[tuple[int, str]]:
        _result, events = self.run(OpCode.DELETE, (path, version), caller)
        return events

    def set_data(self, path: str, data: bytes, version: int = -1, caller: Caller | None = None) -> tuple[int, ...]:
        stat, _events = self.run(OpCode.SET_DATA, (path, data, version), caller)
        return stat

    def set_acl(self, path: str, acl: Any, aversion: int = -1, caller: Caller | None = None) -> tuple[int, ...]:
        stat, _events = self.run(OpCode.SET_ACL, (path, acl, aversion), caller)
        return stat

    def multi(self, ops: list[tuple[Any, ...]], caller: Caller | None = None) -> tuple[Any, list[tuple[int, str]]]:
        return self.run(OpCode.MULTI, (ops,), caller)

    def open_session(self, session_id: int, timeout_ms: int = 10_000, password: bytes = b"secret") -> Any:
        self.zxid += 1
        self.now += 7
        result, _ = self.apply(self._txn(session_id, OpCode.CREATE_SESSION, (timeout_ms, password)))
        return result

    def prepare_close(self, session_id: int) -> Txn:
        self.zxid += 1
        self.now += 7
        txn_type, body = self.prep.close_session(session_id, self.zxid)
        return self._txn(session_id, txn_type, body)

    def close_session(self, session_id: int) -> list[tuple[int, str]]:
        _result, events = self.apply(self.prepare_close(session_id))
        return events
