"""``python -m harness.bench`` (and its entry point ``scripts/bench.py``) end to end on a tiny subset, so the harness cannot silently rot: zabby
standalone only, its msgpack client (no Java, no ZooKeeper), two short workloads (getData and
setData one at a time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import CHECKOUT
from harness.bench import cli as bench


@pytest.mark.parametrize("script", ["bench.py", "bench_standalone.py", "bench_ensemble.py", "bench_sync.py"])
def test_the_scripts_are_entry_points_of_the_package(script: str) -> None:
    """The documented ``python scripts/bench*.py`` commands still run (their help, here)."""
    done = subprocess.run([sys.executable, str(CHECKOUT / "scripts" / script), "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr


def test_bench_quick_subset(tmp_path: Path, capsys) -> None:
    code = bench.main([
        "--quick", "--systems", "zabby", "--deployments", "standalone", "--drivers", "zabby-msgpack", "--workloads", "getData,latency-set",
        "--seconds", "1", "--latency-ops", "200", "--out", str(tmp_path), "--report", str(tmp_path / "benchmarks.md"),
        "--setting", "snapCount=1000",
    ])  # fmt: skip
    assert code == 0
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert lines[-1]["kind"] == "meta" and lines[-1]["machine"]["cores"]
    assert lines[-1]["settings"] == {"snapCount": "1000"}
    records = lines[:-1]
    assert [r["series"] for r in records if r["workload"] == "getData"] == ["warmup", "main"]  # the first throughput run, unmeasured
    by_workload = {r["workload"]: r for r in records}
    assert set(by_workload) == {"getData", "latency-set"}
    for record in records:
        assert "error" not in record, record
        assert record["system"] == "zabby" and record["deployment"] == "standalone"
        assert record["ops"] > 0 and record["errors"] == 0
        assert record["server_cpu_s"] > 0 and record["client_cpu_s"] > 0
    assert by_workload["getData"]["rate"] > 0
    assert 0 < by_workload["latency-set"]["p50_ms"] <= by_workload["latency-set"]["p99_ms"]
    report = (tmp_path / "benchmarks.md").read_text()
    assert "| getData | zabby msgpack Client |" in report
    assert "(--setting): snapCount=1000" in report
    assert "| workload | client | zabby | ZooKeeper 3.8 |" in capsys.readouterr().out


def test_bench_measures_a_goal_row_in_rounds(tmp_path: Path) -> None:
    """kazoo one at a time is a row the goals read: --rounds 2 measures it twice, and the
    report shows the median round with the range."""
    code = bench.main([
        "--quick", "--systems", "zabby", "--deployments", "standalone", "--drivers", "kazoo", "--workloads", "latency-set",
        "--latency-ops", "100", "--rounds", "2", "--out", str(tmp_path), "--report", str(tmp_path / "benchmarks.md"),
    ])  # fmt: skip
    assert code == 0
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()][:-1]
    assert [(r["workload"], r.get("round")) for r in records] == [("latency-set", 0), ("latency-set", 1)]
    assert all("error" not in r and r["ops"] == 100 for r in records)
    report = (tmp_path / "benchmarks.md").read_text()
    assert "(median of 2 rounds: " in report
    assert "in 2 rounds, the two systems' order reversed each round" in report
    meta = json.loads((tmp_path / "results.jsonl").read_text().splitlines()[-1])
    for probe in (meta["machine"]["probe_at_start"], meta["machine"]["probe_at_end"]):
        assert probe["python_loop_ms"] > 0 and probe["fdatasync_us"] > 0
    assert "* Speed probes, the same fixed work in every run" in report


def test_bench_refuses_rounds_below_one(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--quick", "--systems", "zabby", "--rounds", "0"])
    assert exit_info.value.code == 2
    assert "--rounds must be at least 1, not 0" in capsys.readouterr().err
