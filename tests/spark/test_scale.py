"""``python -m zabby.spark.scale``: a small run in the default suite (5 query nodes, 20
commits, no Spark), the full one (100 nodes, 1,000 commits, Spark) marked slow."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from zabby.spark.scale import main


def check(out: Path, nodes: int, commits: int) -> dict:
    results = json.loads((out / "scale-results.json").read_text())
    assert [r["step"] for r in results["lag_ms"]] == ["PROJECT", "BUILD 1", "BUILD 2", "MERGE", f"{commits} commits"]
    for row in results["lag_ms"][:4]:
        assert row["n"] == nodes and row["missing"] == 0 and math.isfinite(row["p99"])
    every = results["lag_ms"][4]
    assert every["n"] == (nodes - 1) * commits and every["missing"] == 0  # the stopped node's peers saw each commit
    catch_up = results["catch_up"]
    assert catch_up["resumed_from"] == catch_up["saved_zxid"] and catch_up["caught_up"]
    assert catch_up["full_reads"] == 0 and catch_up["mirrors_equal"]  # from the feed, and to the same state as a full read
    assert catch_up["commits_missed"] == commits and catch_up["last_zxid"] > catch_up["saved_zxid"]
    return results


@pytest.mark.parametrize("processes", [0, 2])
def test_a_small_scale_run(tmp_path: Path, processes: int) -> None:
    argv = ["--nodes", "5", "--commits", "20", "--processes", str(processes), "--out", str(tmp_path), "--workdir", str(tmp_path), "--quiet"]
    assert main(argv) == 0
    check(tmp_path, 5, 20)


def test_bad_options_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--nodes", "1"])
    assert "--nodes >= 2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--nodes", "4", "--processes", "4"])
    assert "--processes < --nodes" in capsys.readouterr().err


@pytest.mark.slow
def test_the_full_scale_run(tmp_path: Path) -> None:
    from tests.spark.conftest import java_missing

    reason = java_missing()
    if reason:
        pytest.skip(reason)
    assert main(["--nodes", "100", "--processes", "4", "--commits", "1000", "--spark", "--out", str(tmp_path), "--workdir", str(tmp_path)]) == 0
    check(tmp_path, 100, 1000)
