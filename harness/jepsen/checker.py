"""Checks of a history: linearizable registers, sequential creates, ephemerals.

Theory of operation: linearizability
------------------------------------
A register per key holds ``(value, version)``, as a znode does.  Its operations:

* ``read`` -> ``(value, version)`` (a ``sync`` then a ``get``);
* ``write(value)`` -> the new version (``set`` with version -1; ok returns the new stat);
* ``cas(version, value)`` -> ``set`` with that version: ok iff the version matched, and a
  ``fail`` (BadVersion) iff it did not.

The search is Wing & Gong's, with Lowe's cache (as in Porcupine's ``checkSingle``): the
call and return entries of every operation sit in one list sorted by time; the search
linearizes the first call it can (the model accepts it and ``(linearized set, state)`` was
not seen before), takes it and its return out of the list, and backtracks when it meets a
return whose call was not linearized.  An ``unknown`` operation's return is at infinity: it
may take effect at any time after its invoke, or never (placed last, it changes nothing
anyone saw).  Reads that did not complete tell nothing and are left out; so are writes that
certainly failed for a reason other than the version.  Keys are independent (linearizability
is compositional), so each key is searched alone.  The search is bounded (``states_max``);
past the bound the answer is "unknown", never a guess.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from harness.jepsen.history import FAIL, OK, UNKNOWN, Operation

STATES_MAX = 2_000_000
UNOBSERVED = "?unobserved"  # the value of an unknown write nobody read
REPORT_OPS_MAX = 20  # operations quoted in a failure report

State = tuple[Any, int]  # (value, version)


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterOp:
    op_id: int
    f: str  # read | write | cas
    status: str  # ok | fail | unknown
    args: Any  # write: value; cas: [version, value]
    result: Any  # read: [value, version]; write/cas ok: new version
    invoke_s: float
    return_s: float  # inf when unknown


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyResult:
    key: str
    linearizable: bool | None  # None: the search hit its bound
    ops: int
    explored: int
    stuck_at: tuple[RegisterOp, ...] = ()  # the earliest ops the deepest attempt could not place


def step(state: State, op: RegisterOp) -> State | None:
    """The register model: the state after ``op``, or None if ``op`` cannot happen in ``state``."""
    value, version = state
    if op.f == "read":
        return state if (value, version) == tuple(op.result) else None
    if op.f == "write":
        if op.status == OK and op.result is not None and op.result != version + 1:
            return None
        return (op.args, version + 1)
    expected, new_value = op.args  # cas
    if op.status == FAIL:
        return state if version != expected else None
    if version == expected:
        return (new_value, version + 1)
    return None if op.status == OK else state  # an unknown cas that found another version did nothing


def register_ops(operations: list[Operation]) -> dict[str, list[RegisterOp]]:
    """The register operations that constrain the search, per key."""
    per_key: dict[str, list[RegisterOp]] = defaultdict(list)
    for op in operations:
        if op.f not in ("read", "write", "cas"):
            continue
        if op.f == "read" and op.status != OK:
            continue  # no effect, no information
        if op.status == FAIL and not (op.f == "cas" and op.error == "BadVersionError"):
            continue  # certainly no effect, and no information about the version
        return_s = op.complete_s if op.status in (OK, FAIL) else math.inf
        per_key[op.key].append(RegisterOp(op_id=op.op_id, f=op.f, status=op.status, args=op.args, result=op.result, invoke_s=op.invoke_s, return_s=return_s))
    return per_key


def check_register(key: str, ops: list[RegisterOp], initial: State, states_max: int = STATES_MAX) -> KeyResult:
    search = _Search(ops, initial, _interchangeable(ops))
    verdict = search.run(states_max)
    stuck = () if verdict else tuple(sorted(search.deepest_unplaced(), key=lambda o: o.invoke_s)[:REPORT_OPS_MAX])
    return KeyResult(key=key, linearizable=verdict, ops=len(ops), explored=search.explored, stuck_at=stuck)


def _interchangeable(ops: list[RegisterOp]) -> list[tuple[tuple[Any, ...], int] | None]:
    """Per op: (group, rank) for an unknown write or cas whose value no read ever returned.

    Such ops of one group (blind writes; or cas with the same expected version) are
    interchangeable: their only visible effect is the version they add, so a linearization
    that uses some of them can use the earliest invoked ones instead (each of those began no
    later).  The search takes them in invoke order only, which keeps a burst of unknown
    writes from multiplying the states by every subset of the burst.
    """
    observed = {tuple(op.result)[0] for op in ops if op.f == "read"}
    keyed = []
    for index, op in enumerate(ops):
        if op.status != UNKNOWN or op.f not in ("write", "cas"):
            continue
        value, group = (op.args, ("write",)) if op.f == "write" else (op.args[1], ("cas", op.args[0]))
        if value not in observed:
            keyed.append((group, op.invoke_s, index))
    groups: list[tuple[tuple[Any, ...], int] | None] = [None] * len(ops)
    ranks: Counter[tuple[Any, ...]] = Counter()
    for group, _, index in sorted(keyed, key=lambda item: (item[1], item[2])):
        groups[index] = (group, ranks[group])
        ranks[group] += 1
    return groups


class _Search:
    """Wing-Gong-Lowe over a doubly linked list of entries (index = position in time order)."""

    def __init__(self, ops: list[RegisterOp], initial: State, groups: list[tuple[tuple[Any, ...], int] | None]) -> None:
        # an interchangeable op's value is never read: one placeholder for all keeps the states equal
        self.ops = [op if groups[i] is None else _without_value(op) for i, op in enumerate(ops)]
        self.groups = groups
        self.taken: Counter[tuple[Any, ...]] = Counter()  # interchangeable ops linearized, per group
        self.initial = initial
        entries = sorted([(op.invoke_s, 0, i) for i, op in enumerate(ops)] + [(op.return_s, 1, i) for i, op in enumerate(ops)])
        self.is_return = [kind == 1 for _, kind, _ in entries]
        self.op_of = [index for _, _, index in entries]
        position = {(kind, index): pos for pos, (_, kind, index) in enumerate(entries)}
        self.match = [position[(1, index)] if kind == 0 else -1 for _, kind, index in entries]
        count = len(entries)
        self.head = count
        self.next = [*range(1, count), -1, 0 if count else -1]
        self.prev = [count, *range(0, count - 1), -1]
        self.explored = 0
        self.deepest: tuple[int, int] = (-1, 0)  # (linearized count, linearized mask) furthest reached

    def _lift(self, call: int) -> None:
        for entry in (call, self.match[call]):
            self.next[self.prev[entry]] = self.next[entry]
            if self.next[entry] != -1:
                self.prev[self.next[entry]] = self.prev[entry]

    def _unlift(self, call: int) -> None:
        for entry in (self.match[call], call):
            self.next[self.prev[entry]] = entry
            if self.next[entry] != -1:
                self.prev[self.next[entry]] = entry

    def run(self, states_max: int) -> bool | None:
        state, linearized, depth = self.initial, 0, 0
        seen: set[tuple[int, State]] = set()
        stack: list[tuple[int, State]] = []
        entry = self.next[self.head]
        while self.next[self.head] != -1:
            self.explored += 1
            if self.explored > states_max:
                return None
            if not self.is_return[entry]:
                op_index = self.op_of[entry]
                after = step(state, self.ops[op_index]) if self._in_turn(op_index) else None
                if after is not None and (linearized | 1 << op_index, after) not in seen:
                    self._take(op_index, +1)
                    linearized |= 1 << op_index
                    seen.add((linearized, after))
                    stack.append((entry, state))
                    state, depth = after, depth + 1
                    self.deepest = max(self.deepest, (depth, linearized), key=lambda d: d[0])
                    self._lift(entry)
                    entry = self.next[self.head]
                else:
                    entry = self.next[entry]
                continue
            if not stack:
                return False
            entry, state = stack.pop()
            self._take(self.op_of[entry], -1)
            linearized &= ~(1 << self.op_of[entry])
            depth -= 1
            self._unlift(entry)
            entry = self.next[entry]
        return True

    def _in_turn(self, op_index: int) -> bool:
        found = self.groups[op_index]
        return found is None or self.taken[found[0]] == found[1]

    def _take(self, op_index: int, delta: int) -> None:
        found = self.groups[op_index]
        if found is not None:
            self.taken[found[0]] += delta

    def deepest_unplaced(self) -> list[RegisterOp]:
        _, mask = self.deepest
        return [op for index, op in enumerate(self.ops) if not mask >> index & 1 and op.status != UNKNOWN]


def _without_value(op: RegisterOp) -> RegisterOp:
    return replace(op, args=UNOBSERVED if op.f == "write" else [op.args[0], UNOBSERVED])


# -- sequential creates ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateReport:
    acknowledged: int
    lost: tuple[str, ...] = ()  # tags of acknowledged creates missing from the tree
    duplicated: tuple[str, ...] = ()  # tags present more than once, or one name acked twice
    unexpected: tuple[str, ...] = ()  # nodes whose create certainly failed, or that nobody made
    out_of_order: tuple[str, ...] = ()  # pairs that break ack order or real-time order
    unknown_applied: int = 0  # creates with an unknown outcome that did take effect

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected or self.out_of_order)


def sequence_number(name: str) -> int:
    return int(name[-10:])


def check_creates(operations: list[Operation], final: dict[str, bytes]) -> CreateReport:
    """``final``: every child of the parent at the end, name -> data (each create writes its tag)."""
    creates = [op for op in operations if op.f == "create"]
    acked = [op for op in creates if op.status == OK]
    by_tag = Counter(data.decode(errors="replace") for data in final.values())
    name_of_tag = {data.decode(errors="replace"): name for name, data in final.items()}
    lost = [op.args for op in acked if final.get(op.result, b"").decode(errors="replace") != op.args]
    duplicated = [tag for tag, count in by_tag.items() if count > 1]
    duplicated += [name for name, count in Counter(op.result for op in acked).items() if count > 1]
    certain_fail = {op.args for op in creates if op.status == FAIL}
    known = {op.args for op in creates}
    unexpected = [tag for tag in by_tag if tag in certain_fail or tag not in known]
    unknown_applied = sum(1 for op in creates if op.status == UNKNOWN and op.args in name_of_tag)
    return CreateReport(
        acknowledged=len(acked), lost=tuple(lost), duplicated=tuple(duplicated), unexpected=tuple(unexpected),
        out_of_order=tuple(_ack_order_breaks(acked) + _real_time_breaks(acked)), unknown_applied=unknown_applied,
    )  # fmt: skip


def _ack_order_breaks(acked: list[Operation]) -> list[str]:
    """Per client, sequence numbers must grow in the order the acks arrived."""
    breaks = []
    per_process: dict[str, list[Operation]] = defaultdict(list)
    for op in sorted(acked, key=lambda o: o.complete_s):
        per_process[op.process].append(op)
    for process, ops in per_process.items():
        for earlier, later in zip(ops, ops[1:]):
            if sequence_number(later.result) <= sequence_number(earlier.result):
                breaks.append(f"{process}: {earlier.result} acked before {later.result}")
    return breaks


def _real_time_breaks(acked: list[Operation]) -> list[str]:
    """A create acknowledged before another was invoked got the smaller sequence number."""
    breaks = []
    by_return = sorted(acked, key=lambda o: o.complete_s)
    highest: Operation | None = None
    cursor = 0
    for op in sorted(acked, key=lambda o: o.invoke_s):
        while cursor < len(by_return) and by_return[cursor].complete_s < op.invoke_s:
            done = by_return[cursor]
            if highest is None or sequence_number(done.result) > sequence_number(highest.result):
                highest = done
            cursor += 1
        if highest is not None and sequence_number(op.result) <= sequence_number(highest.result):
            breaks.append(f"{highest.result} (acked {highest.complete_s:.3f}s) >= {op.result} (invoked {op.invoke_s:.3f}s)")
    return breaks


# -- ephemerals -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class EphemeralSession:
    name: str  # the ephemeral node's name under the test's parent
    fate: str  # "live" (session verified alive at the end), "closed" or "dead"
    owner: int = 0  # the session id, when known


@dataclass(frozen=True, slots=True, kw_only=True)
class EphemeralReport:
    live: int
    gone: int
    live_missing: tuple[str, ...] = ()
    dead_present: tuple[str, ...] = ()
    wrong_owner: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not (self.live_missing or self.dead_present or self.wrong_owner)


def check_ephemerals(sessions: list[EphemeralSession], final: dict[str, int]) -> EphemeralReport:
    """``final``: the ephemeral children at the end, name -> ephemeralOwner."""
    live = [s for s in sessions if s.fate == "live"]
    gone = [s for s in sessions if s.fate in ("closed", "dead")]
    return EphemeralReport(
        live=len(live), gone=len(gone),
        live_missing=tuple(s.name for s in live if s.name not in final),
        dead_present=tuple(s.name for s in gone if s.name in final),
        wrong_owner=tuple(s.name for s in live if s.name in final and s.owner and final[s.name] != s.owner),
    )  # fmt: skip
