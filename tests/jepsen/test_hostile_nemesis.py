"""The ``clients`` nemesis family: hostile clients beside the schedule's faults, never in it; the
plan of attacks from the seed; the thread that runs them (an attack that raises is recorded and
the next one follows); the well-behaved client's figures in the report; and one short real run
of attacks only against 3 servers."""

from __future__ import annotations

import threading
from itertools import islice
from pathlib import Path
from typing import Any

import pytest

from harness.jepsen import hostile_load
from harness.jepsen.attacks import ATTACKS
from harness.jepsen.history import FAIL, OK, History
from harness.jepsen.hostile import Outcome
from harness.jepsen.hostile_load import Attack, HostileLoad, hostile_plan
from harness.jepsen.nemesis import GROUPS, HOSTILE_KINDS, KINDS, hostile_kinds, kinds_for, schedule
from harness.jepsen.report import markdown_table, run_line
from harness.jepsen.runner import RunSpec, run_once
from harness.jepsen.workloads import WorkloadSpec


def test_groups_and_kinds_combine_each_kind_once() -> None:
    assert HOSTILE_KINDS == tuple(ATTACKS) and not set(HOSTILE_KINDS) & set(KINDS)
    assert GROUPS["clients"] == HOSTILE_KINDS + ("client-reset",)
    assert kinds_for("mixed,clients") == KINDS + HOSTILE_KINDS  # client-reset once, where mixed has it
    assert kinds_for(" clients , mixed ") == HOSTILE_KINDS + ("client-reset",) + tuple(k for k in KINDS if k != "client-reset")
    assert kinds_for("kill,never-read,kill-leader") == GROUPS["kill"] + ("never-read",)
    assert kinds_for("mixed") == KINDS and kinds_for("none") == () and kinds_for("") == ()
    assert hostile_kinds(kinds_for("mixed,clients")) == HOSTILE_KINDS and hostile_kinds(kinds_for("mixed")) == ()
    with pytest.raises(ValueError, match=r"unknown nemesis \['cleints', 'slow-loris'\]"):
        kinds_for("mixed,cleints,slow-loris")


def test_hostile_kinds_never_enter_the_schedule() -> None:
    for seed in range(20):
        faults = schedule(seed, 120.0, kinds_for("mixed,clients"), 4.0, 2.0)
        assert faults and not {f.kind for f in faults} & set(HOSTILE_KINDS)
        assert faults == schedule(seed, 120.0, GROUPS["mixed"], 4.0, 2.0)  # the same schedule as mixed alone
    assert {f.kind for f in schedule(3, 60.0, kinds_for("clients"), 4.0, 2.0)} == {"client-reset"}
    assert schedule(3, 60.0, ("never-read", "slowloris"), 4.0, 2.0) == []


def test_the_plan_of_attacks_comes_from_the_seed() -> None:
    kinds = kinds_for("mixed,clients")
    first = list(islice(hostile_plan(11, kinds, (1, 2, 3)), 200))
    assert first == list(islice(hostile_plan(11, kinds, (1, 2, 3)), 200))
    assert first != list(islice(hostile_plan(12, kinds, (1, 2, 3)), 200))
    assert {a.kind for a in first} == set(HOSTILE_KINDS) and {a.target for a in first} == {1, 2, 3}
    assert all(hostile_load.CALM_S[0] <= a.calm_s <= hostile_load.CALM_S[1] for a in first)
    for attack in first:  # bounded: about 1-5 s each
        if attack.kind == "reset-storm":
            assert 1000 <= attack.args["count"] <= 4000
        elif attack.kind == "never-read":
            assert 4 <= attack.args["clients"] <= 8 and attack.args["requests"] == 100 and 2.0 <= attack.args["hold_s"] <= 4.0
        elif attack.kind == "watch-hoard":
            assert attack.args["watches"] == 100_000
    assert list(hostile_plan(11, kinds_for("mixed"), (1, 2, 3))) == []


class _StubCluster:
    def direct_hosts(self, sid: int) -> str:
        return f"127.0.0.1:{40000 + sid}"


