"""The instructions each server executes per op: a named old commit against the working tree.

    python -m harness.bench.instructions 50448ec                      # every op, both deployments, 2 rounds
    python -m harness.bench.instructions 55ce23b --ops create,pipelined-create --deployments 3-server

Rates (``harness.bench.compare``) and CPU times (``harness.bench.window``) move with the
machine's speed, which on a shared VM moves by a fifth within a run.  An instruction count moves
far less: each server runs under valgrind's callgrind, its instrumentation switched on only over
a measured window (``callgrind_control``), and the window's user-space instructions (callgrind's
``Ir``: the interpreter, the C libraries; not the kernel's side of a syscall) are divided by the
ops a kazoo client made in it.  A server under callgrind runs some 50 times slower; its idle
work (timers, pings: a few million instructions a second, in lumps) is measured in an idle
window after each (at least as long, and 10 s) and taken off for the busy window's length, and
the ops repeat until a window has lasted ``--seconds`` so that the lumps even out.  A count
still moves with timing: how often a server's loop finds its socket empty, how its collector's
runs fall.  Run it alone on the machine (two runs at once read one commit up to 20% apart);
a role whose median grows by more than 3% is FLAGGED, except one that executes under 10,000 an
op on both sides (it takes no part: a getData's leader).  docs/benchmarks.md (stop 79) has what
a commit against itself reads.  What it cannot see: time spent in the kernel (the calls per
write are counted by ``window``), waiting (an fsync, a wakeup: ``write_path``), and what an
instruction costs (cache misses, the branch predictor).

The ops (``--ops``): ``create`` (a new 100-byte znode), ``set`` (100 bytes on one znode),
``get``, one at a time; ``pipelined-create``, up to 32 creates in flight on the one connection
(drained every ``--count``).  The client talks to one server: a follower on 3 servers
(``follower*``; the other is ``follower``).
The sides alternate, each round on servers of its own.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from harness import CHECKOUT
from harness.bench.compare import flagged_exit, old_checkout
from zabby.testing import Ensemble, ServerProcess
from zabby.testing.processes import stop_processes, wait_serving

OPS = ("create", "set", "get", "pipelined-create")
DEPLOYMENTS = ("standalone", "3-server")
FLAG_ABOVE = 1.03  # new/old
LEAST_FLAGGED = 10_000  # instructions per op: below it on both sides a role takes no part in the op (a getData's leader)
IN_FLIGHT = 32  # pipelined-create
VALUE = b"x" * 100
TICK_MS = 2000  # a server under callgrind is ~50x slower: no election or sync limit may lapse
START_S = 600.0
IDLE_MIN_S = 10.0  # the idle work comes in lumps (timers, pings): measured over at least this long
TOTALS = re.compile(rb"^totals: (\d+)$", re.M)


def callgrind_missing() -> str | None:
    """Why the servers cannot run under callgrind here, or None."""
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not found (Debian: apt-get install valgrind)" if missing else None


def dumped_total(path: Path) -> int:
    """The instructions of one callgrind dump (its ``totals:`` line)."""
    found = TOTALS.search(path.read_bytes())
    if found is None:
        raise ValueError(f"{path}: no totals line (not a callgrind dump?)")
    return int(found.group(1))


class CallgrindServers:
    """A deployment's servers, each run under callgrind with its instrumentation off; ``window``
    counts what each executes while a function runs.  Stopped by ``close``."""

    def __init__(self, root: Path, workdir: Path, deployment: str) -> None:
        self.workdir = workdir
        if deployment == "standalone":
            self.servers = {1: ServerProcess(workdir / "server1")}
        else:
            self.servers = Ensemble(workdir, int(deployment.split("-")[0])).servers
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        environment = {**os.environ, "PYTHONPATH": str(root)}
        try:
            for sid, server in self.servers.items():
                server.settings["tickTime"] = TICK_MS
                server.write_config()
                command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={self._dump_stem(sid)}",
                           sys.executable, "-m", "zabby.server.main", str(server.config_path)]  # fmt: skip
                with open(server.log_path, "ab") as log:
                    self.procs[sid] = subprocess.Popen(command, cwd=server.workdir, env=environment, stdout=log, stderr=subprocess.STDOUT,
                                                       stdin=subprocess.DEVNULL)  # fmt: skip
        except BaseException:
            self.close()  # the ones already started
            raise

    def _dump_stem(self, sid: int) -> Path:
        return self.workdir / f"callgrind-{sid}.out"

    def wait_serving(self) -> dict[int, str]:
        """Each server's mode once all serve."""
        return {sid: wait_serving(server.port, functools.partial(self._running, sid), START_S) for sid, server in self.servers.items()}

    def _running(self, sid: int) -> bool:
        return self.procs[sid].poll() is None

    def _control(self, *arguments: str) -> None:
        """One ``callgrind_control`` command to every server; it exits 0 whatever happened, so
        its answer is read (``OK.`` once the command is sent)."""
        for proc in self.procs.values():
            done = subprocess.run(["callgrind_control", *arguments, str(proc.pid)], capture_output=True, text=True, timeout=120)
            if done.returncode or "OK." not in done.stdout or "Error" in done.stdout:
                raise RuntimeError(f"callgrind_control {' '.join(arguments)} {proc.pid}: {(done.stdout + done.stderr).strip()}")

    def window(self, run: Callable[[], int]) -> tuple[float, int, dict[int, int]]:
        """``run``'s wall time (with the switching on and off), what it returned (the ops it
        made), and the instructions each server executed meanwhile."""
        for old in self.workdir.glob("callgrind-*.out.*"):
            old.unlink()
        self._control("-z")
        started = time.monotonic()
        self._control("-i", "on")
        made = run()
        self._control("-i", "off")
        wall = time.monotonic() - started
        self._control("-d")
        counted = {sid: dumped_total(self._newest_dump(sid)) for sid in self.servers}
        if not all(counted.values()):  # a live server executes something in any window: it was not switched on
            raise RuntimeError(f"no instructions counted on servers {sorted(sid for sid, n in counted.items() if not n)}")
        return wall, made, counted

    def _newest_dump(self, sid: int) -> Path:
        dumps = list(self.workdir.glob(f"{self._dump_stem(sid).name}.*"))
        if not dumps:
            raise RuntimeError(f"server {sid} wrote no callgrind dump (see {self.servers[sid].log_path})")
        return max(dumps, key=lambda path: int(path.name.rsplit(".", 1)[1]))

    def close(self) -> None:
        """SIGTERM (valgrind removes its vgdb pipes), SIGKILL after 10 s."""
        stop_processes(list(self.procs.values()))


