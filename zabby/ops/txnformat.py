"""Txns as operators read them: a dict for ``--json`` (one object per line) and a text form
modelled on ZooKeeper's LogFormatter (time, session, cxid, zxid, type, then the fields).

Data is shown as text when it is printable UTF-8 and as hex otherwise; the JSON form keeps
all of it (``"encoding": "utf-8"`` or ``"base64"``) so that a dump can be read back exactly.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

from zabby.opcodes import CREATE_OPS, OpCode
from zabby.tree import acl as acls
from zabby.tree.txns import Txn

TEXT_DATA_CHARS_MAX = 60

TYPE_NAMES = {
    OpCode.CREATE: "create", OpCode.CREATE2: "create2", OpCode.CREATE_CONTAINER: "createContainer",
    OpCode.CREATE_TTL: "createTTL", OpCode.DELETE: "delete", OpCode.DELETE_CONTAINER: "deleteContainer",
    OpCode.SET_DATA: "setData", OpCode.SET_ACL: "setACL", OpCode.CHECK: "check", OpCode.MULTI: "multi",
    OpCode.ERROR: "error", OpCode.CREATE_SESSION: "createSession", OpCode.CLOSE_SESSION: "closeSession",
}  # fmt: skip


def _hex(value: int) -> str:
    return f"0x{value % 2**64:x}"  # session ids and owners print as ZooKeeper's unsigned hex


def _iso_time(time_ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(time_ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _acl_text(acl: Any) -> str:
    return ",".join(f"{scheme}:{ident}:{acls.perms_to_letters(perms)}" for perms, scheme, ident in acl)


def _data_fields(data: bytes) -> dict[str, Any]:
    try:
        return {"data": data.decode("utf-8"), "encoding": "utf-8", "data_bytes": len(data)}
    except UnicodeDecodeError:
        return {"data": base64.b64encode(data).decode("ascii"), "encoding": "base64", "data_bytes": len(data)}


def _body_fields(txn_type: int, body: tuple[Any, ...]) -> dict[str, Any]:
    """The fields of one (sub-)txn body, by the grammar in ``zabby.tree.txns``."""
    if txn_type in CREATE_OPS:
        path, data, acl, owner, parent_cversion = body
        return {"path": path, **_data_fields(data), "acl": _acl_text(acl), "ephemeral_owner": _hex(owner),
                "parent_cversion": parent_cversion}  # fmt: skip
    if txn_type in (OpCode.DELETE, OpCode.DELETE_CONTAINER):
        return {"path": body[0]}
    if txn_type == OpCode.SET_DATA:
        return {"path": body[0], **_data_fields(body[1]), "version": body[2]}
    if txn_type == OpCode.SET_ACL:
        return {"path": body[0], "acl": _acl_text(body[1]), "aversion": body[2]}
    if txn_type == OpCode.CHECK:
        return {"path": body[0], "version": body[1]}
    if txn_type == OpCode.ERROR:
        return {"err": body[0]}
    if txn_type == OpCode.CREATE_SESSION:
        return {"timeout_ms": body[0]}
    if txn_type == OpCode.CLOSE_SESSION:
        return {"ephemerals": "every one the session owns" if body[0] is None else list(body[0])}
    if txn_type == OpCode.MULTI:
        return {"ops": [{"type": type_name(sub_type), **_body_fields(sub_type, sub_body)} for sub_type, sub_body in body[0]]}
    return {"body": repr(body)}


def type_name(txn_type: int) -> str:
    return TYPE_NAMES.get(txn_type, f"type{txn_type}")  # type: ignore[call-overload]


def txn_to_dict(txn: Txn) -> dict[str, Any]:
    """Everything a txn holds, JSON-ready."""
    return {
        "zxid": _hex(txn.zxid),
        "time": _iso_time(txn.time_ms),
        "time_ms": txn.time_ms,
        "session": _hex(txn.session_id),
        "cxid": _hex(txn.cxid),
        "type": type_name(txn.type),
        **_body_fields(txn.type, txn.body),
    }


def _data_text(fields: dict[str, Any]) -> str:
    """Printable UTF-8 as a quoted string (cut at TEXT_DATA_CHARS_MAX), anything else as hex."""
    size = fields["data_bytes"]
    text = fields["data"]
    if fields["encoding"] == "utf-8" and text.isprintable():
        shown = text if len(text) <= TEXT_DATA_CHARS_MAX else text[:TEXT_DATA_CHARS_MAX] + "…"
        return f"data={shown!r} ({size} B)"
    raw = base64.b64decode(text) if fields["encoding"] == "base64" else text.encode()
    shown_hex = raw[: TEXT_DATA_CHARS_MAX // 2].hex()
    return f"data=0x{shown_hex}{'…' if len(raw) > TEXT_DATA_CHARS_MAX // 2 else ''} ({size} B)"


def _fields_text(fields: dict[str, Any]) -> str:
    words = [fields["type"]]
    if "path" in fields:
        words.append(fields["path"])
    if "data" in fields:
        words.append(_data_text(fields))
    skip = {"type", "path", "data", "encoding", "data_bytes", "ops"}
    words += [f"{key}={value}" for key, value in fields.items() if key not in skip]
    return " ".join(words)


def format_text(record: dict[str, Any]) -> str:
    """One line per txn (a multi adds one indented line per op)."""
    head = f"{record['time']} session {record['session']} cxid {record['cxid']} zxid {record['zxid']} "
    body = {key: value for key, value in record.items() if key not in ("zxid", "time", "time_ms", "session", "cxid")}
    lines = [head + _fields_text(body)]
    lines += [f"    {index}: {_fields_text(op)}" for index, op in enumerate(record.get("ops", []))]
    return "\n".join(lines)
