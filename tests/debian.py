"""Debian packages the tests need (zkCli.sh, Chromium), installed by the project's own
scripts/install_*.sh when they are missing."""

from __future__ import annotations

import subprocess

import pytest

from tests import ROOT

APT_UNAVAILABLE = 3  # the install scripts' exit code when apt-get (or root) is not there


def installed(script: str) -> str:
    """Run ``scripts/<script>`` and return the path it prints; skip the test when apt-get is
    not available, fail it when the install fails."""
    path = ROOT / "scripts" / script
    try:
        done = subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=900, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"scripts/{script} did not finish in 15 minutes")
    if done.returncode == APT_UNAVAILABLE:
        pytest.skip(f"scripts/{script} cannot install: {done.stderr.strip()}")
    assert done.returncode == 0, f"scripts/{script} failed:\n{done.stderr}"
    return done.stdout.strip().splitlines()[-1]
