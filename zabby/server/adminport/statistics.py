"""A frozen snapshot of one server's figures, for the four-letter words, the admin endpoint
and /metrics.

``snapshot`` is the only code that reads the live server for them (trio's ``statistics()``
rule): a command formats a ``ServerStatistics`` and never touches the server, so it can
neither change it nor see it change halfway through an answer.  The parts that cost
O(connections), O(watches), O(sessions), a walk of the data folders or a look at /proc are
taken only when a command asks for them (``Part``); a part not taken is None.  ``reset`` is
the explicit hook of the two commands that change state, crst and srst.
"""

from __future__ import annotations

import enum
import itertools
import os
import resource
import time
from collections.abc import Collection, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

from zabby.config import ServerConfig
from zabby.membership import Membership
from zabby.engine import ClientSink
from zabby.server.clients.budget import ClientMemory
from zabby.engine.stats import Counters, LatencyFigures, ServerStats
from zabby.tree.quota import QuotaFigures, figures

if TYPE_CHECKING:
    from zabby.server.process.descriptors import Descriptors
    from zabby.storage.datadir import DataDir
    from zabby.tree.datatree import DataTree
    from zabby.tree.sessions import SessionTracker
    from zabby.tree.watches import WatchManager


class Part(enum.Flag):
    NONE = 0
    CONNECTIONS = enum.auto()  # per-connection figures (stat, cons)
    WATCHES = enum.auto()  # the watch tables (wchs, wchc, wchp)
    SESSIONS = enum.auto()  # session expiry buckets and ephemerals (dump)
    DISK = enum.auto()  # sizes of the data folders (conf, dirs)
    PROCESS = enum.auto()  # file descriptors open and allowed (mntr)
    DIGESTS = enum.auto()  # the tree digests of the last txns (hash)
    DISK_SPACE = enum.auto()  # free and total bytes where the data folders live (/metrics)


class Reset(enum.Enum):
    CONNECTIONS = "crst"  # every connection's counters and latency
    SERVER = "srst"  # the server's packet counters and latency


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionStatistics:
    address: tuple[str, int]
    session_id: int  # 0 before the handshake
    timeout_ms: int
    established_ms: int  # wall clock
    outstanding_requests: int  # requests waiting for their reply
    packets_received: int
    packets_sent: int
    last_operation: str
    last_cxid: int
    last_zxid: int
    last_response_ms: int  # wall clock
    latency: LatencyFigures


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchTables:
    """The watches, listed up to ``watchListMax`` of them (the listings cost what they list),
    and counted in all."""

    by_watcher: tuple[tuple[int, tuple[str, ...]], ...]  # (session id, paths) per watching connection, of those listed
    by_path: tuple[tuple[str, tuple[int, ...]], ...]  # (path, session id of each watcher), of those listed
    listed: int  # watches listed: at most watchListMax
    connections: int  # sessions that hold a watch, all of them
    paths: int  # paths watched, all of them

    def cut(self, total: int) -> dict[str, int] | None:
        """What a listing says when it shows fewer than the ``total`` watches (None if all)."""
        return {"listed": self.listed, "total": total} if self.listed < total else None


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionTables:
    expiry_buckets: tuple[tuple[int, tuple[int, ...]], ...]  # (expiry time, session ids), as the tracker orders them
    ephemerals: tuple[tuple[int, tuple[str, ...]], ...]  # (session id, its ephemeral paths)


