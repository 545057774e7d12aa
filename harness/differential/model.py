"""Plain values shared by the workload, the executor and the comparer: an operation, a Stat and
what one operation did on one system.  Nothing here needs kazoo."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zabby.client.states import ZnodeStat as Stat  # ZooKeeper's Stat, kazoo's names, jute order

# Stat is re-exported: compare.py, execute.py and the tests take it from here
__all__ = ["ACLEntry", "CLIENTS", "CLIENT_USER", "CREDENTIALS", "Event", "Op", "Outcome", "Stat"]

ACLEntry = tuple[int, str, str]  # (perms, scheme, id)
Event = tuple[Any, ...]  # ("event", type, state, path) or ("reply", err)

CLIENTS = ("a", "b", "c")
CREDENTIALS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}
CLIENT_USER = {"a": None, "b": "bob", "c": "carol"}  # the digest identity a session starts with


@dataclass(frozen=True)
class Op:
    """One client operation: which session sends it, what it is, and its arguments."""

    client: str
    kind: str
    args: tuple[Any, ...] = ()

    def __str__(self) -> str:
        shown = ", ".join(repr(arg) for arg in self.args)
        return f"{self.client}: {self.kind}({shown})"


@dataclass
class Outcome:
    """What one op did on one system.

    ``result`` is a plain tuple (see ``execute``); ``logs`` holds, per session label, what
    that session received while the op ran: watch events and a marker for each reply, in
    arrival order; ``unreaped`` lists containers and TTL nodes that were due for reaping
    but still there when the bounded wait ended.
    """

    result: tuple[Any, ...]
    logs: dict[str, list[Event]] = field(default_factory=dict)
    unreaped: tuple[str, ...] = ()