def op_runner(client: KazooClient, op: str, count: int) -> Callable[[int], None]:
    """A function making ``count`` ops of ``op`` on ``client`` (under /i, which the warm-up
    made); given the ops made before, so that each create has a name of its own."""

    def create(done: int) -> None:
        for i in range(done, done + count):
            client.create(f"/i/c{i:07d}", VALUE)

    def set_data(done: int) -> None:
        for _ in range(count):
            client.set("/i/w0", VALUE)

    def get_data(done: int) -> None:
        for _ in range(count):
            client.get("/i/w0")

    def pipelined_create(done: int) -> None:
        waiting = []
        for i in range(done, done + count):
            waiting.append(client.create_async(f"/i/p{i:07d}", VALUE))
            if len(waiting) >= IN_FLIGHT:
                waiting.pop(0).get(60)
        for result in waiting:
            result.get(60)

    return {"create": create, "set": set_data, "get": get_data, "pipelined-create": pipelined_create}[op]


def repeated(run: Callable[[int], None], count: int, seconds: float) -> Callable[[], int]:
    """``run`` again and again, ``count`` ops each time, until ``seconds`` have passed; the ops made."""

    def until() -> int:
        done = 0
        deadline = time.monotonic() + seconds
        while done == 0 or time.monotonic() < deadline:
            run(done)
            done += count
        return done

    return until


def role_names(modes: dict[int, str], target: int) -> dict[int, str]:
    """Each server's role as the table names it: the client's server starred."""
    return {sid: mode + ("*" if sid == target and mode != "standalone" else "") for sid, mode in modes.items()}


def per_op(busy: dict[int, int], busy_s: float, idle: dict[int, int], idle_s: float, count: int) -> dict[int, int]:
    """Instructions per op: the busy window's (``busy_s`` long) less what the server spends
    idle in as long (``idle`` over ``idle_s``), over the ``count`` ops."""
    return {sid: round((busy[sid] - idle.get(sid, 0) * busy_s / idle_s) / count) for sid in busy}


@contextmanager
def running(root: Path, workdir: Path, deployment: str) -> Iterator[tuple[CallgrindServers, KazooClient, dict[int, str]]]:
    """The servers under callgrind, a client on one of them (a follower on 3 servers) with
    /i/w0 made, and each server's role."""
    servers = CallgrindServers(root, workdir, deployment)
    client: KazooClient | None = None
    try:
        modes = servers.wait_serving()
        target = next(sid for sid, mode in modes.items() if mode in ("follower", "standalone"))
        client = KazooClient(hosts=servers.servers[target].hosts, timeout=60)
        client.start(START_S)
        client.create("/i/w0", VALUE, makepath=True)
        for i in range(50):  # warm-up: the interpreter's caches and the tree's first children
            client.create(f"/i/w{i + 1}", VALUE)
        yield servers, client, role_names(modes, target)
    finally:
        try:
            if client is not None:
                client.stop()
                client.close()
        finally:
            servers.close()


def idle(seconds: float) -> int:
    time.sleep(seconds)
    return 0


