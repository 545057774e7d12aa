"""``harness.bench.compare --pin``: the affinity its children inherit, set and given back, and
the clear refusal where the CPUs it names are not this process's to use.  Nothing is measured."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.bench import compare

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


def test_pin_is_refused_where_its_cpus_are_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert compare.pinning_error() == "--pin needs CPUs [1], which this process may not use"
    with pytest.raises(SystemExit) as refused:
        compare.main(["HEAD", "--pin", "--wait-quiet", "0"])
    assert refused.value.code == 2


def test_pin_is_accepted_where_both_cpus_are_there(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    assert compare.pinning_error() is None
