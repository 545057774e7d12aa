"""Four-letter words: ZooKeeper's text answers, and the same figures as dicts for the admin
HTTP endpoint.  Each command is a function of the server's state; nothing here does I/O
except reading /proc for file-descriptor counts and the data folders' sizes."""

from __future__ import annotations

import os
import platform
import resource
import socket
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from zabby._version import __version__

if TYPE_CHECKING:
    from zabby.server.node import ZabbyServer

NOT_SERVING = "This ZooKeeper instance is not currently serving requests\n"
VERSION = f"3.8.4-zabby-{__version__}"
BUILT_ON = "built on 2026-11-22 00:00 UTC"


def _hex(value: int) -> str:
    return f"0x{value:x}"


def _fd_counts() -> tuple[int, int]:
    try:
        open_fds = len(os.listdir("/proc/self/fd"))
    except OSError:
        open_fds = -1
    return open_fds, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def mntr_data(server: ZabbyServer) -> dict[str, Any]:
    stats, tree = server.stats, server.tree
    open_fds, max_fds = _fd_counts()
    return {
        "version": f"{VERSION}, {BUILT_ON}",
        "server_state": server.state,
        "avg_latency": round(stats.latency.avg_ms, 4),
        "max_latency": round(stats.latency.max_ms, 4),
        "min_latency": round(stats.latency.min_ms, 4),
        "packets_received": stats.packets_received,
        "packets_sent": stats.packets_sent,
        "num_alive_connections": len(server.connections),
        "outstanding_requests": server.outstanding,
        "znode_count": tree.node_count(),
        "watch_count": server.watches.count(),
        "ephemerals_count": tree.ephemeral_count(),
        "approximate_data_size": tree.data_size,
        "open_file_descriptor_count": open_fds,
        "max_file_descriptor_count": max_fds,
        "uptime": int((time.time() - stats.started_s) * 1000),
        "last_zxid": _hex(tree.last_zxid),
        "digest": f"0x{tree.digest:016x}",  # the tree digest at last_zxid
        "digest_mismatches_count": stats.digest_mismatches,
        "core_restarts_count": stats.repairs,
        "global_sessions": len(server.sessions),
        "local_sessions": 0,
        "quorum_size": server.peer.quorum.size,
        "auth_failed_count": stats.auth_failed_count,
        "connection_rejected": stats.connection_rejected,
        "connection_drop_count": stats.connection_drop_count,
        "large_requests_rejected": stats.large_requests_rejected,
        "commit_count": stats.commit_count,
        "snap_count": stats.snap_count,
        "diff_count": stats.diff_count,
        "ttl_node_deleted_count": stats.ttl_node_deleted_count,
        "last_client_response_size": stats.last_client_response_size,
        "startup_txns_loaded": stats.startup_txns_loaded,
        "startup_snap_load_time": round(stats.startup_load_ms, 3),
        "avg_fsynctime": round(stats.fsync.avg_ms, 4),
        "min_fsynctime": round(stats.fsync.min_ms, 4),
        "max_fsynctime": round(stats.fsync.max_ms, 4),
        "cnt_fsynctime": stats.fsync.count,
        "sum_fsynctime": round(stats.fsync.total_ms, 4),
        "avg_snapshottime": round(stats.snapshot.avg_ms, 4),
        "cnt_snapshottime": stats.snapshot.count,
        **server.learner_counts(),
        **_proposal_sizes(server),
    }


def _proposal_sizes(server: ZabbyServer) -> dict[str, int]:
    if not server.is_leader:
        return {}
    last, smallest, largest = server.last_proposal_bytes
    return {"last_proposal_size": last, "min_proposal_size": smallest, "max_proposal_size": largest}


def srvr_data(server: ZabbyServer) -> dict[str, Any]:
    stats = server.stats
    return {
        "version": f"{VERSION}, {BUILT_ON}",
        "read_only": False,
        "server_stats": {
            "packets_sent": stats.packets_sent,
            "packets_received": stats.packets_received,
            "max_latency": stats.latency.max_ms,
            "min_latency": stats.latency.min_ms,
            "avg_latency": stats.latency.avg_ms,
            "outstanding_requests": server.outstanding,
            "last_processed_zxid": server.tree.last_zxid,
            "num_alive_client_connections": len(server.connections),
            "server_state": server.state,
            "node_count": server.tree.node_count(),
        },
        "client_response": {"last_buffer_size": stats.last_client_response_size},
    }


