"""Differences from ZooKeeper 3.8.0 that the differential run knows of, and steers around.

Each one is written down in docs/zookeeper-compat.md ("Differences from ZooKeeper 3.8.0")
with its reason.  The workload never provokes them (see ``Workload``), so that a long run
keeps comparing everything else; ``EXAMPLES`` provokes each one on purpose, and
tests/differential/test_differential.py checks that both systems still answer as written
here: a difference that goes away must leave this list (and the docs), and the workload may
then send what it avoided.

``pending`` marks a difference zabby should lose, whose fix lives in code outside
``zabby/tree`` and ``zabby/wire/jute.py`` (the jute translation of the session layer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.differential.model import Op
from harness.differential.workload import digest_id

OPEN = ((31, "world", "anyone"),)
BOB_ONLY = ((31, "digest", digest_id("bob")),)


@dataclass(frozen=True)
class KnownDifference:
    name: str
    why: str
    pending: bool
    example: tuple[Op, ...]  # paths "R", "R/..." are under a fresh root; the systems differ first at the last op
    where: str  # ... as first_difference reports it: where, then ZooKeeper's and zabby's values
    reference: Any
    zabby: Any


def under(root: str, value: Any) -> Any:
    """``value`` with every path "R..." moved under ``root``."""
    if isinstance(value, Op):
        return Op(value.client, value.kind, under(root, value.args))
    if isinstance(value, tuple):
        return tuple(under(root, item) for item in value)
    if isinstance(value, str) and (value == "R" or value.startswith("R/")):
        return root + value[1:]
    return value


def example_ops(known: KnownDifference, root: str) -> list[Op]:
    return [under(root, op) for op in known.example]


KNOWN: tuple[KnownDifference, ...] = (
    KnownDifference(
        "watcher types 4 and 5", "ZooKeeper 3.8.0 knows only the watcher types 1-3 (4 and 5 came with ZOOKEEPER-4472)",
        pending=False,
        example=(Op("c", "add_watch", ("R", 0)), Op("c", "remove_watches", ("R", 4))),
        where="result", reference=("error", "MarshallingError"), zabby=("ok",),
    ),
    KnownDifference(
        "one watch mode per path", "ZooKeeper 3.8.0 keeps one watch mode per path and session (ZOOKEEPER-4466)",
        pending=False,
        example=(Op("c", "add_watch", ("R", 0)), Op("c", "get", ("R", True)), Op("a", "set", ("R", b"1", -1)),
                 Op("a", "set", ("R", b"2", -1))),  # fmt: skip
        where="logs.c", reference=(("reply", 0),), zabby=(("event", 3, 3, "R"), ("reply", 0)),
    ),
    KnownDifference(
        "persistent watch removed by Data or Children",
        "ZooKeeper 3.8.0 removes half of a persistent watch by type Data or Children (ZOOKEEPER-4471)",
        pending=False,
        example=(Op("c", "add_watch", ("R", 0)), Op("c", "remove_watches", ("R", 2))),
        where="result", reference=("ok",), zabby=("error", "NoWatcherError"),
    ),
    KnownDifference(
        "checkWatches sees other sessions' watches",
        "ZooKeeper 3.8.0 answers checkWatches with OK when any session watches the path",
        pending=False,
        example=(Op("a", "exists", ("R", True)), Op("b", "check_watches", ("R", 2))),
        where="result", reference=("ok",), zabby=("error", "NoWatcherError"),
    ),
    KnownDifference(
        "READ checked by exists", "zabby checks READ on exists, as ZooKeeper does since 3.8.4 (ZOOKEEPER-2590)",
        pending=False,
        example=(Op("b", "create", ("R/n", b"", BOB_ONLY, 0, 0, False)), Op("a", "exists", ("R/n", False))),
        where="result[0]", reference="stat",
        zabby="error",
    ),
    KnownDifference(
        "READ checked by addWatch", "zabby checks READ on addWatch, as wherever a read would; ZooKeeper 3.8.0 checks nothing",
        pending=False,
        example=(Op("b", "create", ("R/n", b"", BOB_ONLY, 0, 0, False)), Op("c", "add_watch", ("R/n", 0))),
        where="result", reference=("ok",), zabby=("error", "NoAuthError"),
    ),
)  # fmt: skip
