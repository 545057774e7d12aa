"""One run from a seed: start the cluster, run the workloads under the nemesis for the
duration, heal everything, wait for convergence (bounded), check, and return a result record
(JSON-able) whose ``failures`` list is empty only when every check passed.

Order after the duration: the nemesis stops and the cluster heals (that instant is "the
heal"); the workers stop; each worker proves its session alive (or not); the servers must
converge within ``converge_s`` of the heal; the ephemerals of dead and closed sessions must
go (bounded by their session timeout); the servers are read once more (they must agree
again) and that final tree is what the checks use.  A watchdog kills the cluster if the run
overruns its budget, which unblocks every wait, so a run cannot hang.

With hostile clients among the kinds (``mixed,clients``), their attacks and a well-behaved
client run beside the workload from its start; both stop at the heal, after the servers
continue (an attack on a stopped server ends once it answers), before the checks.
"""

from __future__ import annotations

import gc
import gzip
import random
import re
import shlex
import shutil
import subprocess
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.jepsen import checker, clients
from harness.jepsen.cluster import Cluster, ClusterSpec
from harness.jepsen.converge import Convergence, Inspector, ServingClock, Tree, reader_kind
from harness.jepsen.history import OK, History, longest_write_gap_s
from harness.jepsen.hostile_load import BYSTANDER_SID, HostileSide
from harness.jepsen.nemesis import SLOW_FSYNC_MS, Nemesis, hostile_kinds, kinds_for, reconfigures, schedule, spares_for
from harness.jepsen.reconfig import CONFIG_PATH, Reconfigurer
from harness.jepsen.watch_side import WatchSide, setup_watch
from zabby.membership import Membership
from harness.jepsen.workloads import EPHEMERALS, INITIAL_VALUE, SEQUENCE, SessionChurner, Worker, WorkloadSpec, register_path, setup

MONITOR_POLL_S = 0.5
JOIN_MARGIN_S = 15.0
SETUP_TIMEOUT_S = 30.0
WATCHDOG_SLACK_S = 240.0
RUN_GC_THRESHOLDS = (20_000, 20, 20)  # the collector during a run (see _collections_kept_short)
REPORTED_MAX = 10  # items of one kind quoted in the failures
HOSTILE_CNXNS_PER_IP = 60  # maxClientCnxns with hostile clients (ZooKeeper's default), for a connection flood to pass it


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSpec:
    seed: int
    out_dir: Path
    system: str = "zabby"
    servers: int = 3
    duration_s: float = 60.0
    nemesis: str = "mixed"
    clients: tuple[str, ...] = ("zabby", "kazoo")
    workers: int = 4
    tick_ms: int = 2000
    init_limit: int = 10
    sync_limit: int = 5
    fault_s: float = 8.0
    quiet_s: float = 4.0
    converge_s: float = 30.0
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    keep_data: bool = False  # keep the servers' data dirs of a passing run too
    quorum_auth: bool = False  # zabby's peer links authenticate (quorum.auth)
    watch: bool = True  # the watch workload (watch_side): a recursive watcher per server, checked after the run
    mix: tuple[str, ...] = ()  # system "mixed": each server's kind ("zookeeper" or "zabby"), by id


def reproduce_command(spec: RunSpec) -> str:
    args = [
        "python", "scripts/jepsen.py", *(["--mix", ",".join(spec.mix)] if spec.mix else ["--system", spec.system, "--servers", str(spec.servers)]), "--runs", "1",
        "--seed", str(spec.seed), "--duration", f"{spec.duration_s:g}", "--nemesis", spec.nemesis,
        "--clients", ",".join(spec.clients), "--workers", str(spec.workers), "--tick-ms", str(spec.tick_ms),
        "--init-limit", str(spec.init_limit), "--sync-limit", str(spec.sync_limit),
        "--fault-s", f"{spec.fault_s:g}", "--quiet-s", f"{spec.quiet_s:g}", "--keys", str(spec.workload.keys),
        "--session-timeout", f"{spec.workload.session_timeout_s:g}", "--op-timeout", f"{spec.workload.op_timeout_s:g}",
        "--churn-session-timeout", f"{spec.workload.churn_session_timeout_s:g}",
        *(["--quorum-auth"] if spec.quorum_auth else []), *([] if spec.watch else ["--no-watch"]),
    ]  # fmt: skip
    return shlex.join(args)


