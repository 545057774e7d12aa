"""The generative adversary (issue 56): hypothesis chooses the attack, its sizes and counts, from
every attack the harness knows (``harness.jepsen.hostile``, ``harness.jepsen.amplify``), and each is
run against real servers with a well-behaved client beside them.  After each attack, what
docs/resource-model.md promises is checked:

* the servers are alive (running, and answering ``ruok``);
* their memory grew by no more than the client memory budget plus 64 MB (peak RSS, VmHWM,
  against the RSS before the attack);
* no read of the bystander (one exists("/") every 5 ms on its own session, in its own process)
  took longer than 250 ms;
* every server restarts (``kill -9``, then started again) and serves again, with what was
  written before the attack (a canary znode) still there;
* no server logged a traceback.

``tests/jepsen/test_adversary.py`` runs a few attacks in the default suite; ``scripts/adversary.py``
runs as many as asked, on 1 or 3 servers, and replays a run from its seed.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from harness.jepsen import hostile
from harness.jepsen.attacks import ATTACKS
from harness.local.jute_session import OPEN_ACL, JuteSession
from zabby.testing import Ensemble, ServerProcess, wait_until
from zabby.opcodes import OpCode
from zabby.wire import jute

MiB = 2**20
BUDGET_BYTES = 64 * MiB  # the arena's clientMemoryBudget
RSS_SLACK_MB = 64.0
TREE_ZNODES_MAX = 60_000  # the arena's maxZnodes and maxTreeBytes: a full tree's ~16 MB of znodes and 16 MiB of
TREE_BYTES_MAX = 16 * MiB  # paths, data and ACLs stay within the RSS slack (the tree is not client memory)
BYSTANDER_MAX_MS = 250.0
BYSTANDER_READY_S = 30.0  # a server that answers no read this long before an attack is a finding
CANARY = "/adversary-canary"

# Each attack's sizes, from small to the magnitude of the finding it stands for.
SIZES: dict[str, dict[str, tuple[int, int]]] = {
    "reset-storm": {"count": (10, 2_000)},
    "duplicate-xids": {"count": (2, 1_001)},
    "decreasing-xids": {"count": (2, 1_001)},
    "never-read": {"clients": (1, 8), "requests": (1, 200)},
    "slowloris": {"connections": (1, 20)},
    "oversized-frames": {"count": (1, 50)},
    "connection-flood": {"connections": (1, 200)},
    "watch-hoard": {"watches": (1, 100_000)},
    "auth-expansion": {"ids": (1, 1_200), "creates": (1, 5_000)},
    "auth-flood": {"count": (1, 20_000)},
    "quota-measures": {"nodes": (1, 2_000), "measures": (1, 2_000)},
    "ip-acl-checks": {"entries": (1, 30_000), "reads": (1, 200), "watchers": (0, 50)},
    "acl-churn": {"rounds": (1, 50), "entries": (1, 30_000)},
    "acl-bytes": {"creates": (1, 20), "acl_bytes_each": (100, 530_000)},
    "history-flood": {"multis": (1, 200), "ops": (1, 5_000)},
    "resume-scans": {"resumes": (1, 200)},
    "zxid-waits": {"connections": (1, 20), "waits": (1, 2_000)},
    "ephemeral-close": {"count": (1, 2_000), "path_bytes": (10, 1_000)},
    "session-churn": {"sessions": (1, 20_000)},
    "tree-fill": {"znodes": (1, 200_000), "data_bytes": (0, 1_000), "fresh_acls": (0, 1)},
    "watch-storm": {"watchers": (1, 59), "ops": (1, 5_000)},  # 59 and the attack's own: maxClientCnxns
    "bad-ops": {"connections": (1, 200)},
    "multi-flood": {"connections": (1, 60), "ops": (1, 5_000)},
    "set-watches-flood": {"sessions": (1, 8), "paths": (1, 20_000)},
}
SHORT_HOLDS = {"never-read": {"hold_s": 1.0}, "slowloris": {"hold_s": 1.0}, "watch-hoard": {"hold_s": 0.2}, "connection-flood": {"hold_s": 0.5}}


@dataclass(frozen=True, slots=True)
class Attack:
    kind: str
    sizes: dict[str, int] = field(default_factory=dict)

    def run(self, address: hostile.Address) -> hostile.Outcome:
        return ATTACKS[self.kind](address, **SHORT_HOLDS.get(self.kind, {}), **self.sizes)

    def __str__(self) -> str:
        return f"{self.kind}({', '.join(f'{k}={v}' for k, v in self.sizes.items())})"


def attacks(kinds: list[str] | None = None, scale: float = 1.0) -> st.SearchStrategy[Attack]:
    """An attack of one of ``kinds`` (every known one by default), its sizes drawn up to
    ``scale`` of the findings' (a short run draws small ones)."""
    chosen = kinds or sorted(SIZES)

    def sized(kind: str) -> st.SearchStrategy[Attack]:
        bounds = {name: st.integers(low, max(low, int(high * scale))) for name, (low, high) in SIZES[kind].items()}
        return st.fixed_dictionaries(bounds).map(lambda sizes: Attack(kind, sizes))

    return st.sampled_from(chosen).flatmap(sized)


