"""The watch workload: persistent recursive watchers on every server, and a writer of its own.

Every watcher watches the run's whole root (``/jepsen``) recursively, so it hears the
workers' register writes and sequential creates, the ephemerals made and deleted as sessions
come and go, and what ``WatchWriter`` does under ``/jepsen/watch``: creates, setData,
deletes, and multis that make several events at one zxid.  The watchers register after the
setup, at its zxid, and before any worker starts; after the run has healed and converged, a
marker node (``/jepsen/watch/end``) is created and each watcher is given a bounded time to
hear it: its events up to the marker's zxid are then checked (``watch_checker``) against the
servers' txn logs (``txn_logs``).

* zabby: ``ZabbyWatcher``, a ``zabby.SyncClient`` preferring one server (its client proxy
  first, hosts not shuffled), whose watch is added with ``since_zxid`` = the setup's zxid and
  resumes by itself after every reconnect.  A session that expires takes its watches with it:
  the watcher then adds its watch again from the last event it heard (the recipe a user
  writes), skipping the events of that zxid it had.
* ZooKeeper: ``JavaWatcher``, ZooKeeper's own Java client (``RecursiveWatcher.java``; kazoo
  2.11 has no addWatch) with ZooKeeper's semantics: re-registered after a reconnect, without
  what changed meanwhile; its events carry no zxid.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Protocol

from zabby.errors import HistoryCompactedError
from harness.jepsen import clients
from harness.jepsen.watch_checker import HISTORY_LOST, Change
from harness.jepsen.workloads import OPS_PER_WORKER_MAX, ROOT, WorkloadSpec
from harness.local.javac import JAVA_DIR, classpath, compile_java
from harness.local.zookeeper import ZK_JAR
from zabby.opcodes import AddWatchMode

WATCH_PATH = ROOT  # what every watcher watches, recursively
WATCHED = f"{ROOT}/watch"  # the writer's nodes
FIXED = f"{WATCHED}/fixed"  # set inside the writer's multis
END_MARKER = f"{WATCHED}/end"
WRITER_NAMES = 10  # nodes n0..n9 the writer creates, sets and deletes
WRITE_PAUSE_S = 0.02
READY_TIMEOUT_S = 60.0
POLL_S = 0.05
JAVA_SOURCE = Path(__file__).with_name("RecursiveWatcher.java")
JAVA_STOP_S = 10.0


class Watcher(Protocol):
    name: str
    events: list[Change]
    ready: threading.Event
    error: str

    def start(self) -> None: ...

    def saw(self, change_type: str, path: str) -> bool: ...

    def stop(self) -> None: ...

    def figures(self) -> dict[str, Any]: ...


def setup_watched(client: Any, timeout_s: float) -> None:
    """The writer's folder and the node its multis set."""
    clients.call(client.create_async, WATCHED, b"", timeout_s=timeout_s)
    clients.call(client.create_async, FIXED, b"0", timeout_s=timeout_s)


def preferring(hosts: list[str], first: int) -> str:
    """``hosts`` (``host:port`` each) as a connect string that starts with ``hosts[first]``."""
    return ",".join(hosts[first:] + hosts[:first])


