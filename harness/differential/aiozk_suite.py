"""aiozk's own test suite (the 85 tests its PyPI sdist ships under ``aiozk/test``) against a
running system: ``run_suite(hosts)``.

The sdist is downloaded once into the clients' cache (``harness.differential.clients.CACHE``)
and run from there with a virtualenv of its test dependencies (aiozk itself has none).  Its
conftest takes the server from ``ZK_HOST`` and ``ZK_PORT`` and joins them as
``f"{ZK_HOST}:{ZK_PORT}"``, so an ensemble's whole host list goes in as
``ZK_HOST="h:p1,h:p2,h"``, ``ZK_PORT=p3``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.differential.clients import CACHE, SuiteCounts, junit_counts, python_env

VERSION = "0.32.0"
TEST_REQUIREMENTS = ("pytest>=8", "pytest-asyncio>=1.1,<2", "pytest-timeout>=2.2")
TEST_TIMEOUT_S = 120  # per test; its slowest (test_multi_watcher) takes 15 s
SUITE_TIMEOUT_S = 1200


def source_tree() -> Path:
    """The unpacked sdist of aiozk ``VERSION`` (downloaded once with pip)."""
    folder = CACHE / "aiozk"
    tree = folder / f"aiozk-{VERSION}"
    if (tree / "aiozk" / "test" / "conftest.py").exists():
        return tree
    python = python_env("aiozk", TEST_REQUIREMENTS)
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([str(python), "-m", "pip", "download", f"aiozk=={VERSION}", "--no-binary", ":all:", "--no-deps", "-q", "-d", str(folder)],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"pip download aiozk=={VERSION} failed: {done.stderr.strip()[-800:]}")
    with tarfile.open(folder / f"aiozk-{VERSION}.tar.gz") as archive:
        archive.extractall(folder, filter="data")
    return tree


def host_environment(hosts: str) -> dict[str, str]:
    """``ZK_HOST`` and ``ZK_PORT`` for aiozk's conftest, which joins them with a colon."""
    head, _, port = hosts.rpartition(":")
    if not head or not port.isdigit():
        raise ValueError(f"hosts must end in :port, not {hosts!r}")
    return {"ZK_HOST": head, "ZK_PORT": port}


def run_suite(hosts: str, tests: Sequence[str] = (), *, log: Path | None = None) -> SuiteCounts:
    """aiozk's tests (``tests``: pytest node ids under ``aiozk/test``, default all) against the
    system at ``hosts``; the counts from their JUnit report, pytest's output appended to ``log``."""
    tree = source_tree()
    python = python_env("aiozk", TEST_REQUIREMENTS)
    with tempfile.TemporaryDirectory(prefix="aiozk-suite-") as work:
        report = Path(work) / "aiozk.xml"
        command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-o", "asyncio_mode=auto",
                   "-o", "asyncio_default_fixture_loop_scope=function", "--timeout", str(TEST_TIMEOUT_S), "--junitxml", str(report),
                   *(tests or ["aiozk/test"])]  # fmt: skip
        env = {**os.environ, **host_environment(hosts), "PYTHONPATH": str(tree)}
        with open(log or os.devnull, "a") as out:
            subprocess.run(command, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=SUITE_TIMEOUT_S, check=False)
        if not report.exists():
            raise RuntimeError(f"aiozk's suite wrote no report (see {log})")
        return junit_counts(report)


NULL_BURST_SCRIPT = Path(__file__).with_name("aiozk_null_burst.py")


def null_bursts(hosts: str, clients: int = 3, bursts: int = 10, size: int = 100, root: str = "/null-bursts") -> dict[str, Any]:
    """``aiozk_null_burst.py``: ``clients`` aiozk sessions (one per server, round robin), each
    ``bursts`` bursts of ``size`` pipelined null-data creates, then as many null setData; its
    counts (sent, answered, failed, errors)."""
    tree = source_tree()
    python = python_env("aiozk", TEST_REQUIREMENTS)
    done = subprocess.run([str(python), str(NULL_BURST_SCRIPT), hosts, root, str(clients), str(bursts), str(size)], env={**os.environ, "PYTHONPATH": str(tree)},
                          capture_output=True, text=True, timeout=SUITE_TIMEOUT_S, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"aiozk_null_burst.py exited with {done.returncode}: {done.stderr.strip()[-1500:]}")
    counts: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return counts
