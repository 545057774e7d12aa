"""``harness.bench.instructions``: a callgrind dump's count, the idle work taken off, the roles'
names, the table and what it flags, the refusals; and (slow) a real run under valgrind."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.bench import instructions
from harness.bench.instructions import dumped_total, per_op, repeated, role_names, table
from zabby.testing import ServerProcess

DUMP = b"# callgrind format\nversion: 1\nevents: Ir\nsummary: 0\n\nfn=(1) main\n3 120\n\ntotals: 987654\n"


def test_a_dumps_count_is_its_totals_line_not_its_summary(tmp_path: Path) -> None:
    (tmp_path / "callgrind-1.out.3").write_bytes(DUMP)
    assert dumped_total(tmp_path / "callgrind-1.out.3") == 987_654
    (tmp_path / "broken").write_bytes(b"summary: 5\n")
    with pytest.raises(ValueError, match="no totals line"):
        dumped_total(tmp_path / "broken")


def test_the_idle_work_of_as_long_is_taken_off_before_dividing() -> None:
    # server 1 idles at 20,000 a second (200,000 over 10 s): 100,000 of its 20 s busy window
    assert per_op({1: 1_000_000, 2: 300_000}, 5.0, {1: 200_000}, 10.0, 400) == {1: 2_250, 2: 750}


def test_the_ops_repeat_until_the_window_has_lasted_and_each_run_is_told_the_ops_before_it() -> None:
    starts: list[int] = []
    assert repeated(starts.append, 200, 0.0)() == 200 and starts == [0]  # at least once
    starts.clear()

    def slow(done: int) -> None:
        starts.append(done)
        time.sleep(0.02)

    made = repeated(slow, 50, 0.3)()
    assert made == 50 * len(starts) and starts == list(range(0, made, 50)) and len(starts) >= 2


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
    records = [_record("old", "get", {"follower*": 90_000, "leader": 800, "follower": -150, "follower2": 0}),
               _record("new", "get", {"follower*": 80_000, "leader": 2_400, "follower": 40_000, "follower2": 12_000, "observer": 5})]  # fmt: skip
    text, flagged = table(records, "abc")
    assert flagged == ["3-server get follower", "3-server get follower2"] and "observer" not in text  # roles that start to work
    lines = text.splitlines()
    assert lines[3] == "| 3-server | get | follower | -150 | 40,000 | (new work) FLAGGED |"
    assert lines[-1] == "| 3-server | get | leader | 800 | 2,400 | (no part in it) |"


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


Control = Callable[..., "subprocess.CompletedProcess[str]"]


def _fake_servers(tmp_path: Path, answers: list[str], totals: dict[int, int]) -> tuple[instructions.CallgrindServers, Control]:
    """A CallgrindServers with no valgrind behind it (``sleep`` stands for each server), and the
    ``subprocess.run`` to patch in: each ``callgrind_control`` call answers the next of
    ``answers`` (the last one again and again), and a dump (``-d``) writes a file per server
    with ``totals``."""
    servers = object.__new__(instructions.CallgrindServers)
    servers.workdir = tmp_path
    servers.servers = {sid: ServerProcess(tmp_path / f"server{sid}") for sid in totals}
    servers.procs = {sid: subprocess.Popen(["sleep", "30"]) for sid in totals}
    dumps = iter(range(2, 100))

    def control(command: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        if command[1] == "-d":
            number = next(dumps)
            for sid, total in totals.items():
                (tmp_path / f"callgrind-{sid}.out.{number}").write_bytes(DUMP.replace(b"987654", str(total).encode()))
        return subprocess.CompletedProcess(command, 0, answers.pop(0) if len(answers) > 1 else answers[0], "")

    return servers, control


def test_a_window_reads_the_newest_dump_and_an_answer_without_ok_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    servers, control = _fake_servers(tmp_path, ["  OK.\n"], {1: 5_000, 2: 7_000})
    monkeypatch.setattr(subprocess, "run", control)
    (tmp_path / "callgrind-1.out.10").write_bytes(DUMP)  # an older window's, removed before the next
    try:
        wall, made, counted = servers.window(lambda: 3)
        assert made == 3 and counted == {1: 5_000, 2: 7_000} and wall >= 0
        assert not (tmp_path / "callgrind-1.out.10").exists()
        servers2, control2 = _fake_servers(tmp_path, ["Error: Callgrind task with PID/name '1' not detected.\n"], {1: 5_000})
        monkeypatch.setattr(subprocess, "run", control2)
        try:
            with pytest.raises(RuntimeError, match="not detected"):
                servers2.window(lambda: 1)
        finally:
            servers2.close()
    finally:
        monkeypatch.undo()
        servers.close()


def test_a_window_that_counted_nothing_on_a_server_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    servers, control = _fake_servers(tmp_path, ["  OK.\n"], {1: 5_000, 2: 0})
    monkeypatch.setattr(subprocess, "run", control)
    try:
        with pytest.raises(RuntimeError, match=r"no instructions counted on servers \[2\]"):
            servers.window(lambda: 1)
    finally:
        monkeypatch.undo()
        servers.close()
