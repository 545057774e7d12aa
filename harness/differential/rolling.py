"""The rolling replacement of docs/operations.md ("Replacing ZooKeeper one server at a time"),
rehearsed under load: three ZooKeeper 3.8 servers replaced by zabby servers one at a time
(the same ids, hosts and ports), switched to zabby's own peer protocol, switched back, and
replaced by ZooKeeper servers again, the clients connected throughout.

A round has four phases, each a step per server, the leader's step last (so a phase elects
once at most):

1. onto zabby: a ZooKeeper server stopped, its data dir imported (``zabby-admin zookeeper
   import``; or, with ``data="sync"``, an empty one) and a zabby server started there with
   ``quorum.protocol=zookeeper``, which catches up from the leader;
2. zabby's protocol: each zabby server restarted with zabby's own peer protocol and
   ``quorum.protocol.bridge=true``, so that it serves with the others whichever protocol they
   speak (without the bridge, the server left on the old protocol once the majority switched
   could not serve until its own restart); the leader's restart is the phase's election;
3. ZooKeeper's protocol again, the same way;
4. back to ZooKeeper: a zabby server stopped, its data dir exported (``zabby-admin zookeeper
   export``) and ZooKeeper started there.

Between steps, as an operator would: ``srvr`` on each server (every server that can speak with
the majority serves, one of them leads) and ``mntr`` on the leader (``zk_synced_followers``:
every other server that serves).

Throughout: two kazoo writers and a writer on ZooKeeper's Java client
(``JavaClientDriver.java``), each with a session of its own holding an ephemeral znode and
making sequential creates under ``/rolling/<writer>``; ZooKeeper's Java client with a
persistent recursive watch on ``/rolling`` (``RecursiveWatcher.java``); two Curator
LeaderLatches (``CuratorSuite``'s ``rolling`` scenario), whose handshakes pace the steps.  Each
step reports its write outage: the longest time in which no writer's create succeeded, and the
longest one writer went without.

After each round the writers pause and it is checked that: every server holds the same tree,
node by node with every Stat field; every acknowledged create is there; every writer's
session is the one it began with and still owns its ephemeral (none expired); the watcher
heard the creation of every znode, but for creates made while it reconnected (ZooKeeper
re-adds a persistent watch after a reconnect without what changed meanwhile: those are
counted, and the watcher reads its tree again after each reconnection, as Curator's
CuratorCache does, and must find each of them so; none may fall outside its reconnections, each taken to begin when its server
stopped serving: a zabby server holds its idle clients up to ``electionClientHoldMs`` before
it closes them); no server logged a digest mismatch or a traceback.  At the end the latches
are judged: the holder (which counts only a lost session as an error) never lost its leadership, and every disconnection of a Curator client, and so
every loss of the standard latch, came in a step that stopped its server or made the
ensemble elect.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import threading
from abc import ABC, abstractmethod
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from kazoo.client import KazooClient, KazooState

from harness import CHECKOUT
from harness.differential.curator import run_suite
from harness.differential.java_client import JavaDriver
from harness.jepsen.cluster import DIGEST_MISMATCH
from harness.jepsen.converge import read_nodes
from harness.jepsen.clients import kazoo_reconnect_retry
from harness.jepsen.history import longest_gap, longest_gap_s
from harness.jepsen.watchers import JavaWatcher
from harness.jepsen.workloads import WorkloadSpec
from harness.local.mixed import ZABBY, ZABBY_NATIVE, ZOOKEEPER, MixedEnsemble
from harness.local.zookeeper import ZooKeeperProcess
from zabby.client.fourletter import mntr, server_mode, srvr_zxid
from zabby.opcodes import CreateMode
from zabby.testing.processes import ServerProcess, poll_until, stop_processes, wait_until

ROOT = "/rolling"
ALIVE = f"{ROOT}/alive"  # each writer's ephemeral
TICK_MS = 2000
SESSION_TIMEOUT_S = 30.0  # the writers' and the watcher's; ZooKeeper's limit with this tick is 40 s
WRITE_INTERVAL_S = 0.05  # each writer's pause between creates
WRITE_TIMEOUT_S = 2.0
STEP_WAIT_S = 120.0  # a step's servers serving as they should
ADMIN_TIMEOUT_S = 300.0
STEADY_POLL_S = 0.1
SETTLE_S = 1.0  # after a step: every writer wrote again, then this long
CATCH_UP_S = 30.0
QUIET_S = 3.0  # the watcher heard nothing new for this long: it has caught up
LOSS_SLACK_MS = 1000  # a standard latch's loss from this long before its client's SUSPENDED to 5 times this after is that SUSPENDED's
RECONNECT_SLACK_S = 1.0  # a create this near a reconnection of the watcher may fall in it (see Watch)
KAZOO_WRITERS = 2
HOLD_MS = TICK_MS  # how long a zabby server that stops serving holds its idle clients (its default)
ZABBY_SETTINGS: dict[str, Any] = {"snapCount": 5000, "electionClientHoldMs": HOLD_MS}
ZK_PROPERTIES: dict[str, Any] = {"zookeeper.snapCount": 5000}
DATA_MODES = ("import", "sync")
PHASES: tuple[tuple[str, str, str], ...] = (  # name, the kind replaced, the kind it becomes
    ("onto zabby", ZOOKEEPER, ZABBY),
    ("zabby's protocol", ZABBY, ZABBY_NATIVE),
    ("ZooKeeper's protocol", ZABBY_NATIVE, ZABBY),
    ("back to ZooKeeper", ZABBY, ZOOKEEPER),
)
PROBLEM_LINES = re.compile(f"{DIGEST_MISMATCH.pattern}|Traceback \\(most recent call last\\)|Exiting JVM", re.IGNORECASE)


def protocol_of(kind: str) -> str:
    """The peer protocol a server of ``kind`` speaks."""
    return "zabby" if kind == ZABBY_NATIVE else "zookeeper"


# --- the load ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Write:
    """One create: its tag (the znode's data), when it was sent and answered, and how."""

    tag: str
    invoked: float
    answered: float = 0.0
    path: str | None = None  # the name it got, when acknowledged
    outcome: str = "unknown"  # ok | unknown | expired


class Writer(threading.Thread, ABC):
    """A session that holds ``/rolling/alive/<name>`` and creates ``/rolling/<name>/n-`` every
    ``WRITE_INTERVAL_S`` until stopped, pausing while ``paused`` is set."""

    def __init__(self, name: str) -> None:
        super().__init__(name=f"writer-{name}", daemon=True)
        self.label = name
        self.writes: list[Write] = []
        self.session_id = 0
        self.stop_event = threading.Event()
        self.paused = threading.Event()
        self.idle = threading.Event()  # set while paused (or stopped) with no create in flight
        self.last_acked = 0.0  # time.monotonic() of the last create acknowledged
        self.error = ""

    def run(self) -> None:
        count = 0
        try:
            while not self.stop_event.is_set():
                if self.paused.is_set():
                    self.idle.set()
                    self.stop_event.wait(0.05)
                    continue
                self.idle.clear()
                count += 1
                write = Write(f"{self.label} {count}", time.monotonic())
                self.writes.append(write)
                self._create(write)
                write.answered = time.monotonic()
                if write.outcome == "ok":
                    self.last_acked = write.answered
                self.stop_event.wait(WRITE_INTERVAL_S)
        except Exception as exc:  # noqa: BLE001 -- reported by the checks
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.idle.set()

    @abstractmethod
    def _create(self, write: Write) -> None:
        """Send one create and wait for its answer: ``write``'s outcome (and name)."""

    @abstractmethod
    def alive(self) -> tuple[int, int | None]:
        """(the session id now, the owner of the writer's ephemeral, None if it is gone)."""

    def acked_times(self) -> list[float]:
        return [w.answered for w in self.writes if w.outcome == "ok"]

    def pause(self) -> None:
        self.paused.set()
        self.idle.wait(3 * SESSION_TIMEOUT_S)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(3 * SESSION_TIMEOUT_S)


class KazooWriter(Writer):
    def __init__(self, name: str, hosts: str) -> None:
        super().__init__(name)
        self.states: list[tuple[float, str]] = []
        self.client = KazooClient(hosts=hosts, timeout=SESSION_TIMEOUT_S, connection_retry=kazoo_reconnect_retry())
        self.client.add_listener(lambda state: self.states.append((time.monotonic(), str(state))))
        self.client.start(timeout=30)
        self.session_id = self.client.client_id[0]
        self.client.create(f"{ALIVE}/{name}", b"", ephemeral=True)

    def _create(self, write: Write) -> None:
        try:
            write.path = self.client.create_async(f"{ROOT}/{self.label}/n-", write.tag.encode(), sequence=True).get(timeout=WRITE_TIMEOUT_S)
            write.outcome = "ok"
        except Exception as exc:  # noqa: BLE001 -- a create that may or may not have happened
            write.outcome = "expired" if type(exc).__name__ == "SessionExpiredError" else "unknown"

    def alive(self) -> tuple[int, int | None]:
        """(the session id now, the owner of its ephemeral)."""
        stat = self.client.exists(f"{ALIVE}/{self.label}")
        return self.client.client_id[0], None if stat is None else stat.ephemeralOwner

    def stop(self) -> None:
        super().stop()
        self.client.stop()
        self.client.close()


OPEN_ACL = [[31, "world", "anyone"]]
SESSION_EXPIRED = -112


class JavaWriter(Writer):
    """The same on ZooKeeper's Java client (one JavaClientDriver process, one session)."""

    def __init__(self, hosts: str) -> None:
        super().__init__("java")
        self.driver = JavaDriver(hosts)
        self.session_id = int(self.driver.call("open", label="load", auth=None))
        self._op("create", f"{ALIVE}/java", None, CreateMode.EPHEMERAL)

    def _op(self, kind: str, path: str, data: bytes | None, mode: int) -> Any:
        encoded = None if data is None else {"b64": base64.b64encode(data).decode()}
        return self.driver.call("op", label="load", kind=kind, args=[path, encoded, OPEN_ACL, mode, -1, False])

    def _create(self, write: Write) -> None:
        answer = self._op("create", f"{ROOT}/java/n-", write.tag.encode(), CreateMode.PERSISTENT_SEQUENTIAL)
        if answer[0] == "created":
            write.outcome, write.path = "ok", answer[1]
        else:
            write.outcome = "expired" if answer[1] == SESSION_EXPIRED else "unknown"

    def alive(self) -> tuple[int, int | None]:
        answer = self.driver.call("op", label="load", kind="exists", args=[f"{ALIVE}/java", False])
        owner = answer[1]["stat"][7] if answer[0] == "stat" and answer[1] else None  # Stat's ephemeralOwner
        return self.session_id, owner

    def stop(self) -> None:
        super().stop()
        self.driver.stop()


# --- a step and its checks -------------------------------------------------------------------------


@dataclass(slots=True)
class Step:
    round: int
    phase: str
    sid: int
    change: str  # "zookeeper -> zabby", ...
    role: str  # the server's mode before the step
    leader_before: int
    leader_after: int = 0
    started: float = 0.0  # time.monotonic()
    ended: float = 0.0
    started_ms: int = 0  # time.time() in ms, as Curator's records have it
    ended_ms: int = 0
    outage_s: float = 0.0  # no writer's create succeeded for this long
    worst_writer_s: float = 0.0  # the longest one writer went without
    writer_gaps: dict[str, float] = field(default_factory=dict)  # each writer's longest
    times: dict[str, float] = field(default_factory=dict)  # seconds from the start: stopped, launched, steady, outage (its start)
    notes: list[str] = field(default_factory=list)

    @property
    def elected(self) -> bool:
        """Whether the ensemble elected in this step (every client of a follower is dropped then)."""
        return self.sid == self.leader_before or self.leader_after != self.leader_before

    def line(self) -> str:
        elected = ", elected" if self.elected else ""
        return (f"round {self.round} {self.phase}: server {self.sid} ({self.role}) {self.change}: write outage {self.outage_s:.2f} s, "
                f"longest for one writer {self.worst_writer_s:.2f} s {self.writer_gaps}, leader {self.leader_before} -> {self.leader_after}"
                f"{elected}, {self.ended - self.started:.1f} s ({', '.join(f'{k} {v:.1f}' for k, v in self.times.items())})")  # fmt: skip


@dataclass(slots=True)
class Verdict:
    """What the checks found (``problems`` empty: passed) and the figures."""

    problems: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)


