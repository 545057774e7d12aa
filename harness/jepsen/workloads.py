"""The workloads: what client threads do during a run, all recorded in the history.

Under the run's root (``/jepsen``):

* ``reg/k<i>``: a register per key.  ``read`` = ``sync`` then ``get`` (value, version);
  ``write`` = ``set`` with version -1; ``cas`` = a read, then ``set`` with the version read.
* ``seq/n-<10 digits>``: sequential creates, each writing its own unique tag.
* ``eph/<name>``: ephemerals.  Each worker holds one for its whole session (``live-<worker>``);
  the session churner opens short sessions that create one and then close, or that die
  (a child process SIGKILLed, so no close is ever sent).

A worker is one thread with one client; its choices come from its own ``random.Random``
seeded from the run's seed, so a seed replays the same choices (not the same timing).
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any

from harness import checkout_env
from harness.jepsen import clients
from harness.jepsen.checker import EphemeralSession
from harness.jepsen.history import FAIL, OK, UNKNOWN, History

ROOT = "/jepsen"
REGISTERS, SEQUENCE, EPHEMERALS = f"{ROOT}/reg", f"{ROOT}/seq", f"{ROOT}/eph"
INITIAL_VALUE = "init"
OPS_PER_WORKER_MAX = 1_000_000
CHILD_READY_TIMEOUT_S = 30.0
CHILD_LIFETIME_S = 600
DISCONNECTED_WAIT_S = 0.05
UNKNOWN_BACKOFF_S = 0.2  # a doomed child exits by itself after this, should nobody kill it


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadSpec:
    keys: int = 5
    session_timeout_s: float = 10.0
    op_timeout_s: float = 5.0
    churn_session_timeout_s: float = 4.0
    churn_hold_s: tuple[float, float] = (0.5, 2.0)


def register_path(key: str) -> str:
    return f"{REGISTERS}/{key}"


def setup(client: Any, spec: WorkloadSpec, timeout_s: float) -> list[str]:
    """Create the root, the registers (value ``init``, version 0) and the parents; the keys."""
    keys = [f"k{i}" for i in range(spec.keys)]
    for path in (REGISTERS, SEQUENCE, EPHEMERALS):
        client.ensure_path(path)
    for key in keys:
        clients.call(client.create_async, register_path(key), INITIAL_VALUE.encode(), timeout_s=timeout_s)
    return keys


class Worker(threading.Thread):
    """Reads, writes and CASes registers and makes sequential creates until told to stop."""

    def __init__(self, name: str, kind: str, hosts: str, history: History, keys: list[str], spec: WorkloadSpec, seed: int, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.kind, self.hosts, self.history, self.keys, self.spec = kind, hosts, history, keys, spec
        self.rng = random.Random(seed)
        self.stop_event = stop
        self.client: Any = None
        self.live_session: EphemeralSession | None = None
        self.error = ""
        self._counter = 0

    def run(self) -> None:
        try:
            self.client = clients.open_client(self.kind, self.hosts, self.spec.session_timeout_s, self.spec.op_timeout_s)
            self._create_live_ephemeral()
            for _ in range(OPS_PER_WORKER_MAX):
                if self.stop_event.is_set():
                    return
                self._one_op()
        except Exception as exc:  # noqa: BLE001 - a worker that cannot go on says why
            self.error = f"{type(exc).__name__}: {exc}"

    def _unique(self) -> str:
        self._counter += 1
        return f"{self.name}-{self._counter}"

    def _one_op(self) -> None:
        if not self.client.connected:
            # no requests into a client that is reconnecting: they would fail at once, each an
            # unknown op (it cannot be told whether one left), and a burst of them is noise
            self.stop_event.wait(DISCONNECTED_WAIT_S)
            return
        draw = self.rng.random()
        key = self.rng.choice(self.keys)
        if draw < 0.25:
            self.read(key)
        elif draw < 0.35:
            self.write(key)
        elif draw < 0.65:
            found = self.read(key)
            if found is not None:
                self.cas(key, found[1])
        else:
            self.create()

    def _timed(self, f: str, key: str, args: Any, action: Any) -> tuple[str, Any]:
        op_id = self.history.invoke(self.name, f, key, args)
        try:
            result = action()
        except Exception as exc:  # noqa: BLE001 - every failure is recorded, none is raised
            status, error = clients.classify(exc)
            self.history.complete(op_id, status, None, error)
            if status == UNKNOWN:
                self.stop_event.wait(self.rng.uniform(0.0, UNKNOWN_BACKOFF_S))
            return status, None
        self.history.complete(op_id, OK, result)
        return OK, result

    def read(self, key: str) -> tuple[str, int] | None:
        def action() -> list[Any]:
            timeout_s = self.spec.op_timeout_s
            clients.call(self.client.sync_async, register_path(key), timeout_s=timeout_s)
            data, stat = clients.call(self.client.get_async, register_path(key), timeout_s=timeout_s)
            return [data.decode(), stat.version]

        status, result = self._timed("read", key, None, action)
        return (result[0], result[1]) if status == OK else None

    def write(self, key: str) -> None:
        value = self._unique()
        action = lambda: clients.call(self.client.set_async, register_path(key), value.encode(), -1, timeout_s=self.spec.op_timeout_s).version  # noqa: E731
        self._timed("write", key, value, action)

    def cas(self, key: str, version: int) -> None:
        value = self._unique()
        action = lambda: clients.call(self.client.set_async, register_path(key), value.encode(), version, timeout_s=self.spec.op_timeout_s).version  # noqa: E731
        self._timed("cas", key, [version, value], action)

    def create(self) -> None:
        tag = self._unique()
        action = lambda: clients.call(self.client.create_async, f"{SEQUENCE}/n-", tag.encode(), sequence=True, timeout_s=self.spec.op_timeout_s).rsplit("/", 1)[1]  # noqa: E731
        self._timed("create", "seq", tag, action)

    def _create_live_ephemeral(self) -> None:
        name = f"live-{self.name}"
        owner = clients.session_id(self.client)
        status, _ = self._timed("ephemeral", name, owner, lambda: clients.call(self.client.create_async, f"{EPHEMERALS}/{name}", b"", ephemeral=True, timeout_s=self.spec.op_timeout_s))
        if status == OK:
            self.live_session = EphemeralSession(name=name, fate="live", owner=owner)

    def final_session(self) -> EphemeralSession | None:
        """After the run: is the session that created the live ephemeral still the client's and
        alive (a sync succeeds)?  If it changed, that session expired and its node must be gone."""
        if self.live_session is None or self.client is None:
            return None
        try:
            clients.call(self.client.sync_async, EPHEMERALS, timeout_s=self.spec.op_timeout_s)
        except Exception:  # noqa: BLE001 - not provably alive: no claim either way
            return None
        if clients.session_id(self.client) == self.live_session.owner:
            return self.live_session
        return EphemeralSession(name=self.live_session.name, fate="dead", owner=self.live_session.owner)


class SessionChurner(threading.Thread):
    """Opens short sessions that create an ephemeral and then either close or die."""

    def __init__(self, kinds: tuple[str, ...], hosts: str, history: History, spec: WorkloadSpec, seed: int, stop: threading.Event) -> None:
        super().__init__(name="churner", daemon=True)
        self.kinds, self.hosts, self.history, self.spec = kinds, hosts, history, spec
        self.rng = random.Random(seed)
        self.stop_event = stop
        self.sessions: list[EphemeralSession] = []
        self.error = ""

    def run(self) -> None:
        try:
            for index in range(OPS_PER_WORKER_MAX):
                if self.stop_event.wait(self.rng.uniform(*self.spec.churn_hold_s)):
                    return
                kind = self.kinds[index % len(self.kinds)]
                if self.rng.random() < 0.5:
                    self._close_one(kind, f"s{index}-{kind}-closed")
                else:
                    self._kill_one(kind, f"s{index}-{kind}-killed")
        except Exception as exc:  # noqa: BLE001 - recorded in the result
            self.error = f"{type(exc).__name__}: {exc}"

    def _close_one(self, kind: str, name: str) -> None:
        op_id = self.history.invoke(self.name, "session", name, kind)
        try:
            client = clients.open_client(kind, self.hosts, self.spec.churn_session_timeout_s, self.spec.op_timeout_s)
        except Exception as exc:  # noqa: BLE001 - no session, nothing to check
            self.history.complete(op_id, FAIL, None, type(exc).__name__)
            return
        try:
            clients.call(client.create_async, f"{EPHEMERALS}/{name}", b"", ephemeral=True, timeout_s=self.spec.op_timeout_s)
            created = OK
        except Exception as exc:  # noqa: BLE001
            created = clients.classify(exc)[0]
        self.stop_event.wait(self.rng.uniform(*self.spec.churn_hold_s))
        clients.close_quietly(client)
        # closed, or (if the close did not get through) expired later: gone either way
        self.sessions.append(EphemeralSession(name=name, fate="closed"))
        self.history.complete(op_id, OK if created == OK else UNKNOWN, "closed")

    def _kill_one(self, kind: str, name: str) -> None:
        """A client process that creates the ephemeral and is SIGKILLed: no close is sent."""
        op_id = self.history.invoke(self.name, "session", name, kind)
        command = [sys.executable, "-m", "harness.jepsen.doomed_client", kind, self.hosts, f"{EPHEMERALS}/{name}", str(self.spec.churn_session_timeout_s), str(CHILD_LIFETIME_S)]
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=checkout_env())
        try:
            line = _read_line(child, CHILD_READY_TIMEOUT_S)
            self.stop_event.wait(self.rng.uniform(*self.spec.churn_hold_s))
        finally:
            child.kill()
            child.wait(10)
        self.sessions.append(EphemeralSession(name=name, fate="dead"))
        self.history.complete(op_id, OK if line.startswith("created") else UNKNOWN, line.strip() or "no answer")


def _read_line(child: subprocess.Popen[bytes], timeout_s: float) -> str:
    """The child's first line, or "" if none came within the time."""
    assert child.stdout is not None
    done: list[bytes] = []
    reader = threading.Thread(target=lambda: done.append(child.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout_s)
    return done[0].decode(errors="replace") if done else ""