def test_an_attack_that_raises_is_recorded_and_the_next_one_follows(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, tuple[str, int], dict[str, Any]]] = []

    def refused(address: tuple[str, int], **kwargs: Any) -> Outcome:
        calls.append(("reset-storm", address, kwargs))
        raise ConnectionRefusedError("nobody there")

    def pipelined(address: tuple[str, int], **kwargs: Any) -> Outcome:
        calls.append(("duplicate-xids", address, kwargs))
        return Outcome("duplicate-xids", connections=1, closed_by_server=1, replies=1, errors={-8: 1}, elapsed_s=0.1234)

    monkeypatch.setitem(hostile_load.ATTACKS, "reset-storm", refused)
    monkeypatch.setitem(hostile_load.ATTACKS, "duplicate-xids", pipelined)
    plan = [Attack(kind="reset-storm", target=2, args={"count": 5}, calm_s=0.0), Attack(kind="duplicate-xids", target=3, args={"count": 7, "wait_s": 1.0}, calm_s=0.0)]
    history, stop = History(), threading.Event()
    load = HostileLoad(_StubCluster(), history, plan, stop)  # type: ignore[arg-type]
    load.start()
    load.join(10.0)
    assert not load.is_alive() and load.error == ""
    assert [(kind, address) for kind, address, _ in calls] == [("reset-storm", ("127.0.0.1", 40002)), ("duplicate-xids", ("127.0.0.1", 40003))]
    assert calls[0][2] == {"count": 5, "stop": stop} and calls[1][2] == {"count": 7, "wait_s": 1.0}  # the xid pipelines take no stop
    ops = [op for op in history.operations() if op.process == "nemesis"]
    assert [(op.f, op.status) for op in ops] == [("reset-storm", FAIL), ("duplicate-xids", OK)]
    assert ops[0].args == {"target": 2, "count": 5} and "ConnectionRefusedError" in ops[0].error
    assert ops[1].result == {"target": 3, "connections": 1, "refused": 0, "closed_by_server": 1, "replies": 1, "errors": {"-8": 1}, "elapsed_s": 0.123}
    assert load.report() == {"duplicate-xids": {"made": 1, "raised": 0, "connections": 1, "refused": 0, "closed_by_server": 1, "replies": 1},
                             "reset-storm": {"made": 0, "raised": 1, "connections": 0, "refused": 0, "closed_by_server": 0, "replies": 0}}  # fmt: skip


def test_the_load_stops_at_once_in_a_calm() -> None:
    plan = hostile_plan(5, HOSTILE_KINDS, (1,))
    stop = threading.Event()
    load = HostileLoad(_StubCluster(), History(), (Attack(kind=a.kind, target=a.target, args=a.args, calm_s=60.0) for a in plan), stop)  # type: ignore[arg-type]
    load.start()
    stop.set()
    load.join(5.0)
    assert not load.is_alive() and not load.made and not load.raised


def test_the_report_shows_the_well_behaved_clients_figures_only_where_measured() -> None:
    base = {"system": "zabby", "servers": 3, "clients": ["zabby"], "ok": True, "ops": {"total": 10, "ok": 10, "fail": 0, "unknown": 0},
            "faults": {"client-reset": 1}, "linearizable": True, "converge_s": 0.5, "converged": True, "longest_write_gap_s": 1.0, "commit": "abc"}  # fmt: skip
    plain = {**base, "seed": 1, "nemesis": "mixed"}
    figures = {"server": 1, "reads": 5000, "failures": 2, "p50_ms": 0.9, "p99_ms": 12.5, "max_ms": 5003.2, "fresh_connects": 40, "fresh_failures": 0, "fresh_max_ms": 40.0}
    hostile = [{**base, "seed": s, "nemesis": "mixed,clients", "bystander": {**figures, "p99_ms": p99}} for s, p99 in ((2, 12.5), (3, 30.0), (4, 20.0))]
    assert "well-behaved" not in run_line(plain) and "well-behaved" not in markdown_table([plain])
    assert "p99 12.5 ms, max 5003 ms, 5000 reads answered, 2 attempts failed" in run_line(hostile[0])
    table = markdown_table([plain, *hostile]).splitlines()
    assert all(line.count("|") == table[0].count("|") for line in table)
    assert "20.0 / 30.0 ms, max 5003 ms, 15000 reads answered, 6 attempts failed (while its server was cut off or down; p99 per run: 12.5, 30.0, 20.0)" in table[3]
    assert table[2].split(" | ")[-2] == "-"  # the plain row
    broken = {**base, "seed": 5, "nemesis": "clients", "bystander": {"server": 1, "error": "TimeoutError: no report"}}
    assert "no figures (TimeoutError: no report)" in run_line(broken) and "not reported (1 runs)" in markdown_table([broken])


SHORT = WorkloadSpec(keys=5, session_timeout_s=8.0, op_timeout_s=4.0, churn_session_timeout_s=3.0)


@pytest.mark.timeout(150)
def test_short_run_of_hostile_clients_on_three_servers(tmp_path: Path) -> None:
    """Attacks only (and the proxies' client resets): every check holds, every attack made, the
    well-behaved client's figures reported."""
    pytest.importorskip("kazoo")
    spec = RunSpec(seed=201, out_dir=tmp_path, system="zabby", servers=3, duration_s=20.0, nemesis="clients", clients=("zabby", "kazoo"),
                   workers=4, tick_ms=500, fault_s=4.0, quiet_s=3.0, workload=SHORT, watch=False)  # fmt: skip
    record = run_once(spec)
    assert record["ok"], "\n".join([*record["failures"], f"evidence: {record['dir']}", f"reproduce: {record['reproduce']}"])
    assert record["ops"]["ok"] > 0 and record["linearizable"] is True and not record["deaths"]
    assert record["restart_s"] is not None  # every server killed at once and started again: the same tree
    made = {kind: n for kind, n in record["faults"].items() if kind in HOSTILE_KINDS}
    assert sum(made.values()) >= 3, record["attacks"]
    assert sum(a["raised"] for a in record["attacks"].values()) == 0, record["attacks"]  # nothing killed or stopped a server
    figures = record["bystander"]
    assert figures["server"] == 1 and figures["reads"] > 100 and 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["max_ms"], figures
