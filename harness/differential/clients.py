"""What the other ZooKeeper clients' runs share (aiozk, go-zookeeper, node-zookeeper-client, the
C client; ``scripts/client_suites.py``): where their packages go, how they are installed, and
how a suite's outcome is counted.  The clients themselves: ``aiozk_suite`` (aiozk's own tests
and the null-data bursts), ``gozk`` (go-zookeeper's own tests), ``node_client`` and
``c_client`` (scenarios compared line by line with ZooKeeper's), ``xids`` (what each really
sends on the wire).

System packages come from Debian through ``scripts/install_clients.sh`` (golang-go, the
go-zookeeper sources, zookeeper-bin, libzookeeper-mt-dev); PyPI and npm packages are installed
at run time into ``CACHE`` (in the checkout, ignored by git), once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import CHECKOUT

CACHE = Path(os.environ.get("ZABBY_CLIENTS_CACHE", CHECKOUT / ".cache" / "clients"))
INSTALL_SCRIPT = CHECKOUT / "scripts" / "install_clients.sh"
APT_UNAVAILABLE = 3  # the install scripts' exit code when apt-get (or root) is not there
INSTALL_TIMEOUT_S = 900


class ClientUnavailable(RuntimeError):
    """A client or its toolchain cannot be installed on this machine (no apt-get, no npm)."""


def ensure_debian_clients() -> None:
    """Install Debian's Go toolchain, go-zookeeper, zookeeper-bin and libzookeeper-mt-dev when
    any is missing (``scripts/install_clients.sh``).

    Raises:
        ClientUnavailable: apt-get (or root) is not there.
        RuntimeError: the install failed.
    """
    done = subprocess.run(["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
    if done.returncode == APT_UNAVAILABLE:
        raise ClientUnavailable(done.stderr.strip())
    if done.returncode != 0:
        raise RuntimeError(f"scripts/install_clients.sh failed: {done.stderr.strip()[-800:]}")


def python_env(name: str, requirements: Sequence[str]) -> Path:
    """The python of a virtualenv ``CACHE/name/venv`` holding ``requirements`` (made once)."""
    venv = CACHE / name / "venv"
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    wanted = "\n".join(requirements)
    if marker.exists() and marker.read_text() == wanted:
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, capture_output=True, timeout=INSTALL_TIMEOUT_S)
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(requirements)} failed: {done.stderr.strip()[-800:]}")
    marker.write_text(wanted)
    return python


def npm_packages(name: str, packages: Sequence[str]) -> Path:
    """``CACHE/name`` with ``packages`` npm-installed under its node_modules (once).

    Raises:
        ClientUnavailable: there is no npm (or node) here.
    """
    if not shutil.which("npm") or not shutil.which("node"):
        raise ClientUnavailable("no node/npm on PATH (apt-get install nodejs npm)")
    folder = CACHE / name
    marker = folder / ".installed"
    wanted = "\n".join(packages)
    if marker.exists() and marker.read_text() == wanted:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "package.json").write_text('{"private": true}\n')
    done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent", *packages], cwd=folder, capture_output=True, text=True,
                          timeout=INSTALL_TIMEOUT_S, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"npm install {' '.join(packages)} failed: {done.stderr.strip()[-800:]}")
    marker.write_text(wanted)
    return folder


@dataclass(slots=True)
class SuiteCounts:
    """A test suite's outcome: how many tests passed, failed (a failure or an error, in the test
    or its teardown) and were skipped, and the names of those that failed."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.skipped

    def cell(self) -> str:
        skipped = f", {self.skipped} skipped" if self.skipped else ""
        return f"{self.passed}/{self.total}{skipped}"


def junit_counts(report: Path) -> SuiteCounts:
    """The counts of a JUnit XML report (pytest's ``--junitxml``): one outcome per test case,
    a test whose teardown failed counted once, as failed."""
    outcomes: dict[str, str] = {}  # pytest reports a teardown error as a second case of the same name
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes[name] = "failed"
        elif outcomes.get(name) != "failed":
            outcomes[name] = "skipped" if case.find("skipped") is not None else "passed"
    counts = SuiteCounts()
    for name, outcome in outcomes.items():
        if outcome == "failed":
            counts.failed += 1
            counts.failures.append(name)
        elif outcome == "skipped":
            counts.skipped += 1
        else:
            counts.passed += 1
    return counts
