"""``harness.bench.window``: what each server's hook wrote, per write and role, and its table."""

from __future__ import annotations

import json
from pathlib import Path

from harness.bench.window import spent_per_write, table


def _spent(folder: Path, pid: int, user_s: float, faults: int, young: int) -> None:
    (folder / f"{pid}.json").write_text(json.dumps({"user_s": user_s, "system_s": 0.01, "minor_faults": faults,
                                                    "collections": {"0": [young, 0.001]} if young else {}}))  # fmt: skip


def test_a_role_of_two_servers_is_their_mean_and_a_server_without_a_file_is_left_out(tmp_path: Path) -> None:
    _spent(tmp_path, 11, 0.2, 100, 2)
    _spent(tmp_path, 12, 0.4, 300, 0)
    _spent(tmp_path, 13, 0.3, 50, 1)
    spent = spent_per_write(tmp_path, {11: "follower", 12: "follower", 13: "leader", 14: "follower"}, 10_000)
    assert spent["follower"]["user_us"] == 30.0 and spent["follower"]["faults_per_1k"] == 20.0
    assert spent["follower"]["young_per_1k"] == 0.1 and spent["leader"]["user_us"] == 30.0
    assert "calls" not in spent["leader"]


def test_the_table_shows_the_medians_of_each_side_and_the_change() -> None:
    records = [{"workload": "setData", "side": side, "rate": rate, "spent": {"leader": {"user_us": user, "system_us": 1.0, "faults_per_1k": 0.0, "young_per_1k": 0.0}}}
               for side, rate, user in (("old", 100.0, 20.0), ("old", 120.0, 22.0), ("old", 110.0, 30.0),
                                        ("new", 90.0, 24.0), ("new", 95.0, 26.0), ("new", 99.0, 25.0))]  # fmt: skip
    lines = table(records, ["old", "new"]).splitlines()
    assert lines[2].startswith("| setData | leader | 22.0 → 25.0 (+14%) |") and lines[2].endswith("| 110 → 95 |")
    assert "Python calls" not in lines[0]
