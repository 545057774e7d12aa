"""node-zookeeper-client (npm) through ``node_scenario.js``: one scenario of about 70 steps,
run against ZooKeeper 3.8 and against zabby, its outputs compared line by line
(``first_difference``).  The script prints only what both systems must agree on (session ids
by name, zxids by their relation, no times), so nothing is masked here.

The client is npm-installed at run time into the clients' cache (``harness.differential.clients``).
"""

from __future__ import annotations

import difflib
import os
import subprocess
from pathlib import Path

from harness.differential.clients import npm_packages

PACKAGE = "node-zookeeper-client@1.1.3"
SCENARIO = Path(__file__).with_name("node_scenario.js")
SCENARIO_TIMEOUT_S = 300


def run_scenario(hosts: str, root: str = "/node-scenario") -> list[str]:
    """The scenario's output lines against the system at ``hosts``, under the znode ``root``.

    Raises:
        RuntimeError: the scenario did not finish (its output's tail in the message).
    """
    folder = npm_packages("node", [PACKAGE])
    done = subprocess.run(["node", str(SCENARIO), hosts, root], cwd=folder, env={**os.environ, "NODE_PATH": str(folder / "node_modules")},
                          capture_output=True, text=True, timeout=SCENARIO_TIMEOUT_S, check=False)  # fmt: skip
    lines = done.stdout.splitlines()
    if done.returncode != 0:
        raise RuntimeError(f"node scenario exited with {done.returncode}:\n" + "\n".join(lines[-10:]) + done.stderr[-2000:])
    return lines


def first_difference(expected: list[str], actual: list[str]) -> str | None:
    """None when the two outputs are the same; otherwise a unified diff around the first line
    where they part."""
    if expected == actual:
        return None
    return "\n".join(difflib.unified_diff(expected, actual, "zookeeper", "zabby", lineterm="", n=3))