class Rolling:
    """The ensemble, the load, and the steps of ``rounds`` rounds (``run``)."""

    def __init__(self, workdir: Path, build_dir: Path, *, rounds: int = 1, data: str = "import", steps_max: int | None = None,
                 say: Callable[[str], None] = print) -> None:  # fmt: skip
        if data not in DATA_MODES:
            raise ValueError(f"data {data!r}: one of {DATA_MODES}")
        self.workdir, self.build_dir, self.rounds, self.data, self.say = workdir, build_dir, rounds, data, say
        self.steps_max = steps_max  # stop after this many steps (the short form)
        self.ensemble = MixedEnsemble(workdir / "servers", dict.fromkeys((1, 2, 3), ZOOKEEPER), tick_ms=TICK_MS, zk_properties=ZK_PROPERTIES,
                                      **ZABBY_SETTINGS)  # fmt: skip
        self.hosts = ",".join(server.hosts for server in self.ensemble.servers.values())
        self.ports = {sid: server.port for sid, server in self.ensemble.servers.items()}
        self.steps: list[Step] = []
        self.rounds_checked: list[Verdict] = []
        self.writers: list[Writer] = []
        self.watcher: JavaWatcher | None = None
        self.curator: dict[str, Any] = {}

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> Verdict:
        """Start, run every step under the latches, check; everything stopped at the end."""
        try:
            self.ensemble.start(120)
            self._wait_steady({sid: "zookeeper" for sid in self.ports})
            self._start_load()
            plan = self._plan()
            (self.curator,) = run_suite(self.build_dir, self.hosts, ["rolling"], on_event=lambda event: self._on_event(event, plan),
                                        log=self.workdir / "curator.log", timeout_s=3600 * max(1, self.rounds))  # fmt: skip
            return self._final_verdict()
        finally:
            self._stop_load()
            self.ensemble.kill_all()

    def _on_event(self, event: dict[str, Any], plan: Iterator[tuple[int, str, int, str]]) -> str | None:
        if event["event"] != "step":
            return None
        try:
            round_, phase, sid, kind = next(plan)
        except StopIteration:
            return "end"
        self._step(round_, phase, sid, kind)
        return None

    def _plan(self) -> Iterator[tuple[int, str, int, str]]:
        """(round, phase, server id, the kind it becomes) for every step, each phase's order
        taken when it begins (the leader last), a round's checks after its last step."""
        done = 0
        for round_ in range(1, self.rounds + 1):
            for phase, before, after in PHASES:
                leader = self._leader()
                order = sorted(sid for sid in self.ports if sid != leader) + [leader]
                for sid in order:
                    if self.ensemble.kinds[sid] != before:
                        raise AssertionError(f"server {sid} is {self.ensemble.kinds[sid]}, not {before}, at the start of {phase!r}")
                    if self.steps_max is not None and done >= self.steps_max:
                        self._check_round(round_)
                        return
                    yield round_, phase, sid, after
                    done += 1
            self._check_round(round_)

    def _step(self, round_: int, phase: str, sid: int, kind: str) -> None:
        before = self.ensemble.kinds[sid]
        leader = self._leader()
        step = Step(round_, phase, sid, f"{before} -> {kind}", server_mode(self.ports[sid]), leader, started=time.monotonic(),
                    started_ms=int(time.time() * 1000))  # fmt: skip
        server = self.ensemble.servers[sid]
        stop_processes([server.proc])  # SIGTERM, as systemctl stop
        step.times["stopped"] = time.monotonic() - step.started
        replacement = self._replacement(sid, before, kind, step)
        replacement.launch()
        step.times["launched"] = time.monotonic() - step.started
        step.leader_after = self._wait_steady({other: protocol_of(self.ensemble.kinds[other]) for other in self.ports})
        step.times["steady"] = time.monotonic() - step.started
        self._settle(step)
        self.steps.append(step)
        self.say(step.line())

    def _replacement(self, sid: int, before: str, kind: str, step: Step) -> ServerProcess | ZooKeeperProcess:
        """Server ``sid`` as ``kind``, its data moved over (not started)."""
        if protocol_of(before) != protocol_of(kind) and ZOOKEEPER not in (before, kind):
            return self.ensemble.switch_protocol(sid, kind, bridge=True)
        server, old = self.ensemble.replace(sid, kind)
        if self.data == "import":
            source = old / "data"
            if kind == ZOOKEEPER:
                (server.data_dir / "myid").unlink()  # (export writes it)
                step.notes += self._admin("zookeeper", "export", str(source), "--out", str(server.data_dir), "--myid", str(sid))
            else:
                step.notes += self._admin("zookeeper", "import", str(source), "--data-dir", str(server.data_dir), "--myid", str(sid))
        return server

    def _admin(self, *argv: str) -> list[str]:
        """``zabby-admin`` in a process of its own, as an operator runs it (in this one it would
        hold the interpreter's lock the writers' threads need, and stall them)."""
        done = subprocess.run([sys.executable, "-m", "zabby.cli.admin", *argv], capture_output=True, text=True, timeout=ADMIN_TIMEOUT_S,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")]))},
                              check=False)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"zabby-admin {' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout.splitlines()

    def _leader(self) -> int:
        leaders = [sid for sid, port in self.ports.items() if server_mode(port) == "leader"]
        if len(leaders) != 1:
            raise AssertionError(f"not one leader: {self._modes()}")
        return leaders[0]

    def _modes(self) -> dict[int, str]:
        return {sid: server_mode(port) for sid, port in self.ports.items()}

    def _wait_steady(self, protocols: dict[int, str]) -> int:
        """Until the servers that speak with the majority serve (of its protocol, or bridging,
        or all of it bridges), one leading and the others synced with it (``mntr``'s
        zk_synced_followers), and the others do not serve; the leader."""
        majority = max(set(protocols.values()), key=list(protocols.values()).count)
        bridged = self.ensemble.bridged
        everyone = {sid for sid, protocol in protocols.items() if protocol == majority} <= bridged
        members = {sid for sid, protocol in protocols.items() if protocol == majority or sid in bridged or everyone}
        found: list[int] = []

        def steady() -> bool:
            modes = self._modes()
            leaders = [sid for sid in members if modes[sid] == "leader"]
            if len(leaders) != 1 or any(modes[sid] != "follower" for sid in members - set(leaders)):
                return False
            if any(modes[sid] not in ("not serving", "down") for sid in set(protocols) - members):
                return False
            try:
                synced = int(mntr(self.ports[leaders[0]]).get("zk_synced_followers", "-1"))
            except OSError:
                return False
            found[:] = leaders
            return synced == len(members) - 1

        if not poll_until(steady, STEP_WAIT_S, STEADY_POLL_S):  # (srvr and mntr on every server: not too often)
            raise AssertionError(f"servers {sorted(members)} not serving ({majority}'s protocol) with the others not after {STEP_WAIT_S:g} s: "
                                 f"{self._modes()}")  # fmt: skip
        return found[0]

    def _settle(self, step: Step) -> None:
        """Until every writer wrote since the servers were steady, then ``SETTLE_S`` more; the
        step's outages."""
        steady = time.monotonic()
        for writer in self.writers:
            wait_until(lambda w=writer: w.last_acked > steady, 3 * SESSION_TIMEOUT_S,  # type: ignore[misc]
                       f"{writer.label} writing again after step {step.change} of server {step.sid}")  # fmt: skip
        time.sleep(SETTLE_S)
        step.ended, step.ended_ms = time.monotonic(), int(time.time() * 1000)
        acked = {writer.label: writer.acked_times() for writer in self.writers}
        step.outage_s, outage_from = longest_gap([t for times in acked.values() for t in times], step.started, step.ended)
        step.times["outage"] = outage_from - step.started
        step.writer_gaps = {label: round(longest_gap_s(times, step.started, step.ended), 2) for label, times in acked.items()}
        step.worst_writer_s = max(step.writer_gaps.values())

    # -- the load ----------------------------------------------------------------------------------

    def _start_load(self) -> None:
        setup = KazooClient(hosts=self.hosts, timeout=SESSION_TIMEOUT_S)
        setup.start(timeout=30)
        try:
            for name in [*(f"kazoo{n}" for n in range(KAZOO_WRITERS)), "java", "alive"]:
                setup.ensure_path(f"{ROOT}/{name}")
        finally:
            setup.stop()
            setup.close()
        self.watcher = JavaWatcher("watcher", self.hosts, ROOT, WorkloadSpec(session_timeout_s=SESSION_TIMEOUT_S), self.workdir / "watcher.log",
                                   reread=True)  # fmt: skip
        self.watcher.start()
        if not self.watcher.ready.wait(60):
            raise RuntimeError(f"the recursive watcher did not register: {self.watcher.error}")
        self.writers = [*(KazooWriter(f"kazoo{n}", self.hosts) for n in range(KAZOO_WRITERS)), JavaWriter(self.hosts)]
        for writer in self.writers:
            writer.start()

    def _stop_load(self) -> None:
        for writer in self.writers:
            try:
                writer.stop()
            except Exception:  # noqa: BLE001 -- stop the others all the same
                pass
        if self.watcher is not None:
            self.watcher.stop()

    # -- the checks --------------------------------------------------------------------------------

    def _check_round(self, round_: int) -> None:
        """With the writers paused: the trees, the writes, the sessions, the watch, the logs."""
        for writer in self.writers:
            writer.pause()
        try:
            verdict = Verdict()
            trees = self._trees()
            self._check_trees(trees, verdict)
            tree = trees[min(trees)]
            self._check_writes(tree, verdict)
            self._check_sessions(verdict)
            self._check_watch(tree, verdict)
            self._check_logs(verdict)
            self.rounds_checked.append(verdict)
            self.say(f"round {round_}: {'passed' if not verdict.problems else 'FAILED: ' + '; '.join(verdict.problems)} {verdict.figures}")
        finally:
            for writer in self.writers:
                writer.paused.clear()

    def _trees(self) -> dict[int, dict[str, tuple[bytes, tuple[int, ...]]]]:
        """Every serving server's tree (but each server's own /zookeeper/config), read on a
        client of that server alone."""
        trees = {}
        for sid, port in self.ports.items():
            if server_mode(port) not in ("leader", "follower"):
                continue
            reader = KazooClient(hosts=f"127.0.0.1:{port}", timeout=SESSION_TIMEOUT_S)
            reader.start(timeout=30)
            try:
                tree = read_nodes(reader, "/", lambda data, stat: (data, tuple(stat)))
            finally:
                reader.stop()
                reader.close()
            tree.pop("/zookeeper/config", None)
            trees[sid] = tree
        return trees

    def _check_trees(self, trees: dict[int, dict[str, tuple[bytes, tuple[int, ...]]]], verdict: Verdict) -> None:
        first_sid, first = min(trees.items())
        verdict.figures["znodes"] = len(first)
        if not poll_until(lambda: len({srvr_zxid(self.ports[sid]) for sid in trees}) == 1, CATCH_UP_S):
            verdict.problems.append(f"the servers' last zxids differ with the writers paused: { {sid: srvr_zxid(self.ports[sid]) for sid in trees} }")
        for sid, tree in trees.items():
            differing = sorted(path for path in set(tree) | set(first) if tree.get(path) != first.get(path))
            if differing:
                verdict.problems.append(f"server {sid} differs from server {first_sid} at {len(differing)} znodes, e.g. "
                                        + "; ".join(f"{p}: {tree.get(p)} / {first.get(p)}" for p in differing[:3]))  # fmt: skip

    def _check_writes(self, tree: dict[str, tuple[bytes, tuple[int, ...]]], verdict: Verdict) -> None:
        acked = [w for writer in self.writers for w in writer.writes if w.outcome == "ok"]
        lost = [w.path for w in acked if w.path not in tree]
        verdict.figures.update({"acknowledged": len(acked), "unknown": sum(w.outcome == "unknown" for writer in self.writers for w in writer.writes)})
        if lost:
            verdict.problems.append(f"{len(lost)} acknowledged creates lost, e.g. {lost[:5]}")

    def _check_sessions(self, verdict: Verdict) -> None:
        expired = 0
        for writer in self.writers:
            session, owner = writer.alive()
            if session != writer.session_id or owner != writer.session_id or any(w.outcome == "expired" for w in writer.writes) or writer.error:
                expired += 1
                verdict.problems.append(f"{writer.label}: session 0x{writer.session_id:x} now 0x{session:x}, its ephemeral's owner {owner}, {writer.error}")
            if isinstance(writer, KazooWriter) and any(state == KazooState.LOST for _, state in writer.states):
                verdict.problems.append(f"{writer.label}: its session was LOST")
        if self.watcher is not None and self.watcher.expiries:
            expired += 1
            verdict.problems.append(f"the watcher's session expired {self.watcher.expiries} times")
        verdict.figures["sessions_expired"] = expired

    def _check_watch(self, tree: dict[str, tuple[bytes, tuple[int, ...]]], verdict: Verdict) -> None:
        """Every znode under ``/rolling`` made since the watch was added was heard created, but
        those whose create may have met a reconnection of the watcher; and those the watcher
        found when it read its tree again after each reconnection (as Curator's CuratorCache
        does): none may be missed by both."""
        watcher = self.watcher
        assert watcher is not None
        expected = {path for path in tree if path.startswith(ROOT + "/") and path.count("/") == 3}
        deadline, count, still_since = time.monotonic() + CATCH_UP_S, -1, time.monotonic()
        while not expected <= heard(watcher) | watcher.reread and time.monotonic() < deadline and time.monotonic() - still_since < QUIET_S:
            if len(watcher.events) + len(watcher.reread) != count:
                count, still_since = len(watcher.events) + len(watcher.reread), time.monotonic()
            time.sleep(0.2)
        missed = sorted(expected - heard(watcher))
        writes = {w.tag: w for writer in self.writers for w in writer.writes}
        windows = reconnect_windows(watcher.state_times)
        unexplained = [p for p in missed if not in_windows(writes.get(tree[p][0].decode(errors="replace")), windows)]
        never_seen = [p for p in missed if p not in watcher.reread]
        verdict.figures.update({"watched_creates": len(expected), "missed_in_reconnects": len(missed) - len(unexplained),
                                "found_by_rereading": len(missed) - len(never_seen), "watcher_reconnects": len(windows),
                                "watcher_rereads": watcher.rereads})  # fmt: skip
        if unexplained:
            verdict.problems.append(f"the watcher missed {len(unexplained)} creates while connected, e.g. {unexplained[:5]}")
        if never_seen:
            verdict.problems.append(f"the watcher never saw {len(never_seen)} creates, by its watch or by reading again, e.g. {never_seen[:5]}")

    def _check_logs(self, verdict: Verdict) -> None:
        found = []
        for path in sorted(self.ensemble.workdir.glob("server*/*.log")):
            found += [f"{path.parent.name}/{path.name}: {line.strip()[:200]}" for line in path.read_text(errors="replace").splitlines()
                      if PROBLEM_LINES.search(line)]  # fmt: skip
        if found:
            verdict.problems.append(f"{len(found)} digest mismatches, tracebacks or exits in the servers' logs, e.g. {found[:3]}")

    def _final_verdict(self) -> Verdict:
        verdict = Verdict()
        for checked in self.rounds_checked:
            verdict.problems += checked.problems
        if len(self.rounds_checked) < self.rounds and self.steps_max is None:
            verdict.problems.append(f"only {len(self.rounds_checked)} of {self.rounds} rounds checked")
        raw = self.curator
        verdict.problems += [f"Curator: {failure}" for failure in raw.get("failures", [])]
        losses = raw.get("leadership_losses", [])
        if any(loss["client"] == "holder" for loss in losses):
            verdict.problems.append(f"the holder's LeaderLatch lost leadership: {[l for l in losses if l['client'] == 'holder']}")
        states = raw.get("states", [])
        uncaused = [state for state in states if state["state"] in ("SUSPENDED", "LOST") and self._cause(state) is None]
        if uncaused:
            verdict.problems.append(f"Curator clients disconnected in no step that stopped their server or elected: {uncaused[:5]}")
        suspensions = [state for state in states if state["client"] == "standard" and state["state"] == "SUSPENDED"]
        standard_losses = [loss for loss in losses if loss["client"] == "standard"]
        unexplained = [loss for loss in standard_losses if suspension_of(loss, suspensions) is None]
        if unexplained:
            verdict.problems.append(f"the standard LeaderLatch lost leadership without a disconnection: {unexplained}")
        lost_in = [self._loss_step(loss, suspensions) for loss in standard_losses]
        verdict.figures["standard_latch_lost_in"] = [label for label, _ in lost_in]
        verdict.figures["standard_latch_lost_off_its_server"] = sum(not own for _, own in lost_in)
        if any(state["state"] == "LOST" for state in raw.get("states", [])):
            verdict.problems.append("a Curator client's session was LOST")
        verdict.figures.update({"steps": len(self.steps), "standard_latch_losses": sum(loss["client"] == "standard" for loss in losses),
                                "curator_suspensions": sum(s["state"] == "SUSPENDED" for s in raw.get("states", []))})  # fmt: skip
        return verdict

    def _cause(self, state: dict[str, Any]) -> str | None:
        """The step that explains a Curator client's SUSPENDED or LOST: it stopped the client's
        server, or the ensemble elected in it."""
        step = self._step_at(state["t"])
        if step is not None:
            if step.elected:
                return "elected"
            if state.get("server") == str(self.ports[step.sid]):
                return "its server"
        return None

    def _step_at(self, t_ms: int) -> Step | None:
        """The step whose doing a disconnection at ``t_ms`` is: the one under way, else one that
        ended at most ``HOLD_MS`` before (a zabby server that stopped serving in it held its idle
        clients that long)."""
        under_way = next((step for step in self.steps if step.started_ms <= t_ms <= step.ended_ms), None)
        return under_way or next((step for step in reversed(self.steps) if step.ended_ms < t_ms <= step.ended_ms + HOLD_MS), None)

    def _loss_step(self, loss: dict[str, Any], suspensions: list[dict[str, Any]]) -> tuple[str, bool]:
        """The standard latch's loss of leadership: the step it came in, and whether that step
        replaced the server its client was connected to (issue 60's one excuse)."""
        at = suspension_of(loss, suspensions) or loss
        step = self._step_at(at["t"])
        if step is None:
            return "in no step", False
        own = at.get("server") == str(self.ports[step.sid])
        where = "its own server" if own else f"its server {self._sid_of(at.get('server'))} not replaced"
        return f"{step.round}/{step.phase}/server {step.sid}{' (elected)' if step.elected else ''}: {where}", own

    def _sid_of(self, port: str | None) -> str:
        return next((str(sid) for sid, server_port in self.ports.items() if str(server_port) == port), f"on port {port}")


