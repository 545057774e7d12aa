"""The speed probe of ``harness.bench.compare`` and ``harness.bench.window``: run before the rows
and after them, printed under the table, kept in ``--json``, and a warning where the machine's
Python speed moved by more than 10% in between.  Nothing is measured: the probe, the worktree and
the rows are stand-ins."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.bench import compare, report, window


def _probe(loop_ms: float, sync_us: float = 100.0) -> dict[str, float]:
    return {"python_loop_ms": loop_ms, "fdatasync_us": sync_us}


@pytest.mark.parametrize(("before", "after"), [(200.0, 219.0), (219.0, 200.0), (100.0, 100.0)])
def test_a_speed_within_ten_percent_gets_no_warning(before: float, after: float) -> None:
    note = report.speed_note(_probe(before), _probe(after))
    assert note.startswith(f"speed probe: a pure-Python loop {before:.0f} ms before the measurements, {after:.0f} ms after")
    assert "warning" not in note


@pytest.mark.parametrize(("before", "after", "moved"), [(180.0, 239.0, "33%"), (239.0, 180.0, "33%"), (100.0, 111.0, "11%")])
def test_a_speed_that_moved_more_is_said_to_be_the_machines(before: float, after: float, moved: str) -> None:
    note = report.speed_note(_probe(before), _probe(after))
    assert f"warning: the machine's speed moved by {moved} during the run: a difference between the sides within {moved}" in note


def test_main_probes_before_and_after_the_rows_and_keeps_both(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    steps: list[str] = []
    probes = iter([_probe(180.0, 98.0), _probe(239.0, 130.0)])

    def speed_probe(folder: Path) -> dict[str, float]:
        steps.append("probe")
        return next(probes)

    def run_rows(*args: Any) -> dict[str, list[dict[str, Any]]]:
        steps.append("rows")
        return {"3-server pipelined create-100B": [{"side": side, "round": 0, "rate": 100.0, "server_cpu_by_mode": {}, "server_user_cpu_by_mode": {},
                                                    "ops": 1} for side in ("old", "new")]}  # fmt: skip

    monkeypatch.setattr(compare, "wait_quiet", lambda minutes, load: (True, 0.1))
    monkeypatch.setattr(compare, "old_worktree", lambda commit, folder: (folder, "0123456789"))
    monkeypatch.setattr(compare, "run_rows", run_rows)
    monkeypatch.setattr(compare.report, "speed_probe", speed_probe)
    monkeypatch.setattr(compare.subprocess, "run", lambda *args, **kwargs: None)  # no worktree to remove
    records = tmp_path / "records.jsonl"

    assert compare.main(["HEAD", "--rows", "pipelined", "--json", str(records)]) == 0

    assert steps == ["probe", "rows", "probe"]
    printed = capsys.readouterr().out
    assert "speed probe: a pure-Python loop 180 ms before the measurements, 239 ms after; fdatasync p50 98 and 130 µs" in printed
    assert "warning: the machine's speed moved by 33% during the run" in printed
    meta = json.loads(records.read_text().splitlines()[-1])
    assert isinstance(meta.pop("ts"), float)
    assert meta == {"kind": "meta", "old": "HEAD", "old_hash": "0123456789", "probe_at_start": _probe(180.0, 98.0),
                    "probe_at_end": _probe(239.0, 130.0)}  # fmt: skip


def test_window_probes_before_and_after_its_runs_and_keeps_both(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    steps: list[str] = []
    probes = iter([_probe(200.0), _probe(205.0)])

    def speed_probe(folder: Path) -> dict[str, float]:
        steps.append("probe")
        return next(probes)

    def run_sides(*args: Any) -> list[dict[str, Any]]:
        steps.append("runs")
        return []

    monkeypatch.setattr(window, "wait_quiet", lambda minutes, load: (True, 0.1))
    monkeypatch.setattr(compare, "old_worktree", lambda commit, folder: (folder, "0123456789"))
    monkeypatch.setattr(window, "run_sides", run_sides)
    monkeypatch.setattr(window.report, "speed_probe", speed_probe)
    monkeypatch.setattr(compare.subprocess, "run", lambda *args, **kwargs: None)  # no worktree to remove
    records = tmp_path / "records.jsonl"

    assert window.main(["HEAD", "--json", str(records)]) == 0

    assert steps == ["probe", "runs", "probe"]
    printed = capsys.readouterr().out
    assert "speed probe: a pure-Python loop 200 ms before the measurements, 205 ms after" in printed
    assert "warning" not in printed
    meta = json.loads(records.read_text().splitlines()[-1])
    assert (meta["kind"], meta["old_hash"], meta["probe_at_start"], meta["probe_at_end"]) == ("meta", "0123456789", _probe(200.0), _probe(205.0))