@dataclass(slots=True)
class Verdict:
    """What one attack did to the servers, and what of the resource model it broke."""

    attack: Attack
    outcome: hostile.Outcome
    rss_growth_mb: float
    bystander: hostile.BystanderFigures
    restart_s: float
    problems: list[str]

    def line(self) -> str:
        f = self.bystander
        return (f"{str(self.attack):<60} {self.outcome.elapsed_s:6.2f} s  RSS +{self.rss_growth_mb:5.0f} MB  bystander max "
                f"{f.max_ms:4.0f} ms p99 {f.p99_ms:4.1f} ms ({f.failures} failed)  restart {self.restart_s:4.1f} s  "
                f"replies {self.outcome.replies} errors {self.outcome.errors} closed {self.outcome.closed_by_server}"
                + (f"  PROBLEMS: {'; '.join(self.problems)}" if self.problems else ""))  # fmt: skip


def _ruok(server: ServerProcess) -> str:
    """Its answer to ruok; empty if it answers nothing in time (a stalled server)."""
    try:
        return server.four_letter("ruok")
    except OSError:
        return ""


def _rss_kb(pid: int, key: str) -> int:
    """``key`` of /proc/<pid>/status in kB; 0 for a process that has ended (a finding of its own)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name == key:
            return int(value.split()[0])
    return 0


class Arena:
    """Servers under attack: 1 standalone or a 3-server ensemble on 127.0.0.1, started with a
    known memory budget, restarted after every attack.  The attack goes from 127.0.0.2, so
    maxClientCnxns is the attacker's alone, to the last server or, on 3 with ``at_leader``,
    to the leader; on 3 an attack that made the ensemble elect again (a stall past syncLimit:
    tickTime 200 ms x 5) is a problem."""

    def __init__(self, workdir: Path, servers: int = 1, *, at_leader: bool = False, **settings: Any) -> None:
        self.settings = {"clientMemoryBudget": BUDGET_BYTES, "maxSessionTimeout": 60_000, "maxZnodes": TREE_ZNODES_MAX,
                         "maxTreeBytes": TREE_BYTES_MAX, **settings}  # fmt: skip
        self.at_leader = at_leader
        self.ensemble: Ensemble | None = None
        if servers == 1:
            self.servers = [ServerProcess(workdir, **self.settings)]
        else:
            self.ensemble = Ensemble(workdir, servers, **self.settings)
            self.servers = list(self.ensemble.servers.values())
        self._logged = {id(server): 0 for server in self.servers}
        self._spare: hostile.Bystander | None = None  # the next attack's bystander, its interpreter started

    def start(self) -> None:
        for server in self.servers:
            server.launch()
        for server in self.servers:
            server.wait_serving(60)
        if self.ensemble is not None:
            wait_until(lambda: self.ensemble is not None and self.ensemble.leader() is not None, 60, "a leader")
        with self._session() as session:
            session.call(OpCode.CREATE, jute.CreateRequest(CANARY, b"still here", OPEN_ACL, 0))

    def stop(self) -> None:
        for server in self.servers:
            server.kill()
        if self._spare is not None:
            self._spare.discard()
            self._spare = None

    def renew(self) -> None:
        """The servers stopped, their data taken away, and started afresh: a long run's log
        and snapshots would otherwise make each restart slower than the one before (up to
        10 s after 300 attacks), though what one attack left is still there at its restart."""
        self.stop()
        for server in self.servers:
            for path in server.data_dir.iterdir() if server.data_dir.exists() else ():
                if path.is_dir():
                    shutil.rmtree(path)
                elif path.name != "myid":
                    path.unlink()
        self._mark_logs()
        self.start()

    def _mark_logs(self) -> None:
        """What each server logged so far: a traceback is looked for only in what follows."""
        for server in self.servers:
            self._logged[id(server)] = len(server.log_path.read_text(errors="replace")) if server.log_path.exists() else 0

    @property
    def target(self) -> ServerProcess:
        if self.at_leader and self.ensemble is not None:
            leader = self.ensemble.leader()
            if leader is not None:
                return self.ensemble.servers[leader]
        return self.servers[-1]

    def _epoch(self) -> int:
        """The newest epoch of the servers' last zxids: an election's leader logs a txn in its own."""
        return max((zxid >> 32 for zxid in (server.zxid() for server in self.servers) if zxid is not None), default=0)

    @contextmanager
    def _session(self) -> Iterator[JuteSession]:
        with JuteSession(self.target.port, timeout_s=30.0) as session:
            session.connect(timeout_ms=30_000)
            yield session

    def attack(self, attack: Attack) -> Verdict:
        ended = [f"before the attack: server on port {server.port} is not running" for server in self.servers if not server.running()]
        if ended:  # the last restart failed (a finding already): start them again, and the run goes on
            restart_s = self._restart(ended)
            return Verdict(attack, hostile.Outcome(str(attack)), 0.0, hostile.BystanderFigures(0, 0, 0.0, 0.0, 0.0, 0, 0, 0.0), restart_s, ended)
        pids = [server.proc.pid for server in self.servers if server.proc is not None]
        before = {pid: _rss_kb(pid, "VmRSS") for pid in pids}
        target = self.target
        epoch = self._epoch()
        bystander, self._spare = self._spare or hostile.Bystander(None).start(), None
        try:
            bystander.aim(("127.0.0.1", target.port)).wait_ready(BYSTANDER_READY_S)
        except TimeoutError as exc:  # the servers do not serve before the attack: a finding, and the run goes on
            bystander.discard()
            found = [f"before the attack: {exc}", *self._alive()]
            restart_s = self._restart(found)
            return Verdict(attack, hostile.Outcome(str(attack)), 0.0, hostile.BystanderFigures(0, 0, 0.0, 0.0, 0.0, 0, 0, 0.0), restart_s, found)
        hostile.attack_from("127.0.0.2")
        try:
            outcome = attack.run(("127.0.0.1", target.port))
        finally:
            hostile.attack_from(None)
        figures = bystander.stop()
        problems: list[str] = []
        if self.ensemble is not None and self._epoch() != epoch:
            problems.append(f"the ensemble elected a leader again (epoch {epoch} -> {self._epoch()}): a stall past syncLimit")
        growth_mb = max((_rss_kb(pid, "VmHWM") - before[pid]) / 1024 for pid in pids) if pids else 0.0
        if growth_mb > BUDGET_BYTES / MiB + RSS_SLACK_MB:
            problems.append(f"memory grew {growth_mb:.0f} MB, over the budget plus {RSS_SLACK_MB:.0f} MB")
        if figures.max_ms > BYSTANDER_MAX_MS:
            problems.append(f"a bystander's read took {figures.max_ms:.0f} ms")
        problems += self._alive()
        restart_s = self._restart(problems)
        return Verdict(attack, outcome, growth_mb, figures, restart_s, problems)

    def _alive(self) -> list[str]:
        problems = []
        for server in self.servers:
            if server.proc is None or server.proc.poll() is not None:
                problems.append(f"server on port {server.port} ended: {server.log_tail(5)}")
            elif _ruok(server) != "imok":
                problems.append(f"server on port {server.port} does not answer ruok")
            log = server.log_path.read_text(errors="replace")
            if "Traceback" in log[self._logged[id(server)]:]:
                problems.append(f"server on port {server.port} logged a traceback")
        return problems

    def _restart(self, problems: list[str]) -> float:
        """Every server killed and started again; the time until all serve with the canary."""
        started = time.monotonic()
        self.stop()
        self._spare = hostile.Bystander(None).start()  # its interpreter starts while the servers do
        self._mark_logs()
        try:
            for server in self.servers:
                server.launch()
            for server in self.servers:
                server.wait_serving(60)
            if self.ensemble is not None:
                wait_until(lambda: self.ensemble is not None and self.ensemble.leader() is not None, 60, "a leader after the restart")
            with self._session() as session:
                header, record = session.call(OpCode.GET_DATA, jute.GetDataRequest(CANARY, False))
                if header.err or record is None or record.data != b"still here":
                    problems.append(f"the canary after the restart: err {header.err}")
        except (RuntimeError, TimeoutError, AssertionError, OSError) as exc:
            problems.append(f"the servers did not restart: {exc}")
        return time.monotonic() - started
