"""The checkers find what they must and accept what they must: known non-linearizable register
histories (stale reads, lost writes, impossible CAS outcomes) are rejected, linearizable ones
(with overlapping and unknown operations) accepted; lost, duplicated and reordered sequential
creates and misplaced ephemerals are reported."""

from __future__ import annotations

import math
import random
from dataclasses import replace

from harness.jepsen.checker import (
    EphemeralSession,
    RegisterOp,
    check_creates,
    check_ephemerals,
    check_register,
    register_ops,
    step,
)
from harness.jepsen.history import FAIL, OK, UNKNOWN, History, Operation, longest_write_gap_s, pair_events

INIT = ("init", 0)
_ids = iter(range(1_000_000))


def op(f: str, invoke_s: float, return_s: float | None, *, args=None, result=None, status: str = OK) -> RegisterOp:  # type: ignore[no-untyped-def]
    return RegisterOp(op_id=next(_ids), f=f, status=status, args=args, result=result, invoke_s=invoke_s, return_s=math.inf if return_s is None else return_s)


def read(t0: float, t1: float, value: str, version: int) -> RegisterOp:
    return op("read", t0, t1, result=[value, version])


def write(t0: float, t1: float | None, value: str, new_version: int | None = None, status: str = OK) -> RegisterOp:
    return op("write", t0, t1, args=value, result=new_version, status=status)


def cas(t0: float, t1: float | None, version: int, value: str, status: str = OK) -> RegisterOp:
    return op("cas", t0, t1, args=[version, value], result=version + 1 if status == OK else None, status=status)


def linearizable(ops: list[RegisterOp]) -> bool | None:
    return check_register("k", ops, INIT).linearizable


def test_sequential_history_is_linearizable() -> None:
    ops = [write(0, 1, "a", 1), read(2, 3, "a", 1), cas(4, 5, 1, "b"), read(6, 7, "b", 2), cas(8, 9, 1, "c", FAIL)]
    assert linearizable(ops) is True


def test_stale_read_after_an_acknowledged_write_is_not_linearizable() -> None:
    assert linearizable([write(0, 1, "a", 1), read(2, 3, "init", 0)]) is False


def test_read_concurrent_with_the_write_may_see_either_value() -> None:
    assert linearizable([write(0, 4, "a", 1), read(1, 2, "init", 0), read(2.5, 3, "a", 1)]) is True


def test_reads_going_back_in_time_are_not_linearizable() -> None:
    ops = [write(0, 10, "a", 1), read(1, 2, "a", 1), read(3, 4, "init", 0)]
    assert linearizable(ops) is False


def test_concurrent_writes_order_is_fixed_by_the_versions_they_got() -> None:
    ops = [write(0, 5, "a", 2), write(0, 5, "b", 1), read(6, 7, "a", 2)]
    assert linearizable(ops) is True
    ops_wrong = [write(0, 5, "a", 1), write(0, 5, "b", 2), read(6, 7, "a", 2)]
    assert linearizable(ops_wrong) is False


def test_lost_acknowledged_write_is_not_linearizable() -> None:
    ops = [write(0, 1, "a", 1), write(2, 3, "b", 2), read(4, 5, "a", 1)]
    assert linearizable(ops) is False


def test_unknown_write_may_take_effect_later_or_never() -> None:
    seen_late = [write(0, None, "x", status=UNKNOWN), read(5, 6, "init", 0), read(7, 8, "x", 1)]
    assert linearizable(seen_late) is True
    never = [write(0, None, "x", status=UNKNOWN), read(5, 6, "init", 0), write(7, 8, "y", 1), read(9, 10, "y", 1)]
    assert linearizable(never) is True


def test_a_value_nobody_wrote_is_not_linearizable() -> None:
    assert linearizable([read(5, 6, "x", 1)]) is False
    assert linearizable([write(0, None, "x", status=UNKNOWN), read(5, 6, "x", 2)]) is False


def test_unknown_write_cannot_take_effect_before_its_invoke() -> None:
    ops = [read(0, 1, "x", 1), write(2, None, "x", status=UNKNOWN)]
    assert linearizable(ops) is False