@dataclass(frozen=True, slots=True, kw_only=True)
class DiskSpace:
    folder: str  # "data" (dataDir: snapshots, epochs) or "log" (dataLogDir: the txn log)
    path: str
    free_bytes: int  # available to the server's user
    total_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientMemoryFigures:
    """The client port's memory budget (``zabby.server.clients.budget``)."""

    used_bytes: int  # held now for all connections: input, requests in flight, queued replies
    peak_bytes: int
    budget_bytes: int  # clientMemoryBudget
    connection_bytes_max: int  # clientConnectionMemoryMax
    closed_count: int  # connections closed for holding too much


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerStatistics:
    config: ServerConfig
    state: str  # standalone, leader, follower, observer, looking, syncing
    counters: Counters
    uptime_ms: int
    outstanding_requests: int
    connection_count: int
    session_count: int  # sessions this server tracks for expiry
    znode_count: int
    ephemerals_count: int
    approximate_data_size: int
    watch_count: int
    last_zxid: int
    digest: int  # the tree digest at last_zxid
    quorum_size: int
    membership: Membership | None  # the committed dynamic configuration (None: standalone)
    learner_counts: tuple[tuple[str, int], ...]  # the leader's (mntr name, count); empty elsewhere
    proposal_sizes: tuple[int, int, int] | None  # the leader's last, min, max proposal bytes
    connections: tuple[ConnectionStatistics, ...] | None = None
    watches: WatchTables | None = None
    sessions: SessionTables | None = None
    disk_bytes: tuple[int, int] | None = None  # (data dir, log dir)
    file_descriptors: tuple[int, int] | None = None  # (open, allowed); open is -1 without /proc
    digests: tuple[tuple[int, int], ...] | None = None  # (zxid, digest), newest first
    quotas: tuple[QuotaFigures, ...] = ()  # per namespace: O(quota roots), taken always
    current_epoch: int  # the Zab epoch this server last acknowledged (a new leader starts a new one)
    learner_acked: tuple[tuple[int, int], ...]  # the leader's (learner sid, last zxid it acked); empty elsewhere
    space_low: bool  # the txn log could not reserve space: writes are refused
    disk_space: tuple[DiskSpace, ...] | None = None
    client_memory: ClientMemoryFigures


class MonitoredConnection(Protocol):
    def statistics(self) -> ConnectionStatistics: ...

    def reset_statistics(self) -> None: ...


class Monitored(Protocol):
    """What ``snapshot`` and ``reset`` read of a server."""

    @property
    def config(self) -> ServerConfig: ...
    @property
    def state(self) -> str: ...
    @property
    def stats(self) -> ServerStats: ...
    @property
    def tree(self) -> DataTree: ...
    @property
    def watches(self) -> WatchManager: ...
    @property
    def sessions(self) -> SessionTracker: ...
    @property
    def connections(self) -> Collection[MonitoredConnection]: ...
    @property
    def outstanding(self) -> int: ...
    @property
    def client_memory(self) -> ClientMemory: ...
    @property
    def is_leader(self) -> bool: ...
    @property
    def last_proposal_bytes(self) -> tuple[int, int, int]: ...
    @property
    def quorum_size(self) -> int: ...
    @property
    def datadir(self) -> DataDir: ...
    @property
    def membership(self) -> Membership | None: ...
    @property
    def current_epoch(self) -> int: ...
    @property
    def space_low(self) -> bool: ...
    @property
    def descriptors(self) -> Descriptors: ...
    def learner_counts(self) -> dict[str, int]: ...
    def learner_acked(self) -> tuple[tuple[int, int], ...]: ...
    def warn_rate_limited(self, kind: str, message: str) -> None: ...
    def secret_attempt(self, source: str) -> bool: ...