def system_label(spec: RunSpec) -> str:
    """The system as results and tables name it: a mixed ensemble's with its kinds by server id
    ("mixed zookeeper+zookeeper+zabby")."""
    return f"{spec.system} {'+'.join(spec.mix)}" if spec.mix else spec.system


def effective_clients(spec: RunSpec) -> tuple[str, ...]:
    """ZooKeeper speaks only jute: its runs, and those of an ensemble with ZooKeeper servers in
    it, use kazoo whatever was asked."""
    return spec.clients if spec.system == "zabby" else ("kazoo",)


def run_once(spec: RunSpec) -> dict[str, Any]:
    run_dir = _fresh_dir(spec.out_dir.resolve() / f"{system_label(spec).replace(' ', '-')}-{spec.servers}-seed{spec.seed}")  # servers run in their own folders
    history = History()
    result: dict[str, Any] = {"seed": spec.seed, "system": system_label(spec), "servers": spec.servers, "nemesis": spec.nemesis, "quorum_auth": spec.quorum_auth,
                              "clients": list(effective_clients(spec)), "duration_s": spec.duration_s, "tick_ms": spec.tick_ms,
                              "dir": str(run_dir), "commit": git_commit(), "reproduce": reproduce_command(spec),
                              "failures": [], "notes": []}  # fmt: skip
    kinds = kinds_for(spec.nemesis)
    cluster = Cluster(ClusterSpec(system=spec.system, servers=spec.servers, workdir=run_dir, tick_ms=spec.tick_ms, init_limit=spec.init_limit, sync_limit=spec.sync_limit,
                                  reconfig=reconfigures(kinds), spares=spares_for(kinds), max_client_cnxns=HOSTILE_CNXNS_PER_IP if hostile_kinds(kinds) else 0,
                                  quorum_auth=spec.quorum_auth, kinds=spec.mix))  # fmt: skip
    cluster.clock = history.now_s
    abort = threading.Event()
    watchdog = threading.Timer(_budget_s(spec), _fire_watchdog, args=(cluster, abort, result))
    watchdog.daemon = True
    watchdog.start()
    try:
        with _collections_kept_short(result):
            _Run(spec, cluster, history, result, abort).execute()
        _note_slow_disk(cluster, result)
    except Exception as exc:  # noqa: BLE001 - the run fails with the harness's reason
        result["failures"].append(f"harness error: {type(exc).__name__}: {exc}")
        (run_dir / "harness-error.txt").write_text(traceback.format_exc())
    finally:
        watchdog.cancel()
        cluster.stop()
    result["ok"] = not result["failures"]
    result["wall_s"] = round(history.now_s(), 1)
    history.write_json(run_dir / ("history.json" if not result["ok"] else "history.json.gz"))
    if result["ok"] and not spec.keep_data:
        _shrink(cluster)
    (run_dir / "result.json").write_text(_json(result))
    return result


def _shrink(cluster: Cluster) -> None:
    """A passing run keeps its logs (gzipped), not its data dirs (nor the watch's kept txn
    logs): 50 runs stay small."""
    shutil.rmtree(cluster.spec.workdir / "kept-logs", ignore_errors=True)
    for server in cluster.servers.values():
        shutil.rmtree(server.data_dir, ignore_errors=True)
        for path in server.log_paths:
            if path.exists():
                path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes(), compresslevel=6))
                path.unlink()


