"""Whole runs of the Jepsen-style harness against real zabby servers.

The default run: two 30-second runs of mixed faults on 3 servers (tickTime 500 ms, so
elections and session expiries fit the time), half the workers on zabby's client and half on
kazoo.  The slow version: longer runs, 3 and 5 servers, tickTime 2000 ms.  A failing run's
message carries its failures, the folder with the evidence and the command that replays it.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from harness.jepsen.nemesis import GROUPS
from harness.jepsen.runner import RUN_GC_THRESHOLDS, RunSpec, _collections_kept_short, run_once
from harness.jepsen.workloads import WorkloadSpec

pytest.importorskip("kazoo")

SHORT = WorkloadSpec(keys=5, session_timeout_s=8.0, op_timeout_s=4.0, churn_session_timeout_s=3.0)


def _assert_passed(record: dict) -> None:  # type: ignore[type-arg]
    assert record["ops"]["ok"] > 0, record
    assert sum(record["faults"].values()) > 0, record
    assert record["ok"], "\n".join([*record["failures"], f"evidence: {record['dir']}", f"reproduce: {record['reproduce']}"])


@pytest.mark.timeout(150)
@pytest.mark.parametrize("seed", [101, 102])
def test_short_mixed_faults_run_on_three_servers(tmp_path: Path, seed: int) -> None:
    spec = RunSpec(seed=seed, out_dir=tmp_path, system="zabby", servers=3, duration_s=30.0, nemesis="mixed", clients=("zabby", "kazoo"),
                   workers=4, tick_ms=500, fault_s=4.0, quiet_s=3.0, workload=SHORT)  # fmt: skip
    record = run_once(spec)
    assert record["linearizable"] is not False
    _assert_passed(record)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize(("servers", "nemesis"), [(3, "mixed"), (5, "mixed"), (3, "partition"), (3, "kill")])
def test_long_run(tmp_path: Path, servers: int, nemesis: str) -> None:
    assert nemesis in GROUPS
    spec = RunSpec(seed=7000 + servers, out_dir=tmp_path, system="zabby", servers=servers, duration_s=120.0, nemesis=nemesis,
                   clients=("zabby", "kazoo"), workers=6, tick_ms=2000, fault_s=10.0, quiet_s=5.0)  # fmt: skip
    _assert_passed(run_once(spec))


def test_what_the_caller_holds_is_frozen_for_a_run_and_the_pauses_noted() -> None:
    """The harness's threads relay the servers' links: a full collection over a large caller
    must not stall them (see ``_collections_kept_short``)."""
    held = [[i] for i in range(1000)]
    result: dict = {}  # type: ignore[type-arg]
    thresholds = gc.get_threshold()
    with _collections_kept_short(result):
        assert gc.get_freeze_count() >= len(held)
        assert gc.get_threshold() == RUN_GC_THRESHOLDS
        gc.collect()
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == thresholds
    assert result["harness_gc"]["collections"] >= 1 and result["harness_gc"]["pause_max_s"] >= 0