def suspension_of(loss: dict[str, Any], suspensions: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The latest SUSPENDED of the latch's client that explains its loss of leadership: from
    ``LOSS_SLACK_MS`` after the loss to 5 times that before it."""
    return next((state for state in reversed(suspensions) if -LOSS_SLACK_MS <= loss["t"] - state["t"] <= 5 * LOSS_SLACK_MS), None)


def heard(watcher: JavaWatcher) -> set[str]:
    return {event.path for event in list(watcher.events) if event.type == "CREATED"}


def reconnect_windows(states: list[tuple[float, str]]) -> list[tuple[float, float]]:
    """From each Disconnected of the watcher's session to its next SyncConnected (or on),
    each from ``HOLD_MS`` before the Disconnected: a zabby server that stopped serving held
    the watcher that long, and what the others applied meanwhile never reached it (as a
    ZooKeeper follower cut off from its leader serves its clients until ``syncLimit``)."""
    windows, down = [], None
    for at, state in states:
        if state == "Disconnected" and down is None:
            down = at - HOLD_MS / 1000
        elif state == "SyncConnected" and down is not None:
            windows.append((down, at))
            down = None
    if down is not None:
        windows.append((down, float("inf")))
    return windows


def in_windows(write: Write | None, windows: list[tuple[float, float]]) -> bool:
    """Whether a create may have been applied, on the watcher's server, while the watcher was
    away: sent before it was back (and had added its watch again, ``RECONNECT_SLACK_S``) and
    answered after it left (less the slack: the server it left may have applied it after the
    one that answered)."""
    if write is None:
        return False
    return any(write.invoked < back + RECONNECT_SLACK_S and write.answered > down - RECONNECT_SLACK_S for down, back in windows)


def summary(steps: list[Step]) -> list[str]:
    """Per phase, the outages of the steps that elected and of the others, over every round:
    the shortest, the median and the longest."""
    groups: dict[tuple[str, bool], list[Step]] = {}
    for step in steps:
        groups.setdefault((step.phase, step.elected), []).append(step)
    lines = []
    for (phase, elected), found in groups.items():
        outages = sorted(step.outage_s for step in found)
        worst = sorted(step.worst_writer_s for step in found)
        lines.append(f"{phase}, {'the steps that elected' if elected else 'the other steps'} ({len(found)}): write outage {outages[0]:.2f} / "
                     f"{median(outages):.2f} / {outages[-1]:.2f} s (least / median / most); one writer's longest {worst[0]:.2f} / "
                     f"{median(worst):.2f} / {worst[-1]:.2f} s")  # fmt: skip
    return lines

