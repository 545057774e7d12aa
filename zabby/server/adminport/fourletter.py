"""Four-letter words: ZooKeeper's text answers, and the same figures as dicts for the admin
HTTP endpoint.

Each command is a function of a frozen ``ServerStatistics`` (``zabby.server.adminport.statistics``),
taken with the parts the command names in ``PARTS``; nothing here reads the live server.
crst and srst change state through the ``reset`` hook their caller passes in.  ``envi``
reads the process's environment, which is no server state.
"""

from __future__ import annotations

import os
import platform
import resource
import socket
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from zabby._version import __version__
from zabby.config import ServerConfig
from zabby.membership import Membership
from zabby.errors import InvariantError
from zabby.server.adminport.statistics import Part, Reset, ServerStatistics
from zabby.engine.stats import LatencyFigures

T = TypeVar("T")
ResetHook = Callable[[Reset], None]

NOT_SERVING = "This ZooKeeper instance is not currently serving requests\n"
READ_ONLY = "read-only"  # the mode of a server serving reads without a quorum (srvr, isro)
VERSION = f"3.8.4-zabby-{__version__}"
BUILT_ON = "built on 2026-11-22 00:00 UTC"


def _hex(value: int) -> str:
    return f"0x{value:x}"


def _part(value: T | None, part: Part) -> T:
    """A part of the snapshot that a command reads; PARTS must name it for that command."""
    if value is None:
        raise InvariantError(f"the statistics were taken without {part}")
    return value


WORD_CHUNK_CHARS = 8192  # ZooKeeper writes a word's answer through a BufferedWriter: one packet per buffer