def test_cas_outcomes_must_match_the_version() -> None:
    assert linearizable([cas(0, 1, 0, "a"), read(2, 3, "a", 1)]) is True
    assert linearizable([write(0, 1, "a", 1), cas(2, 3, 0, "b")]) is False  # ok although the version had moved on
    assert linearizable([cas(0, 1, 0, "a", FAIL)]) is False  # failed although the version matched
    assert linearizable([cas(0, 1, 0, "a", UNKNOWN), read(2, 3, "a", 1)]) is True
    assert linearizable([cas(0, 1, 5, "a", UNKNOWN), read(2, 3, "a", 1)]) is False  # could never have matched


def test_unknown_cas_that_matched_must_have_applied_if_it_did_in_between() -> None:
    # cas(0->a) unknown, then a blind write "b" acked with version 1: the cas did not apply before
    # it; a later cas(1->c) acked with version 2 proves only one write happened before it.
    ops = [cas(0, None, 0, "a", UNKNOWN), write(1, 2, "b", 1), cas(3, 4, 1, "c"), read(5, 6, "c", 2)]
    assert linearizable(ops) is True


def test_the_search_bound_answers_unknown_rather_than_guessing() -> None:
    ops = [write(0, 100, f"w{i}", status=UNKNOWN) for i in range(12)] + [read(200, 201, "init", 0)]
    assert check_register("k", ops, INIT, states_max=5).linearizable is None


def test_failure_report_names_the_operations_that_could_not_be_placed() -> None:
    stale = read(2, 3, "init", 0)
    result = check_register("k", [write(0, 1, "a", 1), stale], INIT)
    assert result.linearizable is False
    assert stale in result.stuck_at


def _random_linearizable_history(rng: random.Random, count: int) -> tuple[list[RegisterOp], list[tuple[str, int]]]:
    """Each op takes effect atomically at its own instant; invoke and return are spread around
    it, so the history is linearizable by construction.  Some writes are left unknown.  Also
    returns every state the register went through (index = version)."""
    state, ops, states = INIT, [], [INIT]
    for index in range(count):
        instant = index * 1.0
        invoke, ret = instant - rng.uniform(0, 3), instant + rng.uniform(0, 3)
        kind = rng.choice(["read", "write", "cas", "cas-stale"])
        if kind == "read":
            ops.append(read(invoke, ret, state[0], state[1]))
        elif kind == "write":
            state = (f"v{index}", state[1] + 1)
            unknown = rng.random() < 0.1
            ops.append(write(invoke, None if unknown else ret, state[0], None if unknown else state[1], UNKNOWN if unknown else OK))
        elif kind == "cas":
            ops.append(cas(invoke, ret, state[1], f"v{index}"))
            state = (f"v{index}", state[1] + 1)
        else:
            ops.append(cas(invoke, ret, state[1] + 7, f"v{index}", FAIL))
        if state != states[-1]:
            states.append(state)
    return ops, states


def test_random_linearizable_histories_pass_and_a_stale_read_in_them_fails() -> None:
    rng = random.Random(20240611)
    mutated_count = 0
    for _ in range(20):
        ops, states = _random_linearizable_history(rng, 150)
        assert linearizable(ops) is True
        mutated = _with_a_stale_read(ops, states)
        if mutated is not None:
            mutated_count += 1
            assert linearizable(mutated) is False
    assert mutated_count >= 15


def _with_a_stale_read(ops: list[RegisterOp], states: list[tuple[str, int]]) -> list[RegisterOp] | None:
    """Replace the result of a late read with the state before a write that ended before it."""
    writes = [o for o in ops if o.f in ("write", "cas") and o.status == OK]
    for index, candidate in reversed(list(enumerate(ops))):
        if candidate.f != "read":
            continue
        done_before = [w for w in writes if w.return_s < candidate.invoke_s]
        if done_before:
            stale = states[done_before[-1].result - 1]
            return [*ops[:index], replace(candidate, result=[stale[0], stale[1]]), *ops[index + 1 :]]
    return None


def test_step_is_the_znode_version_model() -> None:
    assert step(("a", 3), write(0, 1, "b", 4)) == ("b", 4)
    assert step(("a", 3), write(0, 1, "b", 9)) is None
    assert step(("a", 3), cas(0, 1, 3, "b")) == ("b", 4)
    assert step(("a", 3), cas(0, 1, 2, "b", FAIL)) == ("a", 3)


def test_register_ops_drop_what_carries_no_information() -> None:
    history = History()
    for f, args, status, error in [("read", None, FAIL, "ConnectionLoss"), ("write", "a", FAIL, "NoNodeError"), ("cas", [0, "b"], FAIL, "BadVersionError"), ("write", "c", UNKNOWN, "ConnectionLoss")]:
        history.complete(history.invoke("p", f, "k", args), status, None, error)
    kept = register_ops(history.operations())["k"]
    assert [(o.f, o.status) for o in kept] == [("cas", FAIL), ("write", UNKNOWN)]
    assert kept[1].return_s == math.inf


