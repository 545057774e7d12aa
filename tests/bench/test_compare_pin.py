"""``harness.bench.compare --pin``: the affinity its children inherit, set and given back; which
rows it places where; and the clear refusal, before anything starts, where the CPUs it names are
not this process's to use.  Nothing is measured: the servers and the load are stand-ins."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.bench import compare
from harness.bench.runner import Limits

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")


def test_children_started_inside_run_on_the_cpus_and_the_affinity_is_given_back() -> None:
    before = os.sched_getaffinity(0)
    cpu = min(before)
    with compare.on_cpus({cpu}):
        assert os.sched_getaffinity(0) == {cpu}
        child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                               capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    assert child.stdout.strip() == f"[{cpu}]"
    assert os.sched_getaffinity(0) == before


def test_no_cpus_named_changes_nothing() -> None:
    before = os.sched_getaffinity(0)
    with compare.on_cpus(None):
        assert os.sched_getaffinity(0) == before
    assert os.sched_getaffinity(0) == before


def test_affinity_is_given_back_when_the_body_raises() -> None:
    before = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError), compare.on_cpus({min(before)}):
        raise RuntimeError("the measurement failed")
    assert os.sched_getaffinity(0) == before


@pytest.mark.parametrize(("usable", "missing"), [({0}, "[1]"), ({1}, "[0]"), ({2, 3}, "[0, 1]")])
def test_pin_names_the_cpus_it_lacks(monkeypatch: pytest.MonkeyPatch, usable: set[int], missing: str) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: usable)
    assert compare.pinning_error() == f"--pin needs CPUs {missing}, which this process may not use"


def test_pin_is_refused_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    for step in ("wait_quiet", "old_worktree", "run_rows"):
        monkeypatch.setattr(compare, step, lambda *args, _step=step, **kwargs: pytest.fail(f"{_step} ran after a refused --pin"))
    with pytest.raises(SystemExit) as refused:
        compare.main(["HEAD", "--pin"])
    assert refused.value.code == 2


def test_pin_is_accepted_where_both_cpus_are_there(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    assert compare.pinning_error() is None


class _Session:
    """Records the affinity each server set starts with, and starts nothing."""

    def __init__(self, *args: Any) -> None:
        self.started: list[tuple[str, set[int]]] = []

    def bring_up(self, name: str, deployment: str, tag: str, root: Path) -> str:
        self.started.append((deployment, os.sched_getaffinity(0)))
        return deployment

    def bring_down(self, system: str) -> None:
        pass

    def stop_all(self) -> None:
        pass


@pytest.mark.skipif(compare.pinning_error() is not None, reason="needs CPUs 0 and 1")
def test_only_one_at_a_time_rows_are_placed_and_only_a_standalone_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    before = os.sched_getaffinity(0)
    sessions: list[_Session] = []
    loads: list[tuple[str, str, set[int]]] = []

    def session(*args: Any) -> _Session:
        sessions.append(_Session())
        return sessions[-1]

    def measure(ctx: Any, out: Any, system: str, driver: str, workload: str, series: str, shape: Any, extra: dict[str, Any]) -> dict[str, Any]:
        loads.append((system, workload, os.sched_getaffinity(0)))
        return {"rate": 1.0, **extra}

    monkeypatch.setattr(compare, "build_java", lambda folder: folder)
    monkeypatch.setattr(compare, "Session", session)
    monkeypatch.setattr(compare, "measure", measure)
    rows = [compare.PIPELINED[0], compare.Row("standalone", "latency-read", None), compare.Row("3-server", "latency-set", None)]
    found = compare.run_rows(rows, tmp_path, 1, Limits(), tmp_path, None, pin=True)  # type: ignore[arg-type]

    assert [(d, cpus == before) for d, cpus in sessions[0].started] == [("3-server", True), ("3-server", True), ("standalone", False),
                                                                          ("standalone", False), ("3-server", True), ("3-server", True)]  # fmt: skip
    assert {frozenset(cpus) for d, cpus in sessions[0].started if d == "standalone"} == {frozenset(compare.PINNED_SERVER_CPUS)}
    assert [(w, cpus == compare.PINNED_CLIENT_CPUS) for _, w, cpus in loads] == [("create-100B", False), ("create-100B", False),
                                                                                  ("latency-read", True), ("latency-read", True),
                                                                                  ("latency-set", True), ("latency-set", True)]  # fmt: skip
    assert [cpus == before for _, w, cpus in loads if w == "create-100B"] == [True, True]
    assert [record["pinned"] for records in found.values() for record in records] == [False, False, True, True, True, True]
    assert os.sched_getaffinity(0) == before
