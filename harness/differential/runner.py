"""Run seeded workloads against ZooKeeper and zabby side by side; stop a seed at its first
divergence and report it with the seed, the op and what each system answered."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.differential.compare import Normalizer, first_difference, kind_of
from harness.differential.execute import Executor
from harness.differential.java_client import JavaExecutor, JavaWorkload
from harness.differential.model import Op, Outcome
from harness.differential.workload import Workload

RECENT_OPS = 8  # ops shown before a divergence


@dataclass
class Divergence:
    seed: int
    index: int
    op: Op
    where: str
    reference: Any
    zabby: Any
    raw: tuple[Outcome, Outcome]
    recent: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return kind_of(self.op.kind, self.where)

    def __str__(self) -> str:
        lines = [
            f"seed {self.seed}: first divergence at op {self.index}: {self.op}",
            f"  at {self.where}: ZooKeeper {self.reference!r}, zabby {self.zabby!r}",
            f"  ZooKeeper raw: {self.raw[0]}",
            f"  zabby raw:     {self.raw[1]}",
            "  ops before it:",
            *(f"    {line}" for line in self.recent),
        ]
        return "\n".join(lines)


@dataclass
class SeedResult:
    seed: int
    ops_run: int
    divergence: Divergence | None = None


class Pair:
    """The two systems' client addresses: the reference (ZooKeeper) and zabby."""

    def __init__(self, reference_hosts: str, zabby_hosts: str) -> None:
        self.reference_hosts = reference_hosts
        self.zabby_hosts = zabby_hosts


class OpSource(Protocol):
    def next_op(self) -> Op: ...

    def observe(self, op: Op, result: tuple[Any, ...]) -> None: ...


class Script:
    """A fixed list of ops (the examples of known differences)."""

    def __init__(self, ops: list[Op]) -> None:
        self._ops = iter(ops)

    def next_op(self) -> Op:
        return next(self._ops)

    def observe(self, op: Op, result: tuple[Any, ...]) -> None:
        pass


# which client the sessions under test use: its workload and its executor
CLIENTS: dict[str, tuple[type[Workload], type[Executor]]] = {"kazoo": (Workload, Executor), "java": (JavaWorkload, JavaExecutor)}
CLIENT_KINDS = tuple(CLIENTS)


def run_seed(pair: Pair, seed: int, ops: int, client: str = "kazoo", *, membership_ops: bool = True) -> SeedResult:
    """``membership_ops=False``: the Java client's workload without getConfig and reconfig (their
    answers are the ensemble's membership: a standalone reference has none, an ensemble's
    member its own)."""
    root = f"/diff-{seed}" if client == "kazoo" else f"/diff-{client}-{seed}"
    workload = (CLIENTS[client][0] if membership_ops else Workload)(seed, root)
    return run_ops(pair, seed, root, workload, ops, client)


def run_ops(pair: Pair, seed: int, root: str, source: OpSource, ops: int, client: str = "kazoo") -> SeedResult:
    """Send ``ops`` ops from ``source`` to both systems under ``root`` through ``client``'s
    sessions; stop at the first divergence."""
    executor = CLIENTS[client][1]
    reference, zabby = executor(pair.reference_hosts, root), executor(pair.zabby_hosts, root)
    reference_norm, zabby_norm = Normalizer(), Normalizer()
    recent: list[str] = []
    reference.open()
    try:
        zabby.open()
        try:
            for index in range(ops):
                op = source.next_op()
                outcomes = reference.run(op), zabby.run(op)
                unordered = op.kind == "reopen"  # a session close: see compare
                mine = reference_norm.outcome(outcomes[0], reference.owners, events_unordered=unordered)
                theirs = zabby_norm.outcome(outcomes[1], zabby.owners, events_unordered=unordered)
                found = first_difference(mine, theirs)
                if found is not None:
                    return SeedResult(seed, index + 1, Divergence(seed, index, op, *found, outcomes, recent[-RECENT_OPS:]))
                source.observe(op, outcomes[0].result)
                recent.append(f"{index}: {op} -> {outcomes[0].result}")
            return SeedResult(seed, ops)
        finally:
            zabby.close()
    finally:
        reference.close()


def seed_range(text: str) -> range:
    """``A..B`` (both included) or a single seed, as the scripts take ``--seeds``."""
    first, _, last = text.partition("..")
    return range(int(first), int(last or first) + 1)


def run_seeds(pair: Pair, seeds: Iterable[int], ops: int, client: str = "kazoo", *, membership_ops: bool = True) -> Iterator[SeedResult]:
    for seed in seeds:
        yield run_seed(pair, seed, ops, client, membership_ops=membership_ops)


def summary(results: list[SeedResult]) -> str:
    passed = sum(1 for result in results if result.divergence is None)
    kinds = Counter(result.divergence.kind for result in results if result.divergence is not None)
    lines = [f"{passed} of {len(results)} seeds identical ({sum(r.ops_run for r in results)} ops run)"]
    lines += [f"  {count:4d}  {kind}" for kind, count in kinds.most_common()]
    return "\n".join(lines)