@contextmanager
def _collections_kept_short(result: dict[str, Any]) -> Iterator[None]:
    """Threads of this process relay every link between the servers (``ProxyHub``), so a pause
    here is a pause of the whole network: a full collection of a large caller (a pytest
    process late in the suite) can outlast a sync limit of 2.5 s and look like a partition.
    What the caller holds is frozen for the run, out of the collections' way, and the pauses
    are noted in the result (``harness_gc``).  A run of the short test from a process holding
    16M tracked objects: longest pause 0.95 s with them frozen, 1.96 s without.

    The run's own history grows as it goes, so the collector runs less often meanwhile
    (``RUN_GC_THRESHOLDS``): a 30 s mixed run of scripts/jepsen.py (seed 2074315889, twice
    each) paused 3.0-4.1 s in all, longest 0.24-0.27 s, against 10.5-10.7 s and 0.56-0.64 s
    (~5,200 collections) at Python's default thresholds."""
    gc.collect()
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(*RUN_GC_THRESHOLDS)
    pauses: list[float] = []
    started = [0.0]

    def timing(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append(time.perf_counter() - started[0])

    gc.callbacks.append(timing)
    try:
        yield
    finally:
        gc.callbacks.remove(timing)
        gc.set_threshold(*thresholds)
        gc.unfreeze()
        result["harness_gc"] = {"collections": len(pauses), "pause_max_s": round(max(pauses, default=0.0), 3), "paused_s": round(sum(pauses), 3)}


def _note_slow_disk(cluster: Cluster, result: dict[str, Any]) -> None:
    """Whether the slow disk showed (zabby's ZABBY_DISK_FAULTS hook may not be there yet)."""
    if cluster.spec.system != "zabby" or not result.get("faults", {}).get("slow-disk"):
        return
    slowest = max((float(server.mntr().get("zk_max_fsynctime", 0)) for server in cluster.servers.values()), default=0.0)
    if slowest < 0.9 * SLOW_FSYNC_MS:
        result["notes"].append(f"slow-disk injected, but no server reports an fsync of {SLOW_FSYNC_MS} ms (slowest {slowest:.0f} ms): is ZABBY_DISK_FAULTS read?")


def _budget_s(spec: RunSpec) -> float:
    return spec.duration_s + 3 * spec.converge_s + 3 * spec.workload.churn_session_timeout_s + WATCHDOG_SLACK_S


def _fire_watchdog(cluster: Cluster, abort: threading.Event, result: dict[str, Any]) -> None:
    result["failures"].append("watchdog: the run overran its time budget; the cluster was killed")
    abort.set()
    cluster.stop()


class _Run:
    def __init__(self, spec: RunSpec, cluster: Cluster, history: History, result: dict[str, Any], abort: threading.Event) -> None:
        self.spec, self.cluster, self.history, self.result, self.abort = spec, cluster, history, result, abort
        self.failures: list[str] = result["failures"]
        self.notes: list[str] = result["notes"]
        self.rng = random.Random(spec.seed)
        self.watch_start_zxid = 0

    def execute(self) -> None:
        spec = self.spec
        if not self.cluster.start():
            self.failures.append(f"cluster did not start: {self.cluster.modes()}")
            return
        keys = self._setup()
        stop_workers, stop_nemesis = threading.Event(), threading.Event()
        kinds = effective_clients(spec)
        workers = [Worker(f"w{i}-{kinds[i % len(kinds)]}", kinds[i % len(kinds)], self.cluster.hosts, self.history, keys, spec.workload, self.rng.getrandbits(32), stop_workers) for i in range(spec.workers)]
        churner = SessionChurner(kinds, self.cluster.hosts, self.history, spec.workload, self.rng.getrandbits(32), stop_workers)
        nemesis_kinds = kinds_for(spec.nemesis)
        faults = schedule(self.rng.getrandbits(32), spec.duration_s, nemesis_kinds, spec.fault_s, spec.quiet_s)
        reconfigurer = Reconfigurer(self.cluster, self.history, reader_kind(spec.system)) if self.cluster.spec.reconfig else None
        nemesis = Nemesis(self.cluster, self.history, faults, stop_nemesis, reconfigurer)
        hostile = HostileSide(self.cluster, self.history, nemesis_kinds, self.rng.getrandbits(32), stop_nemesis) if hostile_kinds(nemesis_kinds) else None
        watch = WatchSide(self.cluster, spec.workload, self.rng.getrandbits(32), Path(self.result["dir"]), stop_workers) if spec.watch else None
        monitor = threading.Thread(target=self._monitor, args=(stop_workers,), name="monitor", daemon=True)
        heal_s = spec.duration_s
        try:
            if watch is not None:
                watch.start(self.watch_start_zxid)  # every watch registered before anyone writes
            for thread in (*workers, churner, monitor, nemesis):
                thread.start()
            if hostile is not None:
                hostile.start()
            self.abort.wait(max(0.0, spec.duration_s - self.history.now_s()))
            stop_nemesis.set()
            nemesis.join(spec.fault_s * 2 + JOIN_MARGIN_S)
            self.cluster.heal()
            if hostile is not None:
                hostile.stop(self.notes)
            if reconfigurer is not None:
                self._restore_membership(reconfigurer)
            heal_s = self.history.now_s()
            clock = ServingClock(self.cluster, spec.converge_s)
            clock.start()
            self.history.complete(self.history.invoke("nemesis", "heal-all"), OK, None)
            stop_workers.set()
            self._join([*workers, churner, monitor, *([watch.writer] if watch is not None else [])], spec.workload.op_timeout_s * 3 + JOIN_MARGIN_S)
            self._after_heal(workers, churner, keys, heal_s, clock, watch)
        finally:
            stop_workers.set()
            stop_nemesis.set()
            if watch is not None:
                watch.close()
            if hostile is not None:
                hostile.stop(self.notes)
            if reconfigurer is not None:
                reconfigurer.close()
                self.result["reconfigs"] = {status: reconfigurer.outcomes[status] for status in ("ok", "fail", "unknown")}
            with ThreadPoolExecutor(max(1, len(workers))) as pool:
                list(pool.map(lambda w: clients.close_quietly(w.client) if w.client is not None else None, workers))
        self._summarize(workers, churner, nemesis, heal_s)
        if hostile is not None:
            self._summarize_hostile(hostile)

    def _restore_membership(self, reconfigurer: Reconfigurer) -> None:
        """The final heal: the original membership back (the nemesis's last heal usually did it)."""
        op_id = self.history.invoke("nemesis", "restore-membership")
        restored = reconfigurer.restore()
        self.cluster.heal()
        self.history.complete(op_id, OK if restored else "fail", None)
        if not restored:
            self.failures.append(f"the original membership {list(self.cluster.original)} was not back within the restore's bound (last error: {reconfigurer.last_error or 'none'})")

    def _check_membership(self, inspector: Inspector) -> None:
        """After the final heal: every server reports the original voters (no observer, no
        one else) at one config version, and the dynamic config files agree with it."""
        original = set(self.cluster.original)
        reported: dict[int, str] = {}
        for sid in sorted(self.cluster.servers):
            try:
                reader = inspector.reader(sid)
                clients.call(reader.sync_async, "/", timeout_s=20.0)
                data, _ = clients.call(reader.get_async, CONFIG_PATH, timeout_s=20.0)
                membership = Membership.parse(data.decode())
                reported[sid] = f"voters {sorted(membership.voters)} observers {sorted(membership.observers)} version {membership.version:x}"
                if membership.voters != original or membership.observers:
                    self.failures.append(f"server {sid} reports membership {reported[sid]}, not the original voters {sorted(original)}")
            except Exception as exc:  # noqa: BLE001
                reported[sid] = f"unreadable: {type(exc).__name__}: {exc}"[:200]
                self.failures.append(f"server {sid}'s {CONFIG_PATH}: {reported[sid]}")
        versions = {text.rsplit(" ", 1)[1] for text in reported.values() if not text.startswith("unreadable")}
        if len(versions) > 1:
            self.failures.append(f"servers report different config versions: {reported}")
        files = {sid: server.dynamic_membership() for sid, server in sorted(self.cluster.servers.items())}
        shapes = {sid: None if m is None else (m.version, tuple((x.sid, x.host, x.quorum_port, x.election_port, x.observer) for x in m.members)) for sid, m in files.items()}
        self.result["membership"] = {"reported": reported, "files": {sid: None if m is None else m.text() for sid, m in files.items()}}
        if any(m is None for m in files.values()):
            self.failures.append(f"dynamic config files unreadable on servers {[sid for sid, m in files.items() if m is None]}")
        elif len(set(shapes.values())) > 1:
            self.failures.append(f"dynamic config files disagree: { {sid: m.text() for sid, m in files.items() if m is not None} }")
        elif any(m.voters != original or m.observers for m in files.values() if m is not None):
            self.failures.append(f"dynamic config files hold another membership: {next(iter(files.values())).text()!r}")  # type: ignore[union-attr]

    def _setup(self) -> list[str]:
        hosts = ",".join(self.cluster.direct_hosts(sid) for sid in self.cluster.servers)
        client = clients.open_client(reader_kind(self.spec.system), hosts, 30.0, SETUP_TIMEOUT_S)
        try:
            keys = setup(client, self.spec.workload, SETUP_TIMEOUT_S)
            if self.spec.watch:
                self.watch_start_zxid = setup_watch(client, SETUP_TIMEOUT_S)
            return keys
        finally:
            clients.close_quietly(client)

    def _monitor(self, stop: threading.Event) -> None:
        """Servers that die on their own are recorded (and restarted) as soon as seen.  In a
        mixed ensemble, the roles each kind held are sampled too (``roles``: how many polls
        found a server of that kind leading, following, ...: whether zabby led)."""
        roles: Counter[str] = Counter()
        while not stop.wait(MONITOR_POLL_S):
            self.cluster.reap_deaths()
            if self.spec.mix:
                roles.update(f"{self.cluster.servers[sid].kind} {mode}" for sid, mode in self.cluster.modes().items())
                self.result["roles"] = dict(sorted(roles.items()))

    def _join(self, threads: list[threading.Thread], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            self.notes.append(f"threads still busy after the stop (left behind): {stuck}")

    def _after_heal(self, workers: list[Worker], churner: SessionChurner, keys: list[str], heal_s: float, clock: ServingClock, watch: WatchSide | None) -> None:
        with ThreadPoolExecutor(max(1, len(workers))) as pool:
            fates = [f for f in pool.map(lambda w: w.final_session(), workers) if f is not None]
        sessions = fates + churner.sessions
        inspector = Inspector(self.cluster)
        try:
            first = inspector.wait_converged(max(1.0, self.spec.converge_s - (self.history.now_s() - heal_s)))
            seen_s = self.history.now_s() - heal_s
            clock.join(max(0.0, self.spec.converge_s - seen_s))
            self._record_convergence(first, clock.after_s if clock.after_s is not None else seen_s)
            tree = None
            if first.converged:
                self._wait_ephemerals_gone(inspector, [s.name for s in sessions if s.fate != "live"])
                final = inspector.wait_converged(self.spec.converge_s)
                if final.converged:
                    tree = next(iter(final.trees.values()))
                else:
                    self.failures.append(f"servers disagree again after the expiries: {final.reason}")
            self._check_data(tree, keys, sessions)
            if watch is not None:
                if tree is not None:
                    watch.check(self.result, self.failures, self.notes)
                else:
                    self.notes.append("watch events not checked: the servers never agreed on a final tree")
            if self.cluster.spec.reconfig:
                self._check_membership(inspector)
            if tree is not None:
                self._check_restart(inspector)
        finally:
            inspector.close()

    def _check_restart(self, inspector: Inspector) -> None:
        """Every server killed (SIGKILL) at once and started again: all serve within
        ``converge_s`` and agree on the tree they held (an ephemeral may expire meanwhile;
        nothing else changes, and nothing appears)."""
        held = inspector.wait_converged(self.spec.converge_s)
        if not held.converged:
            self.failures.append(f"the servers disagree before the restart of all: {held.reason}")
            return
        tree = next(iter(held.trees.values()))
        started = time.monotonic()
        for sid in self.cluster.servers:
            self.cluster.kill(sid)
        for sid in self.cluster.servers:
            self.cluster.restart(sid)
        found = inspector.wait_converged(self.spec.converge_s)
        self.result["restart_s"] = round(time.monotonic() - started, 3) if found.converged else None
        if not found.converged:
            self.failures.append(f"every server killed and started again: not converged within {self.spec.converge_s:g}s: {found.reason}")
            return
        after = next(iter(found.trees.values()))
        changed = sorted(path for path, (data, version, owner) in tree.items() if not owner and after.get(path) != (data, version, owner))
        appeared = sorted(set(after) - set(tree))
        if changed or appeared:
            self.failures.append(f"every server killed and started again: persistent znodes lost or changed {changed[:REPORTED_MAX]}, "
                                 f"znodes that appeared {appeared[:REPORTED_MAX]}")  # fmt: skip

    def _record_convergence(self, found: Convergence, after_s: float) -> None:
        """Converged: the trees agreed within the bound.  The time is from the heal to when srvr
        first showed every server serving at one zxid (the trees, read later, confirm it), or
        else to when the trees agreed."""
        self.result["converged"] = found.converged
        self.result["converge_s"] = round(after_s, 3) if found.converged else None
        self.result["digest"] = found.digest
        self.result["convergence_trace"] = list(found.trace)
        if not found.converged:
            self.failures.append(f"not converged within {self.spec.converge_s:g}s after the heal: {found.reason}")
        if found.digest == "missing" and self.spec.system == "zabby":
            self.notes.append("zk_digest not reported by mntr (or moving): digests not compared")

    def _wait_ephemerals_gone(self, inspector: Inspector, names: list[str]) -> None:
        """Until no ephemeral of a closed or dead session is left (their sessions expire)."""
        deadline = time.monotonic() + 3 * self.spec.workload.churn_session_timeout_s + 2 * self.spec.tick_ms / 1000 + 10
        wanted_gone = set(names)
        while time.monotonic() < deadline and not self.abort.is_set():
            try:
                tree = inspector.trees()[min(self.cluster.servers)]
            except Exception:  # noqa: BLE001 - a reader reconnecting: try again
                time.sleep(0.5)
                continue
            if not {p.rsplit("/", 1)[1] for p in tree if p.startswith(EPHEMERALS + "/")} & wanted_gone:
                return
            time.sleep(0.5)

    def _check_data(self, tree: Tree | None, keys: list[str], sessions: list[checker.EphemeralSession]) -> None:
        """Registers from the history (plus, when the servers agreed, a last read of the final
        tree); creates and ephemerals against the final tree, which only a converged cluster has."""
        final_s = self.history.now_s()
        operations = self.history.operations()
        per_key = checker.register_ops(operations)
        verdicts = []
        for key in keys:
            ops = per_key.get(key, [])
            if tree is not None:
                data, version, _ = tree[register_path(key)]
                ops = [*ops, checker.RegisterOp(op_id=-1, f="read", status=OK, args=None, result=[data.decode(), version], invoke_s=final_s, return_s=final_s)]
            verdicts.append(checker.check_register(key, ops, (INITIAL_VALUE, 0)))
        self._record_linearizability(verdicts)
        if tree is None:
            self.notes.append("creates and ephemerals not checked: the servers never agreed on a final tree")
            return
        seq = {p.rsplit("/", 1)[1]: data for p, (data, _, _) in tree.items() if p.startswith(SEQUENCE + "/")}
        self._record_creates(checker.check_creates(operations, seq))
        ephemerals = {p.rsplit("/", 1)[1]: owner for p, (_, _, owner) in tree.items() if p.startswith(EPHEMERALS + "/")}
        self._record_ephemerals(checker.check_ephemerals(sessions, ephemerals))

    def _record_linearizability(self, verdicts: list[checker.KeyResult]) -> None:
        bad = [v for v in verdicts if v.linearizable is False]
        undecided = [v.key for v in verdicts if v.linearizable is None]
        self.result["linearizable"] = False if bad else (None if undecided else True)
        self.result["register_ops_checked"] = sum(v.ops for v in verdicts)
        for verdict in bad:
            stuck = "; ".join(f"{o.f} {o.status} args={o.args} result={o.result} [{o.invoke_s:.3f}, {o.return_s:.3f}] op {o.op_id}" for o in verdict.stuck_at[:REPORTED_MAX])
            self.failures.append(f"register {verdict.key} not linearizable ({verdict.ops} ops); could not place: {stuck}")
        if undecided:
            self.notes.append(f"linearizability search hit its bound for keys {undecided}")

    def _record_creates(self, report: checker.CreateReport) -> None:
        self.result["creates"] = {"acknowledged": report.acknowledged, "lost": len(report.lost), "duplicated": len(report.duplicated),
                                  "unexpected": len(report.unexpected), "out_of_order": len(report.out_of_order), "unknown_applied": report.unknown_applied}  # fmt: skip
        for label, items in (("lost", report.lost), ("duplicated", report.duplicated), ("unexpected", report.unexpected), ("out of order", report.out_of_order)):
            if items:
                self.failures.append(f"sequential creates {label}: {len(items)}, e.g. {list(items[:REPORTED_MAX])}")

    def _record_ephemerals(self, report: checker.EphemeralReport) -> None:
        self.result["ephemerals"] = {"live": report.live, "gone": report.gone, "live_missing": len(report.live_missing), "dead_present": len(report.dead_present), "wrong_owner": len(report.wrong_owner)}
        for label, items in (("of live sessions missing", report.live_missing), ("of closed or dead sessions still present", report.dead_present), ("with a wrong owner", report.wrong_owner)):
            if items:
                self.failures.append(f"ephemerals {label}: {list(items[:REPORTED_MAX])}")

    def _summarize(self, workers: list[Worker], churner: SessionChurner, nemesis: Nemesis, heal_s: float) -> None:
        operations = [op for op in self.history.operations() if op.process != "nemesis"]
        counts = {status: sum(1 for op in operations if op.status == status) for status in ("ok", "fail", "unknown")}
        self.result["ops"] = {"total": len(operations), **counts}
        self.result["faults"] = dict(sorted(nemesis.injected.items()))
        if nemesis.skipped:
            self.result["faults_skipped"] = dict(sorted(nemesis.skipped.items()))
            self.notes.append(f"faults this system has no hook for (calm instead): {dict(nemesis.skipped)}")
        self.result["longest_write_gap_s"] = round(longest_write_gap_s(operations, 0.0, heal_s), 3)
        self.cluster.reap_deaths()
        self.result["deaths"] = [asdict(d) for d in self.cluster.deaths]
        for death in self.cluster.deaths:
            self.failures.append(f"server {death.sid} died on its own (exit code {death.exit_code}) at {death.time_s:.1f}s")
        self.result["error_lines"], crash_lines = {}, []
        for sid, server in self.cluster.servers.items():
            crashes, errors = server.log_findings()
            self.result["error_lines"][sid] = errors
            crash_lines += [f"server {sid} {line}" for line in crashes]
        if crash_lines:
            distinct = Counter(re.sub(r"0x[0-9a-f]+", "0x…", line) for line in crash_lines)
            self.result["crashes"] = dict(distinct)
            summary = "; ".join(f"{line} (x{count})" for line, count in distinct.most_common(REPORTED_MAX))
            self.failures.append(f"{len(crash_lines)} tracebacks, critical lines or digest mismatches in server logs: {summary}")
        for name, error in [(w.name, w.error) for w in workers] + [("churner", churner.error), ("nemesis", nemesis.error)]:
            if error:
                self.failures.append(f"{name} stopped: {error}")

    def _summarize_hostile(self, hostile: HostileSide) -> None:
        """The attacks count among the faults (per kind); their outcomes and the well-behaved
        client's figures go in the result.  An attack that raised is not a failure (its target
        may have been down); a bystander that did not report is, since its figure is the
        run's measure of the attacks."""
        self.result["faults"] = dict(sorted((Counter(self.result.get("faults", {})) + hostile.load.made).items()))
        self.result["attacks"] = hostile.load.report()
        if hostile.load.raised:
            self.notes.append(f"attacks that raised (their target down, stopped or not serving, say): {dict(sorted(hostile.load.raised.items()))}")
        self.result["bystander"] = hostile.figures
        if not hostile.figures or "error" in hostile.figures:
            self.failures.append(f"the well-behaved client on server {BYSTANDER_SID} did not report its figures: {hostile.figures.get('error', 'it never stopped')}")
        if hostile.load.error:
            self.failures.append(f"hostile load stopped: {hostile.load.error}")


def _fresh_dir(path: Path) -> Path:
    candidate, index = path, 1
    while candidate.exists() and index < 1000:
        index += 1
        candidate = path.with_name(f"{path.name}-{index}")
    candidate.mkdir(parents=True)
    return candidate


def git_commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10, cwd=Path(__file__).parent, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() or "unknown"


def _json(record: dict[str, Any]) -> str:
    import json

    return json.dumps(record, indent=2, default=str)