# -- sequential creates ---------------------------------------------------------------------------


def create(process: str, tag: str, t0: float, t1: float, name: str | None, status: str = OK) -> Operation:
    return Operation(op_id=next(_ids), process=process, f="create", key="seq", args=tag, status=status, result=name, invoke_s=t0, complete_s=t1)


def test_creates_all_present_in_order_pass() -> None:
    ops = [create("p1", "t1", 0, 1, "n-0000000001"), create("p2", "t2", 0.5, 2, "n-0000000002"), create("p1", "t3", 3, 4, "n-0000000003")]
    final = {"n-0000000001": b"t1", "n-0000000002": b"t2", "n-0000000003": b"t3"}
    report = check_creates(ops, final)
    assert report.ok and report.acknowledged == 3


def test_lost_acknowledged_create_is_found() -> None:
    ops = [create("p1", "t1", 0, 1, "n-0000000001"), create("p1", "t2", 2, 3, "n-0000000002")]
    report = check_creates(ops, {"n-0000000001": b"t1"})
    assert not report.ok and report.lost == ("t2",)


def test_duplicated_create_is_found() -> None:
    ops = [create("p1", "t1", 0, 1, "n-0000000001")]
    report = check_creates(ops, {"n-0000000001": b"t1", "n-0000000002": b"t1"})
    assert not report.ok and report.duplicated == ("t1",)


def test_unknown_create_that_applied_is_fine_and_one_that_failed_must_not_appear() -> None:
    ops = [create("p1", "t1", 0, 1, None, UNKNOWN), create("p1", "t2", 2, 3, None, FAIL)]
    assert check_creates(ops, {"n-0000000001": b"t1"}).unknown_applied == 1
    assert check_creates(ops, {"n-0000000001": b"t1"}).ok
    report = check_creates(ops, {"n-0000000002": b"t2"})
    assert report.unexpected == ("t2",)


def test_out_of_order_sequence_numbers_are_found() -> None:
    one_client = [create("p1", "t1", 0, 1, "n-0000000005"), create("p1", "t2", 2, 3, "n-0000000004")]
    final = {"n-0000000005": b"t1", "n-0000000004": b"t2"}
    assert check_creates(one_client, final).out_of_order
    two_clients = [create("p1", "t1", 0, 1, "n-0000000005"), create("p2", "t2", 2, 3, "n-0000000004")]
    assert check_creates(two_clients, final).out_of_order  # real time: acked before the other began
    overlapping = [create("p1", "t1", 0, 3, "n-0000000005"), create("p2", "t2", 2, 4, "n-0000000004")]
    assert check_creates(overlapping, final).ok


# -- ephemerals and metrics ---------------------------------------------------------------------------


def test_ephemerals_of_live_sessions_stay_and_of_dead_ones_go() -> None:
    sessions = [EphemeralSession(name="live-1", fate="live", owner=7), EphemeralSession(name="dead-1", fate="dead"), EphemeralSession(name="closed-1", fate="closed")]
    assert check_ephemerals(sessions, {"live-1": 7}).ok
    report = check_ephemerals(sessions, {"dead-1": 9, "closed-1": 9})
    assert not report.ok
    assert report.live_missing == ("live-1",) and set(report.dead_present) == {"dead-1", "closed-1"}
    assert check_ephemerals(sessions, {"live-1": 8}).wrong_owner == ("live-1",)


def test_longest_write_gap_and_pairing() -> None:
    history = History()
    first = history.invoke("p", "write", "k", "a")
    history.complete(first, OK, 1)
    history.invoke("p", "write", "k", "b")  # never completed: unknown
    operations = pair_events(history.events())
    assert [o.status for o in operations] == [OK, UNKNOWN]
    assert operations[1].complete_s == math.inf
    acked = operations[0].complete_s
    assert math.isclose(longest_write_gap_s(operations, 0.0, acked + 10.0), 10.0)