class ZabbyWatcher(threading.Thread):
    """A zabby client's persistent recursive watch on ``watch_path``, from ``since_zxid``."""

    def __init__(self, name: str, hosts: str, watch_path: str, since_zxid: int, spec: WorkloadSpec) -> None:
        super().__init__(name=name, daemon=True)
        self.hosts, self.watch_path, self.spec = hosts, watch_path, spec
        self.events: list[Change] = []
        self.ready = threading.Event()
        self.error = ""
        self.resubscribed = 0  # watches added again after a session expired
        self.connects = 0  # the first connection and every reconnect (each resumes the watch)
        self.client: Any = None
        self._stop_event = threading.Event()
        self._lost = threading.Event()
        self._lock = threading.Lock()
        self._last_zxid, self._count, self._skip = since_zxid, 0, 0

    def run(self) -> None:
        try:
            self.client = clients.open_client("zabby", self.hosts, self.spec.session_timeout_s, self.spec.op_timeout_s, randomize_hosts=False)
            self.connects = 1  # (connected before the listener was there)
            self.client.add_listener(self._on_state)
            self._subscribe_until_done()
            self.ready.set()
            while not self._stop_event.wait(POLL_S):
                if self._lost.is_set() and self.client.connected:
                    self._lost.clear()
                    self.resubscribed += 1
                    self._subscribe_until_done()
        except Exception as exc:  # noqa: BLE001 - reported as the watcher's error
            self.error = f"{type(exc).__name__}: {exc}"

    def _on_state(self, state: Any) -> None:
        self.connects += str(state) == "CONNECTED"
        if str(state) == "LOST":  # the session expired: its watches went with it
            self._lost.set()

    def _subscribe_until_done(self) -> None:
        """Add the watch from the last event heard (skipping the ones of its zxid it had)."""
        while not self._stop_event.is_set():
            with self._lock:
                since = self._last_zxid - 1 if self._count else self._last_zxid
                self._skip = self._count
            try:
                self.client.add_watch(self.watch_path, self._on_event, AddWatchMode.PERSISTENT_RECURSIVE, since, timeout=self.spec.op_timeout_s)
                return
            except HistoryCompactedError as exc:
                with self._lock:
                    self.events.append(Change(exc.oldest_zxid, HISTORY_LOST, self.watch_path))
                    self._last_zxid, self._count = exc.oldest_zxid, 0
            except Exception:  # noqa: BLE001 - not connected, or the call was cut: again
                self._stop_event.wait(POLL_S)

    def _on_event(self, event: Any) -> None:
        kind = str(event.type)
        if kind == "NONE":
            return  # the session's end: ``run`` adds the watch again
        with self._lock:
            if kind == HISTORY_LOST:
                self.events.append(Change(event.zxid, kind, event.path))
                return
            if self._skip and event.zxid == self._last_zxid:
                self._skip -= 1
                return
            if event.zxid == self._last_zxid:
                self._count += 1
            else:
                self._last_zxid, self._count = event.zxid, 1
            self.events.append(Change(event.zxid, kind, event.path))

    def saw(self, change_type: str, path: str) -> bool:
        with self._lock:
            return any(e.type == change_type and e.path == path for e in reversed(self.events))

    def stop(self) -> None:
        self._stop_event.set()
        self.join(self.spec.op_timeout_s * 2)
        if self.client is not None:
            clients.close_quietly(self.client)

    def figures(self) -> dict[str, Any]:
        return {"resubscribed": self.resubscribed, "reconnects": max(0, self.connects - 1)}