def measure_side(root: Path, workdir: Path, deployment: str, ops: list[str], count: int, seconds: float) -> list[dict[str, Any]]:
    """Instructions per op of each server role, one record per op: ``count`` ops at a time
    until ``seconds`` have passed (the idle work comes in lumps: a server's ticks, its pings)."""
    records = []
    with running(root, workdir, deployment) as (servers, client, roles):
        for op in ops:
            wall, made, busy = servers.window(repeated(op_runner(client, op, count), count, seconds))
            idle_wall, _, still = servers.window(functools.partial(idle, max(wall, IDLE_MIN_S)))
            counts = per_op(busy, wall, still, idle_wall, made)
            records.append({"deployment": deployment, "op": op, "ops": made, "wall_s": round(wall, 2), "idle_per_s": {roles[sid]: round(value / idle_wall) for sid, value in still.items()},
                            "instructions_per_op": {roles[sid]: value for sid, value in counts.items()}})  # fmt: skip
    return records


def table(records: list[dict[str, Any]], old_label: str) -> tuple[str, list[str]]:
    """The Markdown table (each role's median over the rounds, old and new), and what is flagged."""
    lines = [f"| deployment | op | role | old ({old_label}) instructions/op by round | new by round | new/old (medians) |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    flagged = []
    keys = list(dict.fromkeys((r["deployment"], r["op"]) for r in records))
    for deployment, op in keys:
        mine = [r for r in records if (r["deployment"], r["op"]) == (deployment, op)]
        roles = sorted({role for r in mine for role in r["instructions_per_op"]}, key=lambda role: (role.rstrip("*") == role, role))
        for role in roles:
            by_side = {side: [r["instructions_per_op"][role] for r in mine if r["side"] == side and role in r["instructions_per_op"]] for side in ("old", "new")}
            if not by_side["old"] or not by_side["new"]:
                continue
            old, new = statistics.median(by_side["old"]), statistics.median(by_side["new"])
            shown = ", ".join(f"{value:,}" for value in by_side["old"]), ", ".join(f"{value:,}" for value in by_side["new"])
            if max(old, new) < LEAST_FLAGGED:
                lines.append(f"| {deployment} | {op} | {role} | {shown[0]} | {shown[1]} | (no part in it) |")
                continue
            if old < LEAST_FLAGGED:  # no ratio from about nothing (the idle work taken off may leave it at or below 0)
                verdict, grew = "(new work)", True
            else:
                verdict, grew = f"**{new / old:.3f}**", new / old > FLAG_ABOVE
            if grew:
                flagged.append(f"{deployment} {op} {role}")
            lines.append(f"| {deployment} | {op} | {role} | {shown[0]} | {shown[1]} | {verdict}{' FLAGGED' if grew else ''} |")
    return "\n".join(lines), flagged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("old", help="the commit to compare the working tree with")
    parser.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of {', '.join(OPS)} (default: all)")
    parser.add_argument("--deployments", default=",".join(DEPLOYMENTS), help="standalone, 3-server or both (default)")
    parser.add_argument("--count", type=int, default=200, help="ops at a time (default 200)")
    parser.add_argument("--seconds", type=float, default=30.0, help="a window's least length, its ops repeated until then (default 30)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per side, alternating (default 2)")
    parser.add_argument("--json", type=Path, help="also write every record here (JSON lines)")
    args = parser.parse_args(argv)
    ops = [op for op in args.ops.split(",") if op]
    deployments = [d for d in args.deployments.split(",") if d]
    if unknown := sorted(set(ops) - set(OPS)) + sorted(set(deployments) - set(DEPLOYMENTS)):
        parser.error(f"unknown: {', '.join(unknown)} (ops: {', '.join(OPS)}; deployments: {', '.join(DEPLOYMENTS)})")
    if args.count < 1 or args.rounds < 1 or args.seconds < 0:
        parser.error("--count and --rounds must be positive, --seconds not negative")
    if (why := callgrind_missing()) is not None:
        raise SystemExit(why)
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="zabby-instructions-") as folder:
        workdir = Path(folder)
        with old_checkout(args.old, workdir / "old") as (old_root, old_hash):
            roots = {"old": old_root, "new": CHECKOUT}
            for number in range(args.rounds):
                for side in ("old", "new") if number % 2 == 0 else ("new", "old"):
                    for deployment in deployments:
                        print(f"{deployment}: {side}, round {number + 1}/{args.rounds}", flush=True)
                        found = measure_side(roots[side], workdir / f"{side}-{deployment}-{number}", deployment, ops, args.count, args.seconds)
                        for record in found:
                            record.update(side=side, round=number)
                            print(f"  {json.dumps(record)}", flush=True)
                        records.extend(found)
    if args.json:
        args.json.write_text("".join(json.dumps(record) + "\n" for record in records))
    text, flagged = table(records, old_hash)
    print(f"\n{args.old} ({old_hash}) against the working tree, {args.rounds} rounds, alternating; user-space instructions per op (callgrind):\n")
    print(text)
    return flagged_exit(flagged, f"median more than {FLAG_ABOVE - 1:.0%} above the old commit")


if __name__ == "__main__":
    sys.exit(main())
