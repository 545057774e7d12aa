"""Apache Curator's recipes (Debian's libcurator-*-java 5.4) on zabby and on ZooKeeper 3.8
(harness/differential/curator.py, harness/differential/CuratorSuite.java): each recipe's own
checks pass, no client goes SUSPENDED or loses leadership without a server killed under it,
and both systems agree on each scenario's facts.  The default run takes a share of the
recipes on standalone servers; the whole matrix (3 servers, a follower or the leader killed
in every scenario, the 60 s LeaderLatch + CuratorCache hold) is marked slow:
``python scripts/curator_suite.py`` runs it with a table."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.differential.curator import (
    LAYOUTS,
    SCENARIOS,
    Kill,
    Outcome,
    fact_differences,
    judge,
    run_layout,
)

SHORT_SCENARIOS = ("leader_latch", "mutex", "semaphore", "curator_cache", "tree_cache", "atomic_long", "transaction")


def _problems(layout: str, outcomes: dict[str, list[Outcome]]) -> list[str]:
    found = [f"{system}/{o.scenario}: {p}" for system, runs in outcomes.items() for o in runs for p in o.problems()]
    return found + fact_differences(outcomes["zabby"], outcomes["zookeeper"])


@pytest.mark.timeout(600)
def test_curator_recipes_standalone(tmp_path: Path, build_dir: Path) -> None:
    outcomes = {system: run_layout(system, "standalone", tmp_path / system, build_dir, SHORT_SCENARIOS, seconds=2)
                for system in ("zookeeper", "zabby")}  # fmt: skip
    assert [o.scenario for o in outcomes["zabby"]] == list(SHORT_SCENARIOS)
    problems = _problems("standalone", outcomes)
    assert not problems, "\n".join(problems)


@pytest.mark.timeout(600)
def test_the_checks_fail_on_a_planted_violation(tmp_path: Path, build_dir: Path) -> None:
    """--plant makes one mutex client skip acquire and expects a node nobody created in the
    CuratorCache: both scenarios must fail."""
    outcomes = run_layout("zabby", "standalone", tmp_path, build_dir, ("mutex", "curator_cache"), seconds=2, plant=True)
    assert [o.passed for o in outcomes] == [False, False], [o.problems() for o in outcomes]


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_curator_recipes_every_layout(tmp_path: Path, build_dir: Path, layout: str) -> None:
    outcomes = {system: run_layout(system, layout, tmp_path / system, build_dir, SCENARIOS, seconds=3, hold_s=60)
                for system in ("zookeeper", "zabby")}  # fmt: skip
    problems = _problems(layout, outcomes)  # a SUSPENDED with no server killed under it is one
    assert not problems, "\n".join(problems)
    assert [o.scenario for o in outcomes["zabby"]] == list(SCENARIOS)


def test_a_suspended_without_a_cause_fails_the_scenario() -> None:
    """The judge of causes: a kill of the client's own server or of the leader excuses its
    SUSPENDED; no kill, or another follower's, does not."""
    raw = {"scenario": "mutex", "passed": True, "states": [{"client": "c1", "state": "SUSPENDED", "t": 2000, "server": "2181"}]}
    assert not judge(dict(raw), []).passed
    assert not judge(dict(raw), [Kill(2, "2182", "follower", 1000)]).passed
    assert judge(dict(raw), [Kill(1, "2181", "follower", 1000)]).passed
    assert judge(dict(raw), [Kill(3, "2183", "leader", 1000)]).passed
    assert not judge(dict(raw), [Kill(1, "2181", "follower", 3000)]).passed  # after it: no cause
