"""The differential harness's own logic, without servers: normalization, comparison and the
workload's steering."""

from __future__ import annotations

from harness.differential.compare import TIME_OK, Normalizer, first_difference, kind_of
from harness.differential.known import BOB_ONLY, OPEN
from harness.differential.model import Op, Outcome, Stat
from harness.differential.workload import PERSISTENT_WATCHER, Workload


def stat(czxid: int, mzxid: int, pzxid: int, ctime: int = 1000, mtime: int = 1000, owner: int = 0) -> Stat:
    return Stat(czxid, mzxid, ctime, mtime, 0, 0, 0, owner, 0, 0, pzxid)


def normalized(outcomes: list[Outcome], owners: dict[int, str] | None = None) -> list[dict[str, object]]:
    norm = Normalizer()
    return [norm.outcome(outcome, owners or {}) for outcome in outcomes]


def test_zxids_compare_by_order_not_value() -> None:
    zookeeper = [Outcome(("stat", stat(5, 5, 5))), Outcome(("stat", stat(5, 9, 7)))]
    zabby = [Outcome(("stat", stat(0x100000005, 0x100000005, 0x100000005))),
             Outcome(("stat", stat(0x100000005, 0x100000020, 0x100000011)))]  # fmt: skip
    assert normalized(zookeeper) == normalized(zabby)
    swapped = [zabby[0], Outcome(("stat", stat(0x100000005, 0x100000011, 0x100000020)))]  # pzxid > mzxid now
    assert normalized(zookeeper) != normalized(swapped)


def test_a_zxid_seen_before_is_not_a_new_one() -> None:
    """Same ranks, but one system shows a new zxid where the other repeats an old one."""
    zookeeper = [Outcome(("stat", stat(1, 1, 3))), Outcome(("stat", stat(2, 2, 2)))]
    zabby = [Outcome(("stat", stat(1, 1, 3))), Outcome(("stat", stat(3, 3, 3)))]
    found = first_difference(normalized(zookeeper)[1], normalized(zabby)[1])
    assert found is not None and found[0] in ("result[1].czxid", "distinct zxids")


def test_times_must_fit_their_zxids() -> None:
    first = Outcome(("stat", stat(1, 2, 1, ctime=100, mtime=200)))
    consistent = normalized([first, Outcome(("stat", stat(1, 2, 1, ctime=100, mtime=200)))])
    assert consistent[1]["result"][1].ctime == TIME_OK  # type: ignore[index]
    changed = normalized([first, Outcome(("stat", stat(1, 2, 1, ctime=100, mtime=250)))])
    assert changed[1]["result"][1].mtime == 250  # type: ignore[index]  # one zxid, two times
    backwards = normalized([first, Outcome(("stat", stat(3, 3, 3, ctime=150, mtime=150)))])
    assert backwards[1]["result"][1].ctime == 150  # type: ignore[index]  # a later zxid, an earlier time


def test_owners_become_session_labels() -> None:
    result = normalized([Outcome(("stat", stat(1, 1, 1, owner=0x5A)))], {0x5A: "b2"})[0]["result"]
    assert result[1].ephemeralOwner == "b2"  # type: ignore[index]


def test_a_session_close_compares_its_events_between_replies_as_a_set() -> None:
    ordered = Outcome(("reopened",), {"c": [("event", 2, 3, "/x"), ("event", 2, 3, "/y"), ("reply", 0)]})
    swapped = Outcome(("reopened",), {"c": [("event", 2, 3, "/y"), ("event", 2, 3, "/x"), ("reply", 0)]})
    assert Normalizer().outcome(ordered, {}, events_unordered=True) == Normalizer().outcome(swapped, {}, events_unordered=True)
    assert Normalizer().outcome(ordered, {}) != Normalizer().outcome(swapped, {})
    after_reply = Outcome(("reopened",), {"c": [("event", 2, 3, "/y"), ("reply", 0), ("event", 2, 3, "/x")]})
    assert Normalizer().outcome(ordered, {}, events_unordered=True) != Normalizer().outcome(after_reply, {}, events_unordered=True)


def test_first_difference_names_the_place() -> None:
    mine = {"result": ("stat", stat(1, 1, 1)), "logs": {"a": ()}}
    theirs = {"result": ("stat", stat(1, 1, 1)._replace(cversion=3)), "logs": {"a": ()}}
    assert first_difference(mine, theirs) == ("result[1].cversion", 0, 3)
    assert kind_of("delete", "logs.b[3][1]") == "delete: logs.b[][]"
    assert first_difference(mine, mine) is None


def test_the_same_seed_and_answers_give_the_same_ops() -> None:
    def ops(seed: int) -> list[Op]:
        workload, out = Workload(seed, "/r"), []
        for _ in range(200):
            op = workload.next_op()
            out.append(op)
            workload.observe(op, ("error", "NoNodeError"))
        return out

    assert ops(7) == ops(7)
    assert ops(7) != ops(8)


def test_only_one_session_sets_persistent_watches_and_removes_them_by_any() -> None:
    workload = Workload(3, "/r")
    for _ in range(2000):
        op = workload.next_op()
        if op.kind == "add_watch":
            assert op.client == PERSISTENT_WATCHER
        if op.client == PERSISTENT_WATCHER and op.kind in ("get", "exists", "children"):
            assert op.args[1] is False  # no one-shot watch beside the persistent ones
        if op.client == PERSISTENT_WATCHER and op.kind in ("remove_watches", "check_watches"):
            assert op.args[1] == 3
        workload.observe(op, ("ok",))


def test_exists_and_add_watch_avoid_nodes_the_session_may_not_read() -> None:
    workload = Workload(5, "/r")
    workload.observe(Op("b", "create", ("/r/secret", b"", BOB_ONLY, 0, 0, False)), ("created", "/r/secret", None))
    workload.observe(Op("b", "create", ("/r/open", b"", OPEN, 0, 0, False)), ("created", "/r/open", None))
    seen = {"a": set(), "b": set(), "c": set()}  # type: dict[str, set[str]]
    for _ in range(3000):
        op = workload.next_op()
        if op.kind in ("exists", "add_watch"):
            seen[op.client].add(op.args[0])
    assert "/r/secret" in seen["b"] and "/r/open" in seen["a"]
    assert "/r/secret" not in seen["a"] | seen["c"]