def packets(answer: bytes) -> int:
    """The packets ZooKeeper counts as sent for a four-letter word's ``answer``."""
    return max(1, -(-len(answer) // WORD_CHUNK_CHARS))


def znode_count(s: ServerStatistics) -> int:
    """ZooKeeper's node count: its DataTree holds the root twice ("" and its alias "/")."""
    return s.znode_count + 1


def _summary(name: str, figures: LatencyFigures) -> dict[str, Any]:
    """A ZooKeeper summary (AvgMinMaxCounter) in whole ms: avg to 4 places, the rest integers."""
    return {
        f"avg_{name}": round(figures.avg_ms, 4),
        f"min_{name}": round(figures.min_ms),
        f"max_{name}": round(figures.max_ms),
        f"cnt_{name}": figures.count,
        f"sum_{name}": round(figures.total_ms),
    }


def _once(name: str, value: float) -> dict[str, Any]:
    """A ZooKeeper summary that got one value (at start-up)."""
    return _summary(name, LatencyFigures(count=1, total_ms=value, min_ms=value, max_ms=value, avg_ms=value))


def mntr_data(s: ServerStatistics) -> dict[str, Any]:
    """ZooKeeper 3.8's mntr keys, each with ZooKeeper's meaning (docs/operations.md lists them
    all, and those zabby leaves out), then zabby's own."""
    stats = s.counters
    open_fds, max_fds = _part(s.file_descriptors, Part.PROCESS)
    return {
        "version": f"{VERSION}, {BUILT_ON}",
        "server_state": s.state,
        "avg_latency": round(stats.latency.avg_ms, 4),
        "max_latency": round(stats.latency.max_ms),  # ZooKeeper's latencies are whole ms
        "min_latency": round(stats.latency.min_ms),
        "packets_received": stats.packets_received,
        "packets_sent": stats.packets_sent,
        "num_alive_connections": s.connection_count,
        "outstanding_requests": s.outstanding_requests,
        "znode_count": znode_count(s),
        "watch_count": s.watch_count,
        "ephemerals_count": s.ephemerals_count,
        "approximate_data_size": s.approximate_data_size,
        "open_file_descriptor_count": open_fds,
        "max_file_descriptor_count": max_fds,
        "uptime": s.uptime_ms,
        "global_sessions": s.session_count,
        "local_sessions": 0,
        "connection_drop_probability": 0.0,  # zabby has no connection throttle that drops at random
        "last_client_response_size": stats.last_client_response_size,
        "max_client_response_size": stats.max_client_response_size,
        "min_client_response_size": stats.min_client_response_size,
        "auth_failed_count": stats.auth_failed_count,
        "auth_throttled_count": stats.auth_throttled_count,
        **({"quorum_size": s.quorum_size} if s.membership is not None else {}),  # QuorumZooKeeperServer's
        **dict(s.learner_counts),  # the leader's
        **_proposal_sizes(s),
        **{f"{namespace}_{name}": value for name, values in quota_metrics(s).items() for namespace, value in values.items()},
        "digest_mismatches_count": stats.digest_mismatches,
        "connection_rejected": stats.connection_rejected,
        "connection_drop_count": stats.connection_drop_count,
        "large_requests_rejected": stats.large_requests_rejected,
        "commit_count": stats.commit_count,
        "snap_count": stats.snap_count,
        "diff_count": stats.diff_count,
        "ttl_node_deleted_count": stats.ttl_node_deleted_count,
        **_summary("fsynctime", stats.fsync),
        **_summary("snapshottime", stats.snapshot),
        **_once("startup_snap_load_time", stats.startup_snap_load_ms),
        **_once("startup_txns_load_time", stats.startup_txns_load_ms),
        **_once("startup_txns_loaded", stats.startup_txns_loaded),
        # zabby's own
        "last_zxid": _hex(s.last_zxid),
        "digest": f"0x{s.digest:016x}",  # the tree digest at last_zxid
        "core_restarts_count": stats.repairs,
        "digests_checked": stats.zk_digests_checked,  # quorum.protocol=zookeeper: a learner's txns whose leader's digest it compared
        "startup_load_time": round(stats.startup_load_ms, 3),  # the whole recovery, in ms
        "client_memory_bytes": s.client_memory.used_bytes,  # the client port's memory budget
        "client_memory_peak_bytes": s.client_memory.peak_bytes,
        "client_memory_budget_bytes": s.client_memory.budget_bytes,
        "client_memory_closed_count": s.client_memory.closed_count,
    }


def quota_metrics(s: ServerStatistics) -> dict[str, dict[str, int]]:
    """ZooKeeper's per-namespace quota gauges: metric name → {namespace: value}.  mntr writes
    them as ``zk_<namespace>_<name>``, /metrics as ``zk_<name>{key="<namespace>"}``."""
    return {
        "quota_count_limit_per_namespace": {q.namespace: q.count_limit for q in s.quotas},
        "quota_bytes_limit_per_namespace": {q.namespace: q.bytes_limit for q in s.quotas},
        "quota_count_usage_per_namespace": {q.namespace: q.count_usage for q in s.quotas},
        "quota_bytes_usage_per_namespace": {q.namespace: q.bytes_usage for q in s.quotas},
    }


def _proposal_sizes(s: ServerStatistics) -> dict[str, int]:
    if s.proposal_sizes is None or s.membership is None:
        return {}
    last, smallest, largest = s.proposal_sizes
    return {"last_proposal_size": last, "min_proposal_size": smallest, "max_proposal_size": largest}


def srvr_data(s: ServerStatistics) -> dict[str, Any]:
    stats = s.counters
    return {
        "version": f"{VERSION}, {BUILT_ON}",
        "read_only": s.state == READ_ONLY,
        "server_stats": {
            "packets_sent": stats.packets_sent,
            "packets_received": stats.packets_received,
            "max_latency": stats.latency.max_ms,
            "min_latency": stats.latency.min_ms,
            "avg_latency": stats.latency.avg_ms,
            "outstanding_requests": s.outstanding_requests,
            "last_processed_zxid": s.last_zxid,
            "num_alive_client_connections": s.connection_count,
            "server_state": s.state,
            "node_count": znode_count(s),
        },
        "client_response": {"last_buffer_size": stats.last_client_response_size},
    }


def _srvr_text(s: ServerStatistics, clients: bool) -> str:
    stats = s.counters
    lines = [f"Zookeeper version: {VERSION}, {BUILT_ON}"]
    if clients:
        lines.append("Clients:")
        lines.extend(f" /{c.address[0]}:{c.address[1]}[1](queued=0,recved={c.packets_received},sent={c.packets_sent})"
                     for c in _part(s.connections, Part.CONNECTIONS))  # fmt: skip
        lines.append("")
    lines += [
        f"Latency min/avg/max: {stats.latency.min_ms:.0f}/{stats.latency.avg_ms:.4f}/{stats.latency.max_ms:.0f}",
        f"Received: {stats.packets_received}",
        f"Sent: {stats.packets_sent}",
        f"Connections: {s.connection_count}",
        f"Outstanding: {s.outstanding_requests}",
        f"Zxid: {_hex(s.last_zxid)}",
        f"Mode: {s.state}",
        f"Node count: {znode_count(s)}",
    ]
    return "\n".join(lines) + "\n"


def conf_data(s: ServerStatistics) -> dict[str, Any]:
    c = s.config
    data_dir_bytes, log_dir_bytes = _part(s.disk_bytes, Part.DISK)
    return {
        "clientPort": c.client_port if c.client_port is not None else -1,
        "secureClientPort": c.secure_client_port if c.secure_client_port is not None else -1,
        "dataDir": str(c.data_dir / "version-2"),
        "dataDirSize": data_dir_bytes,
        "dataLogDir": str(c.data_log_dir / "version-2"),
        "dataLogSize": log_dir_bytes,
        "tickTime": c.tick_ms,
        "maxClientCnxns": c.client_connections_per_ip_max,
        "minSessionTimeout": c.session_timeout_ms_min,
        "maxSessionTimeout": c.session_timeout_ms_max,
        "clientPortListenBacklog": -1,
        "serverId": c.server_id,
        **_quorum_conf(c, s.membership),
    }


def _quorum_conf(c: ServerConfig, membership: Membership | None) -> dict[str, Any]:
    """ZooKeeper's quorum lines and the dynamic configuration in force (``membership:``)."""
    me = next((p for p in c.peers if p.sid == c.server_id), None)
    if me is None or membership is None:
        return {}
    members = {f"server.{m.sid}": m.spec() for m in membership.members}
    return {
        "initLimit": c.init_limit_ticks,
        "syncLimit": c.sync_limit_ticks,
        "electionAlg": 3,
        "electionPort": me.election_port,
        "quorumPort": me.quorum_port,
        "peerType": 1 if me.observer else 0,
        "membership": "",
        **members,
        "version": f"{membership.version:x}",
    }


def voting_view_data(s: ServerStatistics) -> dict[str, Any]:
    """ZooKeeper's AdminServer ``voting_view``: the voting members of the committed membership,
    each as its QuorumServerView (``current_config`` is empty on a standalone server)."""
    if s.membership is None:
        return {"current_config": {}}
    view = {}
    for m in s.membership.members:
        if m.observer:
            continue
        client_host = m.client_host or "0.0.0.0"
        view[m.sid] = {
            "server_addresses": [f"{m.host}:{m.quorum_port}"],
            "election_addresses": [f"{m.host}:{m.election_port}"],
            "client_address": f"{client_host}:{m.client_port}" if m.client_port is not None else "",
            "learner_type": "participant",
        }
    return {"current_config": view}


SECRET_KEYS = frozenset({"superdigest", "zookeeper.superdigest", "admin.console.auth"})  # lower-cased


def is_secret(key: str) -> bool:
    """Whether a zoo.cfg key's value is a secret: a password, or a digest that stands for
    one (superDigest, admin.console.auth: unsalted SHA-1, open to guessing offline)."""
    lowered = key.strip().lower()
    return "password" in lowered or lowered in SECRET_KEYS


def _masked(config_text: str) -> str:
    """The zoo.cfg text with the value of every secret key hidden (``is_secret``; ZooKeeper's
    initial_configuration shows the file as it is)."""
    lines = []
    for line in config_text.splitlines(keepends=True):
        key, sep, _ = line.partition("=")
        lines.append(f"{key}=********\n" if sep and is_secret(key) else line)
    return "".join(lines)


def cons_data(s: ServerStatistics) -> dict[str, Any]:
    out = []
    for conn in sorted(_part(s.connections, Part.CONNECTIONS), key=lambda c: c.established_ms):
        out.append({
            "remote_socket_address": f"{conn.address[0]}:{conn.address[1]}",
            "interest_ops": 1,
            "outstanding_requests": conn.outstanding_requests,
            "packets_received": conn.packets_received,
            "packets_sent": conn.packets_sent,
            "session_id": _hex(conn.session_id),
            "last_operation": conn.last_operation,
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


def _cons_text(s: ServerStatistics) -> str:
    lines = []
    for c in cons_data(s)["connections"]:
        lines.append(
            f" /{c['remote_socket_address']}[1](queued={c['outstanding_requests']},recved={c['packets_received']},"
            f"sent={c['packets_sent']},sid={c['session_id']},lop={c['last_operation']},est={c['established']},"
            f"to={c['session_timeout']},lcxid={c['last_cxid']},lzxid={c['last_zxid']},lresp={c['last_response_time']},"
            f"llat={c['last_latency']},minlat={c['min_latency']},avglat={c['avg_latency']},maxlat={c['max_latency']})"
        )
    return "\n".join(lines) + "\n\n"


def envi_data(s: ServerStatistics) -> dict[str, Any]:
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


def wchs_data(s: ServerStatistics) -> dict[str, Any]:
    watches = _part(s.watches, Part.WATCHES)
    return {
        "num_connections": watches.connections,
        "num_paths": watches.paths,
        "num_total_watches": s.watch_count,
    }


def _cut(s: ServerStatistics) -> dict[str, Any]:
    """``{"cut": {listed, total}}`` where a listing shows fewer than all the watches
    (``watchListMax``); nothing where it shows them all."""
    cut = _part(s.watches, Part.WATCHES).cut(s.watch_count)
    return {} if cut is None else {"cut": {**cut, "setting": "watchListMax"}}


def wchc_data(s: ServerStatistics) -> dict[str, Any]:
    by_watcher = _part(s.watches, Part.WATCHES).by_watcher
    return {"session_id_to_watched_paths": {_hex(session_id): sorted(paths) for session_id, paths in by_watcher}, **_cut(s)}


def wchp_data(s: ServerStatistics) -> dict[str, Any]:
    by_path = _part(s.watches, Part.WATCHES).by_path
    return {"path_to_session_ids": {path: sorted(_hex(session_id) for session_id in ids) for path, ids in sorted(by_path)}, **_cut(s)}


def _listing_text(data: dict[str, Any], key: str) -> str:
    """wchc's or wchp's text, and a last line where it was cut."""
    text = _grouped_text(data[key])
    cut = data.get("cut")
    return text if cut is None else text + f"(cut: {cut['listed']} of {cut['total']} watches listed; watchListMax)\n"


def dump_data(s: ServerStatistics) -> dict[str, Any]:
    sessions = _part(s.sessions, Part.SESSIONS)
    return {
        "expiry_time_to_session_ids": {str(k): [_hex(i) for i in v] for k, v in sessions.expiry_buckets},
        "session_id_to_ephemeral_paths": {_hex(i): sorted(p) for i, p in sorted(sessions.ephemerals)},
    }


def _dump_text(s: ServerStatistics) -> str:
    data = dump_data(s)
    lines = ["SessionTracker dump:", f"Session Sets ({len(data['expiry_time_to_session_ids'])})/({s.session_count}):"]
    for expiry, sessions in data["expiry_time_to_session_ids"].items():
        lines.append(f"{len(sessions)} expire at {expiry}:")
        lines.extend(f"\t{session_id}" for session_id in sessions)
    ephemerals = data["session_id_to_ephemeral_paths"]
    lines.append("ephemeral nodes dump:")
    lines.append(f"Sessions with Ephemerals ({len(ephemerals)}):")
    for session, paths in ephemerals.items():
        lines.append(f"{session}:")
        lines.extend(f"\t{p}" for p in paths)
    return "\n".join(lines) + "\n"


def dirs_data(s: ServerStatistics) -> dict[str, Any]:
    data_dir_bytes, log_dir_bytes = _part(s.disk_bytes, Part.DISK)
    return {"datadir_size": data_dir_bytes, "logdir_size": log_dir_bytes}


def _kv_text(data: dict[str, Any]) -> str:
    return "".join(f"{k}: \n" if k == "membership" else f"{k}={v}\n" for k, v in data.items())


def _grouped_text(data: dict[str, list[str]]) -> str:
    return "".join(f"{key}\n" + "".join(f"\t{v}\n" for v in values) for key, values in data.items())


TextCommand = Callable[[ServerStatistics], str]

TEXT: dict[str, TextCommand] = {
    "ruok": lambda s: "imok",
    "srvr": lambda s: _srvr_text(s, clients=False),
    "stat": lambda s: _srvr_text(s, clients=True),
    "mntr": lambda s: "".join(f"zk_{k}\t{v}\n" for k, v in mntr_data(s).items()),
    "conf": lambda s: _kv_text(conf_data(s)),
    "cons": _cons_text,
    "envi": lambda s: "Environment:\n" + _kv_text(envi_data(s)),
    "wchs": lambda s: (lambda d: f"{d['num_connections']} connections watching {d['num_paths']} paths\nTotal watches:{d['num_total_watches']}\n")(wchs_data(s)),
    "wchc": lambda s: _listing_text(wchc_data(s), "session_id_to_watched_paths"),
    "wchp": lambda s: _listing_text(wchp_data(s), "path_to_session_ids"),
    "dump": _dump_text,
    "isro": lambda s: "ro" if s.state == READ_ONLY else "rw",
    "crst": lambda s: "Connection stats reset.\n",
    "srst": lambda s: "Server stats reset.\n",
    "dirs": lambda s: "".join(f"{k}: {v}\n" for k, v in dirs_data(s).items()),
}
WORDS = frozenset(TEXT)
NEEDS_SERVING = frozenset({"srvr", "stat", "mntr", "cons", "wchs", "wchc", "wchp", "dump", "crst", "srst"})

DATA: dict[str, Callable[[ServerStatistics], dict[str, Any]]] = {
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
    "isro": lambda s: {"read_only": s.state == READ_ONLY},
    "crst": lambda s: {},
    "srst": lambda s: {},
    "dirs": dirs_data,
    "hash": lambda s: {"digests": [{"zxid": z, "digest": d} for z, d in _part(s.digests, Part.DIGESTS)]},
    # the AdminServer's own commands, no four-letter word
    "icfg": lambda s: {"initial_configuration": _masked(s.config.initial_text)},
    "voting_view": voting_view_data,
}

# What each command reads beyond the server's figures: the parts its snapshot must take.
PARTS: dict[str, Part] = {
    "stat": Part.CONNECTIONS, "cons": Part.CONNECTIONS, "mntr": Part.PROCESS, "conf": Part.DISK, "dirs": Part.DISK,
    "wchs": Part.WATCHES, "wchc": Part.WATCHES, "wchp": Part.WATCHES, "dump": Part.SESSIONS, "hash": Part.DIGESTS,
}  # fmt: skip
RESETS: dict[str, Reset] = {"crst": Reset.CONNECTIONS, "srst": Reset.SERVER}


def parts(word: str) -> Part:
    return PARTS.get(word, Part.NONE)


def answer(word: str, statistics: ServerStatistics, reset: ResetHook) -> str:
    """The text a four-letter word gets on the client port.

    Args:
      statistics: taken with ``parts(word)``.
      reset: called for crst and srst, once they are allowed.
    """
    if word not in statistics.config.four_letter_words:
        return f"{word} is not executed because it is not in the whitelist.\n"
    if word in NEEDS_SERVING and statistics.state not in ("standalone", "leader", "follower", "observer", READ_ONLY):
        return NOT_SERVING
    _reset(word, reset)
    return TEXT[word](statistics)


def data(word: str, statistics: ServerStatistics, reset: ResetHook) -> dict[str, Any]:
    """A command's figures for the admin endpoint (which has no whitelist), as ``answer``."""
    _reset(word, reset)
    return DATA[word](statistics)


def _reset(word: str, reset: ResetHook) -> None:
    what = RESETS.get(word)
    if what is not None:
        reset(what)
