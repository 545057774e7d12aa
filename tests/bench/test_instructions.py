"""``harness.bench.instructions``: a callgrind dump's count, the idle work taken off, the roles'
names, the table and what it flags, the refusals; and (slow) a real run under valgrind."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from harness.bench import instructions
from harness.bench.instructions import dumped_total, per_op, repeated, role_names, table

DUMP = b"# callgrind format\nversion: 1\nevents: Ir\nsummary: 0\n\nfn=(1) main\n3 120\n\ntotals: 987654\n"


def test_a_dumps_count_is_its_totals_line_not_its_summary(tmp_path: Path) -> None:
    (tmp_path / "callgrind-1.out.3").write_bytes(DUMP)
    assert dumped_total(tmp_path / "callgrind-1.out.3") == 987_654
    (tmp_path / "broken").write_bytes(b"summary: 5\n")
    with pytest.raises(ValueError, match="no totals line"):
        dumped_total(tmp_path / "broken")


def test_the_idle_work_of_as_long_is_taken_off_before_dividing() -> None:
    assert per_op({1: 1_000_000, 2: 300_000}, {1: 200_000.0}, 400) == {1: 2_000, 2: 750}


def test_the_ops_repeat_until_the_window_has_lasted_and_each_run_is_told_the_ops_before_it() -> None:
    starts: list[int] = []
    assert repeated(starts.append, 200, 0.0)() == 200 and starts == [0]  # at least once
    starts.clear()

    def slow(done: int) -> None:
        starts.append(done)
        time.sleep(0.02)

    made = repeated(slow, 50, 0.1)()
    assert made == 50 * len(starts) and starts == list(range(0, made, 50)) and 4 <= len(starts) <= 7


def test_the_clients_server_is_starred_and_standalone_is_not() -> None:
    assert role_names({1: "follower", 2: "leader", 3: "follower"}, 3) == {1: "follower", 2: "leader", 3: "follower*"}
    assert role_names({1: "standalone"}, 1) == {1: "standalone"}


def _record(side: str, op: str, counts: dict[str, int], number: int = 0) -> dict[str, Any]:
    return {"deployment": "3-server", "op": op, "ops": 400, "side": side, "round": number, "instructions_per_op": counts}


def test_a_role_is_flagged_when_its_median_grows_by_more_than_three_percent() -> None:
    records = [_record("old", "create", {"leader": 100_000, "follower*": 200_000, "follower": 50_000}),
               _record("new", "create", {"leader": 103_500, "follower*": 202_000, "follower": 40_000}),
               _record("old", "create", {"leader": 100_000, "follower*": 200_000, "follower": 50_000}, 1),
               _record("new", "create", {"leader": 104_500, "follower*": 204_000, "follower": 41_000}, 1)]  # fmt: skip
    text, flagged = table(records, "abc")
    assert flagged == ["3-server create leader"]
    lines = text.splitlines()
    assert [line.split(" | ")[2] for line in lines[2:]] == ["follower*", "follower", "leader"]  # the client's server first
    assert lines[-1].endswith("| **1.040** FLAGGED |") and "| 100,000, 100,000 | 103,500, 104,500 |" in lines[-1]
    assert "**0.810**" in lines[3] and "FLAGGED" not in lines[2]


def test_a_role_only_one_side_has_is_left_out_and_one_that_takes_no_part_is_not_flagged() -> None:
    records = [_record("old", "get", {"follower*": 90_000, "leader": 800}),
               _record("new", "get", {"follower*": 80_000, "leader": 2_400, "observer": 5})]  # fmt: skip
    text, flagged = table(records, "abc")
    assert flagged == [] and "observer" not in text
    assert text.splitlines()[-1] == "| 3-server | get | leader | 800 | 2,400 | (no part in it) |"


@pytest.mark.parametrize(("arguments", "says"), [(["HEAD", "--ops", "delete"], "unknown: delete"),
                                                 (["HEAD", "--deployments", "5-server"], "unknown: 5-server"),
                                                 (["HEAD", "--count", "0"], "must be positive"),
                                                 (["HEAD", "--seconds", "-1"], "not negative")])  # fmt: skip
def test_bad_arguments_are_refused_before_anything_starts(arguments: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        instructions.main(arguments)
    assert says in capsys.readouterr().err


def test_without_valgrind_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    assert instructions.callgrind_missing() == "valgrind and callgrind_control not found (Debian: apt-get install valgrind)"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_a_standalone_server_under_callgrind_counts_its_reads(tmp_path: Path) -> None:
    records = instructions.measure_side(instructions.CHECKOUT, tmp_path, "standalone", ["get"], 50, 0.0)
    counts = records[0]["instructions_per_op"]
    assert list(counts) == ["standalone"] and 20_000 < counts["standalone"] < 2_000_000  # ~150,000 a getData
