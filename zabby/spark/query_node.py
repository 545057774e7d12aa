"""A query node: an in-memory mirror of ``/kylin/<project>`` that answers from memory.

Kylin's query servers kept metadata caches that the job server wiped with fire-and-forget
HTTP calls (the Broadcaster); a server that was down, restarting or slow missed the call and
stayed stale for good.  Here the mirror is a ``TreeCache``: one persistent-recursive watch
fed by the replicated log, and after any reconnect or restart a full re-read, so a node that
missed a build catches up as soon as it can talk to any server of the ensemble.

Each change is logged (and appended to a JSON-lines file) with the zxid it carries and the
wall-clock time this node saw it; the demo's timeline and lag figures come from those files.
``ready_segments(cube)`` answers from the cube instance alone, which every build or merge
rewrites in the same multi as its segments, so the answer is always a committed state.

    python -m zabby.spark.query_node --hosts 127.0.0.1:2181,... --project demo --name qn1 \\
        --log qn1.jsonl --view qn1.view.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from zabby import SyncClient
from zabby.client.recipes import TreeEvent

from .model import DEFAULT_ROOT, CubeInstance, Layout, SegmentRef

log = logging.getLogger("zabby.spark.query_node")
_EVENT_NAMES = {0: "NODE_ADDED", 1: "NODE_UPDATED", 2: "NODE_REMOVED", 3: "SUSPENDED", 4: "RECONNECTED", 5: "LOST", 6: "INITIALIZED"}


def prefer_host(hosts: str, index: int) -> str:
    """The connect string rotated so that server ``index`` (0-based) is tried first."""
    parts = [h for h in hosts.split(",") if h]
    index %= len(parts)
    return ",".join(parts[index:] + parts[:index])


class QueryNode:
    def __init__(self, hosts: str, project: str, *, root: str = DEFAULT_ROOT, name: str = "query-node",
                 log_path: str | Path | None = None, view_path: str | Path | None = None,
                 session_timeout: float = 4.0, randomize_hosts: bool = False) -> None:  # fmt: skip
        self.name = name
        self.layout = Layout(project, root)
        self.client = SyncClient(hosts, timeout=session_timeout, randomize_hosts=randomize_hosts, reconnect_after_expiry=True)
        self.cache: Any = None
        self.log_path = Path(log_path) if log_path else None
        self.view_path = Path(view_path) if view_path else None
        self._log_file: Any = None
        self._guard = threading.Lock()
        self._view_lock = threading.Lock()  # the main thread and the cache's callbacks both write the view
        self.changes: list[dict[str, Any]] = []
        self.initialized = threading.Event()
        self.max_zxid = 0

    # -- lifecycle ------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> QueryNode:
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = open(self.log_path, "a", buffering=1)
        self.client.start(timeout=timeout)
        self.client.ensure_path(self.layout.base)
        self.cache = self.client.TreeCache(self.layout.base)
        self.cache.listen(self._on_event)
        self.cache.start()
        if not self.initialized.wait(timeout):
            raise TimeoutError(f"{self.name}: mirror of {self.layout.base} not loaded after {timeout}s")
        return self

    def stop(self) -> None:
        if self.cache is not None:
            self.cache.close()
        self.client.stop()
        self.client.close()
        with self._guard:
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None

    def __enter__(self) -> QueryNode:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- answers from memory --------------------------------------------------------------
    def cube(self, cube: str) -> tuple[CubeInstance, int] | None:
        node = self.cache.get_data(self.layout.cube(cube)) if self.cache else None
        if node is None or not node.data:
            return None
        return CubeInstance.from_json(node.data), int(node.stat.mzxid)

    def ready_segments(self, cube: str) -> list[SegmentRef]:
        """The segments of ``cube`` a query may use now (READY in the committed cube instance)."""
        found = self.cube(cube)
        return found[0].ready_segments() if found else []

    def cubes(self) -> list[str]:
        names = self.cache.get_children(self.layout.base + "/cube", frozenset()) if self.cache else frozenset()
        return sorted(names)

    def server(self) -> str:
        host = getattr(self.client._client, "_current_host", None)
        return f"{host[0]}:{host[1]}" if host else "-"

    def view(self) -> dict[str, Any]:
        cubes = {}
        for name in self.cubes():
            found = self.cube(name)
            if found is None:
                continue
            inst, zxid = found
            cubes[name] = {
                "zxid": zxid, "status": inst.status,
                "segments": [{"id": s.id, "name": s.name, "start": s.date_range_start, "end": s.date_range_end,
                              "rows": s.row_count, "status": s.status} for s in inst.ready_segments()],
            }  # fmt: skip
        return {"node": self.name, "server": self.server(), "max_zxid": self.max_zxid, "changes": len(self.changes),
                "initialized": self.initialized.is_set(), "time": time.time(), "cubes": cubes}  # fmt: skip

    # -- events ---------------------------------------------------------------------------
    def _on_event(self, event: TreeEvent) -> None:
        now = time.time()
        kind = _EVENT_NAMES.get(event.event_type, str(event.event_type))
        entry: dict[str, Any] = {"node": self.name, "t": now, "event": kind, "initial": not self.initialized.is_set()}
        if event.event_data is not None:
            stat = event.event_data.stat
            zxid = int(stat.mzxid) if kind != "NODE_REMOVED" else 0
            head, rest = self.layout.kind(event.event_data.path)
            entry.update(path=event.event_data.path[len(self.layout.base):], kind=head, name=rest, zxid=zxid,
                         version=int(stat.version))  # fmt: skip
            if head == "cube" and rest and kind != "NODE_REMOVED" and event.event_data.data:
                try:
                    inst = CubeInstance.from_json(event.event_data.data)
                    entry["segments"] = [s.id for s in inst.ready_segments()]
                except ValueError:
                    pass
            self.max_zxid = max(self.max_zxid, zxid)
        entry["server"] = self.server()
        with self._guard:
            self.changes.append(entry)
            if self._log_file is not None:
                self._log_file.write(json.dumps(entry) + "\n")
        if kind == "INITIALIZED":
            self.initialized.set()
        if event.event_data is not None and not entry["initial"]:
            log.info("%s saw %s %s zxid=0x%x", self.name, kind, entry["path"], entry["zxid"])
        if self.initialized.is_set():
            self._write_view()

    def _write_view(self) -> None:
        if self.view_path is None:
            return
        tmp = self.view_path.with_name(self.view_path.name + ".tmp")
        with self._view_lock:
            tmp.write_text(json.dumps(self.view(), indent=1))
            os.replace(tmp, self.view_path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="zabby query node: mirror /kylin/<project> and answer from memory")
    parser.add_argument("--hosts", required=True, help="connect string; the first server is tried first")
    parser.add_argument("--project", required=True)
    parser.add_argument("--root", default=DEFAULT_ROOT)
    parser.add_argument("--name", default=f"query-node-{os.getpid()}")
    parser.add_argument("--log", help="JSON-lines file of every change seen (appended)")
    parser.add_argument("--view", help="JSON file rewritten with the current view after every change")
    parser.add_argument("--session-timeout", type=float, default=4.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {args.name} %(message)s", stream=sys.stderr)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    node = QueryNode(args.hosts, args.project, root=args.root, name=args.name, log_path=args.log, view_path=args.view,
                     session_timeout=args.session_timeout)  # fmt: skip
    node.start()
    node._write_view()
    print(f"READY {args.name} {node.server()}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
