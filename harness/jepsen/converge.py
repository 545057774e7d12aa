"""After the heal: is every server serving, and do they all hold the same data?

Each server is read on its own, through a client connected to that server only (after a
``sync``): the tree under the run's root, every node's data, version and ephemeral owner.
Converged means, at one quiet moment: every server serving (srvr shows a Mode), exactly one
leader, the same last zxid on all (srvr), the same tree under the root, and for zabby the
same tree digest from ``mntr`` (``zk_digest``; skipped, and said so, when the server does
not report it yet).  The loop is bounded: it answers "not converged" with the reason.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, TypeVar

from harness.jepsen import clients
from harness.jepsen.cluster import SERVING_MODES, Cluster
from harness.jepsen.workloads import ROOT

Tree = dict[str, tuple[bytes, int, int]]  # path -> (data, version, ephemeral owner)
T = TypeVar("T")
NODES_MAX = 1_000_000
POLL_S = 0.25
READ_TIMEOUT_S = 20.0
TRACE_MAX = 50
CLOCK_POLL_S = 0.1


@dataclass(frozen=True, slots=True, kw_only=True)
class Convergence:
    converged: bool
    after_s: float | None  # seconds from the start of the wait, when converged
    reason: str = ""  # why not, or what was skipped
    digest: str = "missing"  # equal | differ | missing
    trees: dict[int, Tree] = field(default_factory=dict)
    trace: tuple[str, ...] = ()  # each new reason for "not yet", with seconds since the start


def reader_kind(system: str) -> str:
    return "zabby" if system == "zabby" else "kazoo"


def read_tree(client: Any, root: str = ROOT) -> Tree:
    """Every node under ``root`` (pipelined gets, one level at a time) after a sync."""
    return read_nodes(client, root, lambda data, stat: (data, stat.version, stat.ephemeralOwner))


def read_nodes(client: Any, root: str, view: Callable[[bytes, Any], T]) -> dict[str, T]:
    """Every node under ``root`` (pipelined gets, one level at a time) after a sync, as
    ``view(data, stat)``."""
    clients.call(client.sync_async, root, timeout_s=READ_TIMEOUT_S)
    tree: dict[str, T] = {}
    level = [root]
    while level and len(tree) < NODES_MAX:
        gets = [(path, client.get_async(path), client.get_children_async(path)) for path in level]
        level = []
        for path, get, children in gets:
            try:
                data, stat = get.get(timeout=READ_TIMEOUT_S)
                names = children.get(timeout=READ_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001
                if type(exc).__name__ == "NoNodeError":
                    continue  # went away between the listing and the read (an expiring session)
                raise
            tree[path] = view(data, stat)
            level += [f"{path.rstrip('/')}/{name}" for name in names]
    return tree


def differences(trees: dict[int, Tree], limit: int = 5) -> list[str]:
    """Paths whose content differs between servers (at most ``limit``)."""
    paths = sorted(set().union(*trees.values())) if trees else []
    found = []
    for path in paths:
        values = {sid: tree.get(path) for sid, tree in trees.items()}
        if len(set(values.values())) > 1:
            found.append(f"{path}: " + ", ".join(f"{sid}={value!r:.60}" for sid, value in sorted(values.items())))
            if len(found) >= limit:
                break
    return found


class ServingClock(threading.Thread):
    """From the heal on, polls every server's srvr (cheap, no session) until all serve, one of
    them leads and all report the same last zxid; ``after_s`` is when that was first seen."""

    def __init__(self, cluster: Cluster, timeout_s: float) -> None:
        super().__init__(name="serving-clock", daemon=True)
        self.cluster, self.timeout_s = cluster, timeout_s
        self.after_s: float | None = None

    def run(self) -> None:
        started = time.monotonic()
        while time.monotonic() - started < self.timeout_s:
            modes = self.cluster.modes()
            zxids = {server.srvr_zxid() for server in self.cluster.servers.values()}
            if all(m in SERVING_MODES for m in modes.values()) and list(modes.values()).count("leader") == 1 and len(zxids) == 1:
                self.after_s = time.monotonic() - started
                return
            time.sleep(CLOCK_POLL_S)


class Inspector:
    """One client per server, each connected to that server only; reopened when it breaks."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.kind = reader_kind(cluster.spec.system)
        self.readers: dict[int, Any] = {}

    def reader(self, sid: int) -> Any:
        if sid not in self.readers:
            self.readers[sid] = clients.open_client(self.kind, self.cluster.direct_hosts(sid), 30.0, READ_TIMEOUT_S)
        return self.readers[sid]

    def trees(self) -> dict[int, Tree]:
        """Every server's tree, read in parallel (a reader that fails is dropped and reopened next time)."""
        with ThreadPoolExecutor(len(self.cluster.servers)) as pool:
            futures = {sid: pool.submit(self._tree_of, sid) for sid in self.cluster.servers}
            return {sid: future.result() for sid, future in futures.items()}

    def _tree_of(self, sid: int) -> Tree:
        try:
            return read_tree(self.reader(sid))
        except Exception:
            broken = self.readers.pop(sid, None)
            if broken is not None:
                clients.close_quietly(broken)
            raise

    def close(self) -> None:
        with ThreadPoolExecutor(max(1, len(self.readers))) as pool:
            list(pool.map(clients.close_quietly, self.readers.values()))
        self.readers.clear()

    def wait_converged(self, timeout_s: float) -> Convergence:
        started = time.monotonic()
        reason, last_kind = "not tried", ""
        trace: list[str] = []
        while time.monotonic() - started < timeout_s:
            reason, trees, digest = self._check_once()
            if not reason:
                return Convergence(converged=True, after_s=time.monotonic() - started, digest=digest, trees=trees, trace=tuple(trace))
            kind = reason.split(" ")[0]
            if kind != last_kind and len(trace) < TRACE_MAX:
                trace.append(f"{time.monotonic() - started:.2f}s {reason[:200]}")
                last_kind = kind
            time.sleep(POLL_S)
        return Convergence(converged=False, after_s=None, reason=reason, trace=tuple(trace))

    def _check_once(self) -> tuple[str, dict[int, Tree], str]:
        """("" if converged, else why not), the trees, the digest verdict."""
        modes = self.cluster.modes()
        if not all(mode in SERVING_MODES for mode in modes.values()) or list(modes.values()).count("leader") != 1:
            return f"modes {modes}", {}, "missing"
        zxids = self._zxids()
        if len(set(zxids.values())) != 1:
            return f"last zxids differ {_hex_map(zxids)}", {}, "missing"
        try:
            trees = self.trees()
        except Exception as exc:  # noqa: BLE001 - try again while time remains
            return f"reading the trees: {type(exc).__name__}: {exc}", {}, "missing"
        if self._zxids() != zxids:
            return f"writes still going on {_hex_map(zxids)}", {}, "missing"
        diff = differences(trees)
        if diff:
            return "trees differ: " + "; ".join(diff), trees, "missing"
        digest = self._digests() if self.cluster.spec.system == "zabby" else "missing"
        if digest == "differ":
            return "zk_digest differs at the same zxid", trees, digest
        return "", trees, digest

    def _zxids(self) -> dict[int, int | None]:
        return {sid: server.srvr_zxid() for sid, server in self.cluster.servers.items()}

    def _digests(self) -> str:
        reports = [server.mntr() for server in self.cluster.servers.values()]
        pairs = {(m.get("zk_last_zxid"), m.get("zk_digest")) for m in reports}
        if any(digest is None for _, digest in pairs):
            return "missing"
        if len({zxid for zxid, _ in pairs}) != 1:
            return "missing"  # moved between the reads: no verdict
        return "equal" if len(pairs) == 1 else "differ"


def _hex_map(zxids: dict[int, int | None]) -> str:
    return "{" + ", ".join(f"{sid}: {'-' if z is None else hex(z)}" for sid, z in sorted(zxids.items())) + "}"
