"""The alert rules against recorded series (deploy/prometheus/zabby-alerts.test.yml), with
Prometheus's own `promtool test rules` (Debian's `prometheus` package, installed by
scripts/install_prometheus.sh where it is missing): a killed server alerts while the others
keep a quorum, a server whose target vanished alerts, and a lost quorum alerts."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests import ROOT

RULES_DIR = ROOT / "deploy" / "prometheus"
APT_UNAVAILABLE = 3


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    done = subprocess.run(["bash", str(ROOT / "scripts" / "install_prometheus.sh")], capture_output=True, text=True, timeout=900, check=False)
    if done.returncode == APT_UNAVAILABLE:
        pytest.skip(f"promtool cannot be installed here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_the_rules_are_valid_and_fire_on_the_recorded_series(promtool: str) -> None:
    check = subprocess.run([promtool, "check", "rules", "zabby-alerts.yml"], cwd=RULES_DIR, capture_output=True, text=True, timeout=60, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run([promtool, "test", "rules", "zabby-alerts.test.yml"], cwd=RULES_DIR, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0 and "SUCCESS" in run.stdout, run.stdout + run.stderr