def _srvr_text(server: ZabbyServer, clients: bool) -> str:
    stats = server.stats
    lines = [f"Zookeeper version: {VERSION}, {BUILT_ON}"]
    if clients:
        lines.append("Clients:")
        lines.extend(f" /{c.address[0]}:{c.address[1]}[1](queued=0,recved={c.received},sent={c.sent})" for c in server.connections)
        lines.append("")
    lines += [
        f"Latency min/avg/max: {stats.latency.min_ms:.0f}/{stats.latency.avg_ms:.4f}/{stats.latency.max_ms:.0f}",
        f"Received: {stats.packets_received}",
        f"Sent: {stats.packets_sent}",
        f"Connections: {len(server.connections)}",
        f"Outstanding: {server.outstanding}",
        f"Zxid: {_hex(server.tree.last_zxid)}",
        f"Mode: {server.state}",
        f"Node count: {server.tree.node_count()}",
    ]
    return "\n".join(lines) + "\n"


def conf_data(server: ZabbyServer) -> dict[str, Any]:
    c = server.config
    return {
        "clientPort": c.client_port,
        "secureClientPort": -1,
        "dataDir": str(c.data_dir / "version-2"),
        "dataDirSize": server.datadir.data_dir_bytes(),
        "dataLogDir": str(c.data_log_dir / "version-2"),
        "dataLogSize": server.datadir.log_dir_bytes(),
        "tickTime": c.tick_ms,
        "maxClientCnxns": c.client_connections_per_ip_max,
        "minSessionTimeout": c.session_timeout_ms_min,
        "maxSessionTimeout": c.session_timeout_ms_max,
        "clientPortListenBacklog": -1,
        "serverId": c.server_id,
        **_quorum_conf(server),
    }


def _quorum_conf(server: ZabbyServer) -> dict[str, Any]:
    c = server.config
    me = next((p for p in c.peers if p.sid == c.server_id), None)
    if me is None:
        return {}
    members = {f"server.{p.sid}": f"{p.host}:{p.quorum_port}:{p.election_port}:{'observer' if p.observer else 'participant'}"
               for p in c.peers}  # fmt: skip
    return {
        "initLimit": c.init_limit_ticks,
        "syncLimit": c.sync_limit_ticks,
        "electionAlg": 3,
        "electionPort": me.election_port,
        "quorumPort": me.quorum_port,
        "peerType": 1 if me.observer else 0,
        "membership": "",
        **members,
    }


def cons_data(server: ZabbyServer) -> dict[str, Any]:
    out = []
    for conn in sorted(server.connections, key=lambda c: c.established_ms):
        out.append({
            "remote_socket_address": f"{conn.address[0]}:{conn.address[1]}",
            "interest_ops": 1,
            "outstanding_requests": len(conn._slots),
            "packets_received": conn.received,
            "packets_sent": conn.sent,
            "session_id": _hex(conn.session_id),
            "last_operation": conn.last_op,
            "established": conn.established_ms,
            "session_timeout": conn.timeout_ms,
            "last_cxid": _hex(conn.last_cxid),
            "last_zxid": _hex(conn.last_zxid),
            "last_response_time": conn.last_response_ms,
            "last_latency": round(conn.latency.max_ms, 3),
            "min_latency": round(conn.latency.min_ms, 3),
            "avg_latency": round(conn.latency.avg_ms, 3),
            "max_latency": round(conn.latency.max_ms, 3),
        })  # fmt: skip
    return {"connections": out}


def _cons_text(server: ZabbyServer) -> str:
    lines = []
    for c in cons_data(server)["connections"]:
        lines.append(
            f" /{c['remote_socket_address']}[1](queued={c['outstanding_requests']},recved={c['packets_received']},"
            f"sent={c['packets_sent']},sid={c['session_id']},lop={c['last_operation']},est={c['established']},"
            f"to={c['session_timeout']},lcxid={c['last_cxid']},lzxid={c['last_zxid']},lresp={c['last_response_time']},"
            f"llat={c['last_latency']},minlat={c['min_latency']},avglat={c['avg_latency']},maxlat={c['max_latency']})"
        )
    return "\n".join(lines) + "\n\n"


