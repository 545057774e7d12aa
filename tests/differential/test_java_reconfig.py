"""reconfig and getConfig through ZooKeeper's own Java client on three servers: a ZooKeeper 3.8
ensemble and a zabby ensemble answer the same script alike (harness/differential/reconfig.py:
results, errors, the configuration's text by role, Stats and watch events)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.differential.java_client import build_driver
from harness.differential.reconfig import first_divergence, run_leg
from harness.local.javac import JavaUnavailable
from harness.local.zookeeper import ZooKeeperUnavailable, ensure_zookeeper


@pytest.mark.timeout(600)
def test_reconfig_through_the_java_client_answers_as_zookeeper(tmp_path: Path) -> None:
    try:
        ensure_zookeeper()
        build_driver()
    except (ZooKeeperUnavailable, JavaUnavailable) as exc:
        pytest.skip(f"ZooKeeper's Java client or server cannot run here: {exc}")
    reference = run_leg("zookeeper", tmp_path / "zookeeper")
    zabby = run_leg("zabby", tmp_path / "zabby")
    assert [outcome.result[0] for outcome in reference.outcomes].count("error") >= 5  # the refusals ran
    assert first_divergence(reference, zabby) is None