class JavaWatcher:
    """ZooKeeper's Java client with a persistent recursive watch (``RecursiveWatcher.java``)."""

    def __init__(self, name: str, hosts: str, watch_path: str, spec: WorkloadSpec, log_path: Path, *, reread: bool = False) -> None:
        """``reread``: after each reconnection it reads the tree under ``watch_path`` again, as
        Curator's CuratorCache does (``reread``: every path found so)."""
        self.name = name
        self.events: list[Change] = []
        self.reread: set[str] = set()
        self.rereads = 0  # reconnections after which the whole tree was read again
        self.ready = threading.Event()
        self.error = ""
        self.states: Counter[str] = Counter()
        self.state_times: list[tuple[float, str]] = []  # (time.monotonic() when read, the session state)
        self.expiries = 0
        build = compile_java("zk-recursive-watcher", [JAVA_SOURCE], [ZK_JAR])
        argv = ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dzookeeper.sasl.client=false",
                "-cp", classpath(build, ZK_JAR, JAVA_DIR / "slf4j-nop.jar"), "RecursiveWatcher", hosts, watch_path,
                str(int(spec.session_timeout_s * 1000)), *(["reread"] if reread else [])]  # fmt: skip
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, encoding="utf-8", bufsize=1)
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name=f"{name}-reader", daemon=True)

    def start(self) -> None:
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            word, _, rest = line.rstrip("\n").partition(" ")
            if word == "E":
                kind, _, path = rest.partition(" ")
                with self._lock:
                    self.events.append(Change(-1, kind, path))
            elif word == "READY":
                self.ready.set()
            elif word == "R":
                with self._lock:
                    self.reread.add(rest)
            elif word == "REREAD":
                self.rereads += 1
            elif word == "S":
                self.states[rest] += 1
                self.state_times.append((time.monotonic(), rest))
            elif word == "X":
                self.expiries += 1
        if self.proc.poll() not in (None, 0):
            self.error = f"the Java watcher exited with {self.proc.returncode}"

    def saw(self, change_type: str, path: str) -> bool:
        with self._lock:
            return any(e.type == change_type and e.path == path for e in reversed(self.events))

    def stop(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(JAVA_STOP_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(JAVA_STOP_S)
        self._reader.join(JAVA_STOP_S)
        self._log.close()

    def figures(self) -> dict[str, Any]:
        return {"expiries": self.expiries, "states": dict(self.states)}


class WatchWriter(threading.Thread):
    """Creates, sets and deletes ``/jepsen/watch/n<i>``, and now and then a multi of a create,
    a set and a delete of one node plus a set of ``FIXED`` (four events at one zxid)."""

    def __init__(self, kind: str, hosts: str, spec: WorkloadSpec, seed: int, stop: threading.Event) -> None:
        super().__init__(name="watch-writer", daemon=True)
        self.kind, self.hosts, self.spec = kind, hosts, spec
        self.rng = random.Random(seed)
        self.stop_event = stop
        self.outcomes: Counter[str] = Counter()
        self.error = ""
        self.client: Any = None

    def run(self) -> None:
        try:
            self.client = clients.open_client(self.kind, self.hosts, self.spec.session_timeout_s, self.spec.op_timeout_s)
            for index in range(OPS_PER_WORKER_MAX):
                if self.stop_event.wait(WRITE_PAUSE_S):
                    return
                if self.client.connected:
                    self._one_op(index)
        except Exception as exc:  # noqa: BLE001 - a writer that cannot go on says why
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            if self.client is not None:
                clients.close_quietly(self.client)

    def _one_op(self, index: int) -> None:
        path, value, draw = f"{WATCHED}/n{self.rng.randrange(WRITER_NAMES)}", str(index).encode(), self.rng.random()
        timeout_s = self.spec.op_timeout_s
        if draw < 0.3:
            f, action = "create", lambda: clients.call(self.client.create_async, path, value, timeout_s=timeout_s)
        elif draw < 0.6:
            f, action = "set", lambda: clients.call(self.client.set_async, path, value, timeout_s=timeout_s)
        elif draw < 0.85:
            f, action = "delete", lambda: clients.call(self.client.delete_async, path, timeout_s=timeout_s)
        else:
            f, action = "multi", lambda: self._multi(f"{WATCHED}/m{index}", value)
        try:
            action()
            self.outcomes[f"{f} ok"] += 1
        except Exception as exc:  # noqa: BLE001 - counted; a NodeExists or NoNode is a plain failure
            self.outcomes[f"{f} {clients.classify(exc)[0]}"] += 1

    def _multi(self, path: str, value: bytes) -> None:
        transaction = self.client.transaction()
        transaction.create(path, value)
        transaction.set_data(path, value + b"+")
        transaction.delete(path)
        transaction.set_data(FIXED, value)
        results = transaction.commit_async().get(timeout=self.spec.op_timeout_s)
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise failed[0]


def wait_caught_up(watchers: list[Watcher], change_type: str, path: str, timeout_s: float) -> dict[str, bool]:
    """Whether each watcher heard ``(change_type, path)`` within ``timeout_s`` (shared)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not all(w.saw(change_type, path) for w in watchers):
        time.sleep(POLL_S)
    return {w.name: w.saw(change_type, path) for w in watchers}

