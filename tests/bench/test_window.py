"""``harness.bench.window``: what each server's hook wrote, per write and role, and its table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bench.window import SITE, spent_per_write, table


def _spent(folder: Path, pid: int, user_s: float, faults: int, young: int, io_calls: int = 0, sleeps: int = 0) -> None:
    (folder / f"{pid}.json").write_text(json.dumps({"user_s": user_s, "system_s": 0.01, "minor_faults": faults,
                                                    "collections": {"0": [young, 0.001]} if young else {},
                                                    "io_calls": io_calls, "sleeps": sleeps}))  # fmt: skip


def test_a_role_of_two_servers_is_their_mean_and_a_server_without_a_file_is_left_out(tmp_path: Path) -> None:
    _spent(tmp_path, 11, 0.2, 100, 2, io_calls=50_000, sleeps=40_000)
    _spent(tmp_path, 12, 0.4, 300, 0, io_calls=60_000, sleeps=50_000)
    _spent(tmp_path, 13, 0.3, 50, 1)
    spent = spent_per_write(tmp_path, {11: "follower", 12: "follower", 13: "leader", 14: "follower"}, 10_000)
    assert spent["follower"]["user_us"] == 30.0 and spent["follower"]["faults_per_1k"] == 20.0
    assert spent["follower"]["young_per_1k"] == 0.1 and spent["leader"]["user_us"] == 30.0
    assert spent["follower"]["io_calls_per_1k"] == 5_500.0 and spent["follower"]["sleeps_per_1k"] == 4_500.0
    assert spent["leader"]["io_calls_per_1k"] == 0.0 and "calls" not in spent["leader"]


def test_the_table_shows_the_medians_of_each_side_and_the_change() -> None:
    records = [{"workload": "setData", "side": side, "rate": rate, "spent": {"leader": {"user_us": user, "system_us": 1.0, "faults_per_1k": 0.0, "young_per_1k": 0.0}}}
               for side, rate, user in (("old", 100.0, 20.0), ("old", 120.0, 22.0), ("old", 110.0, 30.0),
                                        ("new", 90.0, 24.0), ("new", 95.0, 26.0), ("new", 99.0, 25.0))]  # fmt: skip
    lines = table(records, ["old", "new"]).splitlines()
    assert lines[2].startswith("| setData | leader | 22.0 → 25.0 (+14%) |") and lines[2].endswith("| 110 → 95 |")
    assert "Python calls" not in lines[0]


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="the kernel keeps no /proc/self/io")
def test_the_servers_hook_writes_what_the_process_spent_between_the_two_signals(tmp_path: Path) -> None:
    """The hook itself, in a process of its own: between SIGUSR2 and SIGUSR1 the process below
    makes 200 writes and 20 sleeps, and nothing the hook counts before or after."""
    script = """
import os, signal, time
os.kill(os.getpid(), signal.SIGUSR2)
for _ in range(200):
    os.write(1, b"")
for _ in range(20):
    time.sleep(0.001)
os.kill(os.getpid(), signal.SIGUSR1)
"""
    env = {**os.environ, "PYTHONPATH": str(SITE), "ZABBY_WINDOW_OUT": str(tmp_path), "ZABBY_WINDOW_PROFILE": "0"}
    child = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=60, check=True)
    assert child.stdout == b""
    (written,) = tmp_path.glob("*.json")
    spent = json.loads(written.read_text())
    assert 200 <= spent["io_calls"] < 260  # the writes, and /proc/self/io's own read
    assert 15 <= spent["sleeps"] < 60  # a 1 ms sleep whose timer fires before the task sleeps makes no switch
    assert spent["user_s"] >= 0 and spent["minor_faults"] >= 0