def envi_data(server: ZabbyServer) -> dict[str, Any]:
    return {
        "zookeeper.version": f"{VERSION}, {BUILT_ON}",
        "host.name": socket.gethostname(),
        "python.version": sys.version.split()[0],
        "python.implementation": platform.python_implementation(),
        "python.executable": sys.executable,
        "os.name": platform.system(),
        "os.arch": platform.machine(),
        "os.version": platform.release(),
        "user.name": os.environ.get("USER", ""),
        "user.home": os.path.expanduser("~"),
        "user.dir": os.getcwd(),
        "os.memory.maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def wchs_data(server: ZabbyServer) -> dict[str, Any]:
    by_watcher = server.watches.paths_by_watcher()
    return {
        "num_connections": len(by_watcher),
        "num_paths": len(server.watches.watchers_by_path()),
        "num_total_watches": server.watches.count(),
    }


def wchc_data(server: ZabbyServer) -> dict[str, Any]:
    by_watcher = server.watches.paths_by_watcher()
    return {"session_id_to_watched_paths": {_hex(conn.session_id): sorted(paths) for conn, paths in by_watcher.items()}}


def wchp_data(server: ZabbyServer) -> dict[str, Any]:
    by_path = server.watches.watchers_by_path()
    return {"path_to_session_ids": {path: sorted(_hex(c.session_id) for c in conns) for path, conns in sorted(by_path.items())}}


def dump_data(server: ZabbyServer) -> dict[str, Any]:
    return {
        "expiry_time_to_session_ids": {str(k): [_hex(s) for s in v] for k, v in server.sessions.expiry_buckets().items()},
        "session_id_to_ephemeral_paths": {_hex(s): sorted(p) for s, p in sorted(server.tree.ephemerals.items())},
    }


def _dump_text(server: ZabbyServer) -> str:
    data = dump_data(server)
    lines = ["SessionTracker dump:", f"Session Sets ({len(data['expiry_time_to_session_ids'])})/({len(server.sessions)}):"]
    for expiry, sessions in data["expiry_time_to_session_ids"].items():
        lines.append(f"{len(sessions)} expire at {expiry}:")
        lines.extend(f"\t{s}" for s in sessions)
    ephemerals = data["session_id_to_ephemeral_paths"]
    lines.append("ephemeral nodes dump:")
    lines.append(f"Sessions with Ephemerals ({len(ephemerals)}):")
    for session, paths in ephemerals.items():
        lines.append(f"{session}:")
        lines.extend(f"\t{p}" for p in paths)
    return "\n".join(lines) + "\n"


def dirs_data(server: ZabbyServer) -> dict[str, Any]:
    return {"datadir_size": server.datadir.data_dir_bytes(), "logdir_size": server.datadir.log_dir_bytes()}


def _crst(server: ZabbyServer) -> dict[str, Any]:
    for conn in server.connections:
        conn.latency.reset()
        conn.received = conn.sent = 0
    return {}


def _srst(server: ZabbyServer) -> dict[str, Any]:
    server.stats.reset()
    return {}


def _kv_text(data: dict[str, Any]) -> str:
    return "".join(f"{k}: \n" if k == "membership" else f"{k}={v}\n" for k, v in data.items())


def _grouped_text(data: dict[str, list[str]]) -> str:
    return "".join(f"{key}\n" + "".join(f"\t{v}\n" for v in values) for key, values in data.items())


TextCommand = Callable[["ZabbyServer"], str]

TEXT: dict[str, TextCommand] = {
    "ruok": lambda s: "imok",
    "srvr": lambda s: _srvr_text(s, clients=False),
    "stat": lambda s: _srvr_text(s, clients=True),
    "mntr": lambda s: "".join(f"zk_{k}\t{v}\n" for k, v in mntr_data(s).items()),
    "conf": lambda s: _kv_text(conf_data(s)),
    "cons": _cons_text,
    "envi": lambda s: "Environment:\n" + _kv_text(envi_data(s)),
    "wchs": lambda s: (lambda d: f"{d['num_connections']} connections watching {d['num_paths']} paths\nTotal watches:{d['num_total_watches']}\n")(wchs_data(s)),
    "wchc": lambda s: _grouped_text(wchc_data(s)["session_id_to_watched_paths"]),
    "wchp": lambda s: _grouped_text(wchp_data(s)["path_to_session_ids"]),
    "dump": _dump_text,
    "isro": lambda s: "rw",
    "crst": lambda s: (_crst(s), "Connection stats reset.\n")[1],
    "srst": lambda s: (_srst(s), "Server stats reset.\n")[1],
    "dirs": lambda s: "".join(f"{k}: {v}\n" for k, v in dirs_data(s).items()),
}
WORDS = frozenset(TEXT)
NEEDS_SERVING = frozenset({"srvr", "stat", "mntr", "cons", "wchs", "wchc", "wchp", "dump", "crst", "srst"})

DATA: dict[str, Callable[["ZabbyServer"], dict[str, Any]]] = {
    "ruok": lambda s: {},
    "srvr": srvr_data,
    "stat": lambda s: {**srvr_data(s), **cons_data(s)},
    "mntr": mntr_data,
    "conf": conf_data,
    "cons": cons_data,
    "envi": envi_data,
    "wchs": wchs_data,
    "wchc": wchc_data,
    "wchp": wchp_data,
    "dump": dump_data,
    "isro": lambda s: {"read_only": False},
    "crst": _crst,
    "srst": _srst,
    "dirs": dirs_data,
    "hash": lambda s: {"digests": [{"zxid": z, "digest": d} for z, d in reversed(s.tree.digest_log)]},
}


def answer(word: str, server: ZabbyServer) -> str:
    """The text a four-letter word gets on the client port."""
    if word not in server.config.four_letter_words:
        return f"{word} is not executed because it is not in the whitelist.\n"
    if word in NEEDS_SERVING and server.state not in ("standalone", "leader", "follower", "observer"):
        return NOT_SERVING
    return TEXT[word](server)
