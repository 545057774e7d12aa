"""deploy/'s Grafana dashboard and Prometheus alert rules name only metrics that a real
3-server ensemble serves on /metrics, and the rules cover what operators must be told."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests import ROOT
from zabby.testing import Ensemble

DASHBOARD = ROOT / "deploy" / "grafana" / "zabby-dashboard.json"
RULES = ROOT / "deploy" / "prometheus" / "zabby-alerts.yml"
METRIC = re.compile(r"\b(?:zk|zabby)_[a-z0-9_]+\b")
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def dashboard_expressions() -> Iterator[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield target["expr"]
    for variable in dashboard["templating"]["list"]:
        yield variable["query"]


def rules() -> list[dict[str, object]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def scrape(admin_port: int) -> dict[str, list[tuple[str, float]]]:
    """Every sample on /metrics: name -> [(labels, value)]."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    samples: dict[str, list[tuple[str, float]]] = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and not line.startswith("#"):
            samples.setdefault(match.group(1), []).append((match.group(2) or "", float(match.group(3))))
    return samples


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, list[tuple[str, float]]]]]:
    """/metrics of the leader and of a follower of a 3-server ensemble."""
    ensemble = Ensemble(Path(tmp_path_factory.mktemp("metrics")), 3, tickTime=200)
    try:
        ensemble.start()
        leader = ensemble.wait_leader()
        follower = next(sid for sid in ensemble.servers if sid != leader)
        yield {"leader": scrape(ensemble.servers[leader].admin_port), "follower": scrape(ensemble.servers[follower].admin_port)}
    finally:
        ensemble.kill_all()


def test_every_metric_the_dashboard_and_the_rules_name_is_served(served) -> None:  # type: ignore[no-untyped-def]
    named = {name for expr in dashboard_expressions() for name in METRIC.findall(expr)}
    named |= {name for rule in rules() for name in METRIC.findall(str(rule["expr"]))}
    assert len(named) > 15
    missing = named - set(served["leader"]) - set(served["follower"])
    assert not missing, f"named in deploy/ but not served on /metrics: {sorted(missing)}"
    assert all(METRIC.search(expr) for expr in dashboard_expressions())


def test_the_rules_cover_what_operators_must_hear_of() -> None:
    names = {str(rule["alert"]) for rule in rules()}
    assert {"ZabbyNoQuorum", "ZabbyServerDown", "ZabbyServerMissing", "ZabbyServerNotServing", "ZabbyLeaderChanged", "ZabbyFsyncSlow", "ZabbyOutstandingRequestsHigh",
            "ZabbyFollowerLagging", "ZabbyDigestMismatch", "ZabbyDiskSpaceLow"} <= names  # fmt: skip
    for rule in rules():
        assert rule["labels"]["severity"] in ("info", "warning", "critical") and rule["annotations"]["summary"]  # type: ignore[index]


def test_the_served_values_make_sense(served) -> None:  # type: ignore[no-untyped-def]
    leader, follower = served["leader"], served["follower"]
    assert leader["zabby_serving"] == [("", 1.0)] and follower["zabby_serving"] == [("", 1.0)]
    assert ('{state="leader"}', 1.0) in leader["zabby_server_state"] and ('{state="follower"}', 1.0) in follower["zabby_server_state"]
    assert sum(value for _, value in leader["zabby_server_state"]) == 1
    assert leader["zabby_current_epoch"][0][1] >= 1 and leader["zabby_current_epoch"] == follower["zabby_current_epoch"]
    assert len(leader["zabby_learner_lag_txns"]) == 2 and "zabby_learner_lag_txns" not in follower
    free = dict(leader["zabby_disk_free_bytes"])
    assert len(free) == 2 and all(0 < value for value in free.values()) and leader["zabby_disk_space_low"] == [("", 0.0)]
