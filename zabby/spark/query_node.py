"""A query node: an in-memory mirror of ``/kylin/<project>`` that answers from memory.

Kylin's query servers kept metadata caches that the job server wiped with fire-and-forget
HTTP calls (the Broadcaster); a server that was down, restarting or slow missed the call and
stayed stale for good.  Here the mirror is a ``TreeCache`` on zabby's resumable watch feed:
one persistent-recursive watch whose events carry their zxids.  After a reconnect, to the
same or another server, the feed resumes from the last event it delivered, so the mirror
catches up from the changes it missed without re-reading anything.  With ``--view`` the
node also saves its mirror and the zxid it reflects (at most every ``VIEW_INTERVAL_S`` and on
the way out); a node restarted with the same file resumes the feed from that zxid and applies
only the commits it missed.  Only when no server's history reaches back that far does it
re-read the project's metadata (docs/operations.md, ``watchHistoryTxns``).

The mirror is an ``AsyncTreeCache`` on ``zabby.Client``, run on one event-loop thread that
every query node of the process shares (``shared_loop``): a watch event is applied where it
arrives, with no hop to another thread, and many nodes in one process (the scale run puts 25
in each worker) cost one thread and one epoll set, not two threads each.  Measured: 25 nodes
in one process, commits 100 ms apart (``scripts/query_node_cpu.py``): 2.5-2.8 ms of CPU per
node per commit as SyncClient + TreeCache (a loop thread and a callback thread per node, four
thread hops per commit), 1.2-1.3 ms on one shared loop.  The node's listener runs on that
loop; blocking callers (``start``, ``wait_for_zxid``, the view writer) hand their work to it.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal

from zabby import Client
from zabby.client.recipes import AsyncTreeCache, TreeEvent

from .model import DEFAULT_ROOT, CubeInstance, Layout, SegmentRef

log = logging.getLogger("zabby.spark.query_node")
VIEW_INTERVAL_S = 0.05  # the view file is rewritten at most this often (and on stop)
_shared: tuple[int, BlockingPortal] | None = None  # (the pid that started it, its portal)
_shared_lock = threading.Lock()


def shared_loop() -> BlockingPortal:
    """The event loop (a daemon thread, asyncio) that this process's query nodes share; a
    forked child, which has no copy of the thread, starts its own."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared[0] != os.getpid():
            handed: list[BlockingPortal] = []
            ready = threading.Event()

            async def serve() -> None:
                async with BlockingPortal() as portal:
                    handed.append(portal)
                    ready.set()
                    await portal.sleep_until_stopped()

            threading.Thread(target=anyio.run, args=(serve,), name="zabby-query-nodes", daemon=True).start()
            if not ready.wait(30):
                raise RuntimeError("the query nodes' event loop thread did not start")
            _shared = os.getpid(), handed[0]
        return _shared[1]


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
        self.client = Client(hosts, timeout=session_timeout, randomize_hosts=randomize_hosts, reconnect_after_expiry=True)
        self.cache: Any = None  # an AsyncTreeCache once started
        self._loop = shared_loop()
        self.log_path = Path(log_path) if log_path else None
        self.view_path = Path(view_path) if view_path else None
        self._log_file: Any = None
        self._guard = threading.Lock()
        self._view_lock = threading.Lock()  # the view writer and stop() both write the view
        self._view_dirty = threading.Event()
        self._stopping = threading.Event()
        self._view_writer: threading.Thread | None = None
        self.changes: list[dict[str, Any]] = []
        self.initialized = threading.Event()
        self.resumed_from: int | None = None  # the saved zxid this node resumed from, if it did

    @property
    def zxid(self) -> int:
        """The mirror reflects every commit to the project up to this zxid."""
        return int(self.cache.zxid) if self.cache is not None else 0

    @property
    def max_zxid(self) -> int:
        return self.zxid

    # -- lifecycle ------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> QueryNode:
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = open(self.log_path, "a", buffering=1)
        saved = self._saved_mirror()
        self.resumed_from = None if saved is None else int(saved["zxid"])
        try:
            self._on_loop(self._start, saved, timeout)
        except BaseException:
            self._on_loop(self._stop)
            raise
        if self.resumed_from is not None:
            how = "from its view file, with no re-read" if self.cache.full_reads == 0 else "by a full read: the history is gone"
            log.info("%s: caught up from 0x%x to 0x%x %s", self.name, self.resumed_from, self.zxid, how)
        if self.view_path is not None:
            self._view_writer = threading.Thread(target=self._write_views, name=f"{self.name}-view", daemon=True)
            self._view_writer.start()
        return self

    def wait_for_zxid(self, zxid: int, timeout: float | None = None) -> bool:
        """Until the mirror reflects ``zxid`` (a commit to the project); False on timeout."""
        return self.cache is not None and bool(self._on_loop(self.cache.wait_for_zxid, zxid, timeout))

    async def _start(self, saved: dict[str, Any] | None, timeout: float) -> None:
        with anyio.fail_after(timeout):
            await self.client.start(timeout=timeout)
            await self.client.ensure_path(self.layout.base)
            self.cache = AsyncTreeCache(self.client, self.layout.base, saved_state=saved)
            self.cache.listen(self._on_event)
            await self.cache.start()

    async def _stop(self) -> None:
        if self.cache is not None:
            await self.cache.close()
        await self.client.close()

    def _on_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` run (awaited, if async) on the shared loop; the caller blocks."""
        return self._loop.call(fn, *args)

    def _saved_mirror(self) -> dict[str, Any] | None:
        """The mirror a previous run saved in the view file, if it is one of this project."""
        if self.view_path is None or not self.view_path.exists():
            return None
        try:
            mirror = json.loads(self.view_path.read_text()).get("mirror")
        except (OSError, ValueError, AttributeError) as exc:
            log.warning("%s: view file %s unreadable (%s): loading the metadata afresh", self.name, self.view_path, exc)
            return None
        if not isinstance(mirror, dict) or mirror.get("root") != self.layout.base:
            log.warning("%s: view file %s holds no mirror of %s: loading the metadata afresh", self.name, self.view_path, self.layout.base)
            return None
        return mirror

    def stop(self) -> None:
        self._stopping.set()
        self._view_dirty.set()
        if self._view_writer is not None:
            self._view_writer.join(10)
            self._view_writer = None
        if self.cache is not None and self.initialized.is_set():
            self._write_view()  # the last state, so that a restart resumes from it
        self._on_loop(self._stop)
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
        host = getattr(self.client, "_current_host", None)
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
        return {"node": self.name, "server": self.server(), "max_zxid": self.zxid, "changes": len(self.changes),
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
        entry["server"] = self.server()
        with self._guard:
            self.changes.append(entry)
            if self._log_file is not None:
                self._log_file.write(json.dumps(entry) + "\n")
        if kind == "INITIALIZED":
            self.initialized.set()
        if event.event_data is not None and not entry["initial"]:
            log.info("%s saw %s %s zxid=0x%x", self.name, kind, entry["path"], entry["zxid"])
        if self.view_path is not None:
            self._view_dirty.set()

    def _write_views(self) -> None:
        """Rewrite the view file after changes, at most every VIEW_INTERVAL_S, off the
        callback thread (which applies the events)."""
        while not self._stopping.is_set():
            self._view_dirty.wait()
            if self._stopping.is_set():
                return
            self._view_dirty.clear()
            self._write_view()
            self._stopping.wait(VIEW_INTERVAL_S)

    def _view_and_mirror(self) -> dict[str, Any]:
        """On the loop, between two of its steps: the view, and the mirror with the zxid it
        reflects (never claiming a change it does not hold)."""
        assert self.cache is not None
        view = self.view()
        view["mirror"] = self.cache.save_state()
        return view

    def _write_view(self) -> None:
        """The view and the mirror, for a restart to resume from."""
        if self.view_path is None:
            return
        tmp = self.view_path.with_name(self.view_path.name + ".tmp")
        with self._view_lock:
            view = self._on_loop(self._view_and_mirror)
            tmp.write_text(json.dumps(view))
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