def test_nemesis_schedule_is_seeded_and_ends_with_a_fault_at_the_end() -> None:
    from harness.jepsen.nemesis import GROUPS, kinds_for, schedule, supported

    first = schedule(5, 60.0, GROUPS["mixed"], 8.0, 4.0)
    assert first == schedule(5, 60.0, GROUPS["mixed"], 8.0, 4.0)
    assert first != schedule(6, 60.0, GROUPS["mixed"], 8.0, 4.0)
    assert all(a.start_s + a.duration_s < b.start_s for a, b in zip(first, first[1:]))
    assert math.isclose(first[-1].start_s + first[-1].duration_s, 60.0)
    assert "slow-disk" in kinds_for("mixed") and not supported("slow-disk", "zookeeper") and supported("slow-disk", "zabby")
    assert kinds_for("kill-leader,pause-random") == ("kill-leader", "pause-random")


class _StubProxy:
    def __init__(self) -> None:
        self.mode, self.held = "pass", set()

    def set_mode(self, mode) -> None:  # type: ignore[no-untyped-def]
        self.mode = mode

    def hold(self, direction) -> None:  # type: ignore[no-untyped-def]
        self.held.add(direction)


class _StubCluster:
    def __init__(self, size: int) -> None:
        self.links = {(a, b): (_StubProxy(), _StubProxy()) for a in range(1, size + 1) for b in range(1, size + 1) if a != b}


def test_partitions_touch_exactly_the_links_across_the_cut() -> None:
    from harness.jepsen.nemesis import isolate, one_way
    from harness.local.netproxy import Direction, Mode

    cluster = _StubCluster(5)
    isolate(cluster, {1, 2}, Mode.CUT)  # type: ignore[arg-type]
    for (a, b), pair in cluster.links.items():
        crossing = (a in {1, 2}) != (b in {1, 2})
        assert all((p.mode == Mode.CUT) == crossing for p in pair), (a, b)
    cluster = _StubCluster(3)
    one_way(cluster, {1}, {2, 3})  # type: ignore[arg-type]
    assert all(p.held == {Direction.FORWARD} for pair in (cluster.links[(1, 2)], cluster.links[(1, 3)]) for p in pair)
    assert all(p.held == {Direction.BACKWARD} for pair in (cluster.links[(2, 1)], cluster.links[(3, 1)]) for p in pair)
    assert all(not p.held for pair in (cluster.links[(2, 3)], cluster.links[(3, 2)]) for p in pair)


def test_report_table_has_a_row_per_configuration() -> None:
    from harness.jepsen.report import markdown_table

    base = {"system": "zabby", "servers": 3, "clients": ["zabby", "kazoo"], "nemesis": "mixed", "ok": True, "ops": {"total": 10, "ok": 8, "fail": 1, "unknown": 1},
            "faults": {"kill-leader": 2}, "linearizable": True, "creates": {"lost": 0, "duplicated": 0}, "deaths": [], "longest_write_gap_s": 3.5, "converged": True, "converge_s": 1.5, "commit": "abc"}
    failed = {**base, "ok": False, "linearizable": False, "deaths": [{"sid": 1}], "converged": False, "converge_s": None}
    other = {**base, "system": "zookeeper", "clients": ["kazoo"]}
    lines = markdown_table([base, failed, other]).splitlines()
    assert len(lines) == 4
    zabby_row = next(line for line in lines if line.startswith("| zabby"))
    assert "| 2 | 1 |" in zabby_row and "no: 1 runs" in zabby_row and "20 (16 / 2 / 2)" in zabby_row and "(1 runs did not)" in zabby_row


def test_a_burst_of_unread_unknown_writes_stays_cheap_and_still_counts_versions() -> None:
    burst = [write(1.0 + i / 100, None, f"lost{i}", status=UNKNOWN) for i in range(16)]
    tail = []
    for i in range(200):  # a long linearizable history after the burst, none of it reading the burst
        tail += [write(10 + 2 * i, 10.5 + 2 * i, f"v{i}", i + 1), read(11 + 2 * i, 11.5 + 2 * i, f"v{i}", i + 1)]
    result = check_register("k", burst + tail, INIT, states_max=200_000)
    assert result.linearizable is True
    # two of the burst took effect (the version jumped by 3 for one acked write): still linearizable
    jumped = [*burst, write(10, 11, "x", 3), read(12, 13, "x", 3)]
    assert check_register("k", jumped, INIT, states_max=200_000).linearizable is True
    # but no number of them explains a version going backwards
    backwards = [*burst, write(10, 11, "x", 3), read(12, 13, "x", 3), read(14, 15, "x", 2)]
    assert check_register("k", backwards, INIT, states_max=200_000).linearizable is False
