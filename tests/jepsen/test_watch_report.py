"""The watch workload's figures in the per-run line and the watch table."""

from __future__ import annotations

from harness.jepsen import report


def _run(system: str, missed: int, caught_up: bool = True) -> dict:  # type: ignore[type-arg]
    figures = {"events": 10 - missed, "expected": 10, "missed": missed, "duplicated": 0, "reordered": 0, "mismatched": 0,
               "unverifiable": 0, "history_lost": 0, "caught_up": caught_up, "resubscribed": 1, "expiries": 2}  # fmt: skip
    return {"system": system, "servers": 3, "clients": ["kazoo"], "nemesis": "mixed", "seed": 1, "ok": True, "commit": "abc",
            "watch": {"watchers": {"watch-1": figures, "watch-2": dict(figures, missed=0, events=10, caught_up=True)}}}  # fmt: skip


def test_the_watch_table_sums_watchers_and_runs_and_leaves_zookeeper_s_order_unjudged() -> None:
    table = report.watch_table([_run("zabby", 0), _run("zabby", 0, caught_up=False), _run("zookeeper", 3)])
    rows = table.strip().splitlines()
    assert len(rows) == 4
    assert rows[2] == "| zabby | 3 | mixed | 2 | 4 (1) | 40 / 40 | 0 | 0 | 0 | 0 | 0 (0) | 0 | 4 | abc |"
    assert rows[3] == "| zookeeper | 3 | mixed | 1 | 2 (0) | 17 / 20 | 3 | 0 | - | - | 0 (0) | - | 4 | abc |"


def test_a_run_line_tells_the_watch_figures_and_a_run_without_them_tells_none() -> None:
    record = {**_run("zabby", 2), "ops": {}, "faults": {}}
    assert ", watch: 2 watchers, 18 events of 20 expected: 2 missed, 0 duplicated" in report.run_line(record)
    assert "watch" not in report.run_line({**record, "watch": {}})
    assert report.watch_table([{**record, "watch": {}}]).count("\n") == 2
