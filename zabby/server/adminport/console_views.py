"""What the web console shows, as JSON-ready dicts: pure functions of a tree, of ``mntr``
answers and of the four-letter words' data (no I/O; ``zabby.server.adminport.console`` gathers).

- ``node_view``: one znode for the tree browser: Stat, ACL, data (base64; the page shows it
  as text, JSON or hex) and one page of its sorted children.
- ``ensemble_rows``: one row per server from each one's ``mntr``, with its lag behind the
  most advanced server in txns (zxids of one epoch differ by their counters).
- ``sessions_view`` / ``watches_view``: the sessions this server tracks (expiry, ephemerals,
  the connection if it is here) and the watches set on it.
"""

from __future__ import annotations

import base64
from dataclasses import asdict, dataclass, replace
from typing import Any

from zabby.errors import ZabbyError
from zabby.tree import acl as acls
from zabby.tree.datatree import DataTree, shown_data
from zabby.tree.paths import validate_path
from zabby.wire.fourletter import parse_mntr

CHILDREN_PAGE_MAX = 1000
SERVING_MODES = frozenset({"leader", "follower", "observer", "standalone"})


class BadRequest(ValueError):
    """A console request with a bad argument; the message is shown to the user."""


def _stat(node: Any) -> dict[str, Any]:
    return {
        "czxid": f"0x{node.czxid:x}", "mzxid": f"0x{node.mzxid:x}", "pzxid": f"0x{node.pzxid:x}",
        "ctime": node.ctime, "mtime": node.mtime, "version": node.version, "cversion": node.cversion,
        "aversion": node.aversion, "ephemeralOwner": f"0x{node.ephemeral_owner % 2**64:x}",
        "dataLength": len(node.data), "numChildren": len(node.children),
    }  # fmt: skip


def node_view(tree: DataTree, path: str, offset: int = 0, limit: int = 100, auth_ids: list[acls.AuthId] | None = None,
              superuser: bool = False) -> dict[str, Any]:  # fmt: skip
    """One znode and the children ``[offset, offset + limit)`` of its sorted list, as a client
    proving ``auth_ids`` would read them: NOAUTH without READ, and the ACL's digest ids as
    getACL shows them (hidden without ADMIN).

    Raises:
        BadRequest: a malformed path, or a page outside ``0 <= offset``, ``1 <= limit <= 1000``.
    """
    try:
        validate_path(path)
    except ZabbyError as exc:
        raise BadRequest(f"bad path {path!r}: {exc}") from None
    if offset < 0 or not 1 <= limit <= CHILDREN_PAGE_MAX:
        raise BadRequest(f"bad page: offset {offset}, limit {limit} (1..{CHILDREN_PAGE_MAX})")
    node = tree.get(path)
    if node is None:
        return {"path": path, "exists": False}
    ids = auth_ids or []
    if not acls.check(node.acl, acls.READ, ids, superuser):
        return {"path": path, "exists": True, "error": "NOAUTH: insufficient permission to read it (log in as a user its ACL names)"}
    admin = acls.check(node.acl, acls.ADMIN, ids, superuser)
    children = node.listing()
    return {
        "path": path,
        "exists": True,
        "stat": _stat(node),
        "acl": [f"{scheme}:{ident if admin or scheme != 'digest' else ident.partition(':')[0] + ':x'}:{acls.perms_to_letters(perms)}"
                for perms, scheme, ident in node.acl],  # fmt: skip
        "data_base64": None if shown_data(node.data) is None else base64.b64encode(node.data).decode("ascii"),
        "children": list(children[offset : offset + limit]),
        "children_total": len(children),
        "offset": offset,
        "limit": limit,
    }