def snapshot(server: Monitored, parts: Part = Part.NONE) -> ServerStatistics:
    """The server's figures as they are now, with the optional ``parts`` asked for."""
    tree, counters = server.tree, server.stats.statistics()
    return ServerStatistics(
        config=server.config,
        state=server.state,
        counters=counters,
        uptime_ms=int((time.time() - counters.started_s) * 1000),
        outstanding_requests=server.outstanding,
        connection_count=len(server.connections),
        session_count=len(server.sessions),
        znode_count=tree.node_count(),
        ephemerals_count=tree.ephemeral_count(),
        approximate_data_size=tree.data_size,
        watch_count=server.watches.count(),
        last_zxid=tree.last_zxid,
        digest=tree.digest,
        quorum_size=server.quorum_size,
        membership=server.membership,
        learner_counts=tuple(server.learner_counts().items()),
        proposal_sizes=server.last_proposal_bytes if server.is_leader else None,
        connections=tuple(c.statistics() for c in server.connections) if Part.CONNECTIONS in parts else None,
        watches=_watch_tables(server.watches, server.config.watch_list_max) if Part.WATCHES in parts else None,
        sessions=_session_tables(server) if Part.SESSIONS in parts else None,
        disk_bytes=(server.datadir.data_dir_bytes(), server.datadir.log_dir_bytes()) if Part.DISK in parts else None,
        file_descriptors=_file_descriptors() if Part.PROCESS in parts else None,
        digests=tuple(reversed(tree.digest_log)) if Part.DIGESTS in parts else None,
        quotas=figures(tree),
        current_epoch=server.current_epoch,
        learner_acked=server.learner_acked(),
        space_low=server.space_low,
        disk_space=_disk_space(server.datadir) if Part.DISK_SPACE in parts else None,
        client_memory=_client_memory(server.client_memory),
    )


def _client_memory(memory: ClientMemory) -> ClientMemoryFigures:
    return ClientMemoryFigures(used_bytes=memory.used_bytes, peak_bytes=memory.peak_bytes, budget_bytes=memory.budget_bytes,
                               connection_bytes_max=memory.connection_bytes_max, closed_count=memory.closed_count)  # fmt: skip


def reset(server: Monitored, what: Reset) -> None:
    """crst and srst: zero the counters they name."""
    if what is Reset.SERVER:
        server.stats.reset()
        return
    for conn in server.connections:
        conn.reset_statistics()


def _session_id(watcher: Hashable) -> int:
    return cast(ClientSink, watcher).session_id  # the watchers are the engine's client sinks


def _watch_tables(watches: WatchManager, listed_max: int) -> WatchTables:
    """The first ``listed_max`` (path, watcher) pairs of the tables, both ways, and the counts
    of watchers and paths over all of them (set unions, done in C: about 0.15 s for 640,000
    watches, where building the whole listing took 2 s and more)."""
    tables = (watches.data, watches.child, watches.persistent, watches.recursive)
    by_path: dict[str, set[Hashable]] = {}
    listed = 0
    for table in tables:
        for path, watchers in table.items():
            if listed >= listed_max:
                break
            taken = set(itertools.islice(watchers, listed_max - listed))
            by_path.setdefault(path, set()).update(taken)
            listed += len(taken)
    by_watcher: dict[Hashable, list[str]] = {}
    for path, watchers in by_path.items():
        for watcher in watchers:
            by_watcher.setdefault(watcher, []).append(path)
    return WatchTables(
        by_watcher=tuple((_session_id(w), tuple(paths)) for w, paths in by_watcher.items()),
        by_path=tuple((path, tuple(_session_id(w) for w in ws)) for path, ws in by_path.items()),
        listed=listed,
        connections=len(set().union(*(watchers for table in tables for watchers in table.values()))),
        paths=len(set().union(*tables)),
    )


def _session_tables(server: Monitored) -> SessionTables:
    return SessionTables(
        expiry_buckets=tuple((expiry, tuple(ids)) for expiry, ids in server.sessions.expiry_buckets().items()),
        ephemerals=tuple((session_id, tuple(paths)) for session_id, paths in server.tree.ephemerals.items()),
    )


def _disk_space(datadir: DataDir) -> tuple[DiskSpace, ...]:
    found = []
    for folder, path in (("data", datadir.snap_dir), ("log", datadir.log_dir)):
        fs = os.statvfs(path)
        found.append(DiskSpace(folder=folder, path=str(path), free_bytes=fs.f_bavail * fs.f_frsize, total_bytes=fs.f_blocks * fs.f_frsize))
    return tuple(found)


def _file_descriptors() -> tuple[int, int]:
    try:
        open_fds = len(os.listdir("/proc/self/fd"))
    except OSError:
        open_fds = -1
    return open_fds, resource.getrlimit(resource.RLIMIT_NOFILE)[0]