# ----------------------------------------------------------------------------- ensemble
@dataclass(frozen=True, slots=True)
class ServerRow:
    sid: int
    address: str
    mode: str  # leader, follower, ..., "not serving", "down", or "error"
    zxid: int | None = None
    digest: str | None = None
    connections: int | None = None
    latency_avg_ms: float | None = None
    latency_max_ms: float | None = None
    lag_txns: int | None = None  # behind the most advanced server; None across epochs
    note: str = ""
    this_server: bool = False

    def as_dict(self) -> dict[str, Any]:
        row = asdict(self)
        row["zxid"] = None if self.zxid is None else f"0x{self.zxid:x}"
        return row


def row_from_mntr(sid: int, address: str, answer: str) -> ServerRow:
    """A server's row from its ``mntr`` answer (or what it said instead)."""
    figures = parse_mntr(answer)
    if "zk_server_state" not in figures:
        mode = "not serving" if "not currently serving" in answer else "error"
        return ServerRow(sid, address, mode, note=answer.strip()[:200])
    return ServerRow(
        sid, address, figures["zk_server_state"], zxid=int(figures["zk_last_zxid"], 16), digest=figures.get("zk_digest"),
        connections=int(figures["zk_num_alive_connections"]), latency_avg_ms=float(figures["zk_avg_latency"]),
        latency_max_ms=float(figures["zk_max_latency"]),
    )  # fmt: skip


def ensemble_rows(rows: list[ServerRow]) -> list[ServerRow]:
    """The rows with their lag, and a note where servers at one zxid hold other digests."""
    zxids = [row.zxid for row in rows if row.zxid is not None]
    if not zxids:
        return rows
    ahead = max(zxids)
    digests: dict[int, set[str | None]] = {}
    for row in rows:
        if row.zxid is not None:
            digests.setdefault(row.zxid, set()).add(row.digest)
    out = []
    for row in rows:
        if row.zxid is None:
            out.append(row)
            continue
        lag = ahead - row.zxid if row.zxid >> 32 == ahead >> 32 else None
        note = "digest differs from another server at this zxid" if len(digests[row.zxid]) > 1 else row.note
        out.append(replace(row, lag_txns=lag, note=note))
    return out


# ----------------------------------------------------------------------------- sessions, watches
def sessions_view(dump: dict[str, Any], cons: dict[str, Any], now_ms: int) -> list[dict[str, Any]]:
    """One entry per session tracked here or connected here: when it expires, its ephemerals,
    and its connection if here.  A follower tracks no expiries (its leader does): its
    connected sessions are listed with ``expires_in_ms`` None.

    Args:
        dump: the ``dump`` command's data; cons: the ``cons`` command's data; now_ms: the
            server's monotonic clock, the one the expiry times are on (not a date).
    """
    connections = {c["session_id"]: c for c in cons["connections"] if c["session_id"] != "0x0"}
    ephemerals = dump["session_id_to_ephemeral_paths"]
    expiries = {session_id: int(expiry) for expiry, ids in dump["expiry_time_to_session_ids"].items() for session_id in ids}
    sessions = []
    for session_id in expiries.keys() | connections.keys():
        conn = connections.get(session_id, {})
        expiry = expiries.get(session_id)
        sessions.append({
            "session_id": session_id, "expires_in_ms": None if expiry is None else max(0, expiry - now_ms),
            "ephemerals": ephemerals.get(session_id, []), "client": conn.get("remote_socket_address"),
            "timeout_ms": conn.get("session_timeout"), "last_operation": conn.get("last_operation"),
            "avg_latency_ms": conn.get("avg_latency"),
        })  # fmt: skip
    return sorted(sessions, key=lambda s: int(s["session_id"], 16))


def watches_view(wchs: dict[str, Any], wchp: dict[str, Any]) -> dict[str, Any]:
    """The watch summary and, per watched path, the sessions watching it (``cut``: how many of
    how many watches are listed, where watchListMax cut the list)."""
    summary = {key: value for key, value in wchs.items() if key not in ("command", "error")}
    by_path = [{"path": path, "sessions": ids} for path, ids in wchp["path_to_session_ids"].items()]
    return {"summary": summary, "by_path": by_path, "cut": wchp.get("cut")}
