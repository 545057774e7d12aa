"""zabby-admin log dump / verify / chop on logs written by the storage layer (the server's
own code), damaged by hand where a test needs it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.ops.helpers import admin, write_log
from tests.storage.helpers import TxnMaker
from zabby.ops import logtool
from zabby.storage.snapshot import write_snapshot
from zabby.storage.txnlog import TxnLog, list_segments
from zabby.tree.txns import make_zxid


def test_dump_prints_every_txn_in_order(tmp_path: Path) -> None:
    txns = write_log(tmp_path / "data", TxnMaker().some(60), segment_bytes_max=2000)
    assert len(list_segments(tmp_path / "data" / "version-2")) > 2
    code, out, _ = admin("log", "dump", str(tmp_path / "data"))
    assert code == 0
    zxid_lines = [line for line in out.splitlines() if " zxid " in line]
    assert [line.split(" zxid ")[1].split()[0] for line in zxid_lines] == [f"0x{t.zxid:x}" for t in txns]
    assert "create /node000001 data='" in out and "setData /node" in out and "delete /node" in out


def test_dump_json_from_a_zxid_keeps_the_data_exact(tmp_path: Path) -> None:
    maker = TxnMaker()
    txns = maker.some(20) + [maker.set_data("/node000002", b"\x00\xffbinary")]
    write_log(tmp_path / "data", txns)
    start = txns[10].zxid
    code, out, _ = admin("log", "dump", str(tmp_path / "data" / "version-2"), "--from", f"0x{start:x}", "--json")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [int(row["zxid"], 16) for row in rows] == [t.zxid for t in txns[10:]]
    assert rows[-1]["type"] == "setData" and rows[-1]["encoding"] == "base64" and rows[-1]["data_bytes"] == 8


def test_verify_passes_a_sound_log_across_epochs(tmp_path: Path) -> None:
    txns = TxnMaker(epoch=1).some(30) + TxnMaker(epoch=2).some(30)
    write_log(tmp_path / "data", txns, segment_bytes_max=1500)
    report = logtool.verify(tmp_path / "data")
    assert report.ok and not report.warnings and report.records == 60


def _flip_byte(path: Path, offset: int) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_verify_fails_on_a_damaged_older_segment_and_dump_stops_there(tmp_path: Path) -> None:
    write_log(tmp_path / "data", TxnMaker().some(60), segment_bytes_max=2000)
    first = list_segments(tmp_path / "data" / "version-2")[0][1]
    _flip_byte(first, 8 + 16 + 5)  # inside the first record's payload
    code, out, err = admin("log", "verify", str(tmp_path / "data"))
    assert code == 1 and "DAMAGED" in out and "CRC mismatch" in out and "FAILED" in out
    code, out, err = admin("log", "dump", str(tmp_path / "data"))
    assert code == 1 and out == "" and "CRC mismatch at offset 8" in err


def test_verify_reports_a_torn_tail_as_a_warning(tmp_path: Path) -> None:
    write_log(tmp_path / "data", TxnMaker().some(10))
    last = list_segments(tmp_path / "data" / "version-2")[-1][1]
    os.truncate(last, last.stat().st_size - 3)
    code, out, _ = admin("log", "verify", str(tmp_path / "data"))
    assert code == 0 and "torn tail" in out and "OK: 9 records" in out


def test_verify_finds_missing_txns_inside_an_epoch(tmp_path: Path) -> None:
    txns = TxnMaker().some(10)
    write_log(tmp_path / "data", txns[:4] + txns[5:])  # 0x100000005 never logged
    report = logtool.verify(tmp_path / "data")
    assert not report.ok and "0x100000006 follows 0x100000004" in report.errors[0]


@pytest.mark.parametrize("argv, message", [
    (["log", "verify", "{tmp}/nowhere"], "no such directory"),
    (["log", "dump", "{tmp}"], "no txn log segments"),
])  # fmt: skip
def test_a_wrong_folder_is_a_clear_error(tmp_path: Path, argv: list[str], message: str) -> None:
    code, _, err = admin(*[arg.format(tmp=tmp_path) for arg in argv])
    assert code == 2 and message in err and err.startswith("zabby-admin: ")


def test_chop_cuts_after_the_zxid_and_backs_up_what_it_cut(tmp_path: Path) -> None:
    data = tmp_path / "data"
    txns = write_log(data, TxnMaker().some(60), segment_bytes_max=2000)
    keep = txns[24].zxid
    tree_records = [("tree", txns[40].zxid, 0, 1), ("/", b"", ((31, "world", "anyone"),), 0, 0, 0, 0, 0, 0, 0, 0, 0)]
    write_snapshot(data / "version-2", txns[40].zxid, tree_records)  # holds cut txns: must go too
    before = {path.name: path.read_bytes() for _, path in list_segments(data / "version-2")}
    backup = tmp_path / "backup"
    code, out, err = admin("log", "chop", str(data), "--to", f"0x{keep:x}", "--backup", str(backup))
    assert code == 0, err
    assert "cut 35 txns" in out
    with TxnLog(data / "version-2") as log:
        assert log.last_zxid == keep and [zxid for zxid, _ in log.read_from(0)] == [t.zxid for t in txns[:25]]
    cut = [json.loads(line) for line in (backup / "chopped.jsonl").read_text().splitlines()]
    assert [int(row["zxid"], 16) for row in cut] == [t.zxid for t in txns[25:]]
    for name, content in before.items():
        if (backup / name).exists():
            assert (backup / name).read_bytes() == content
    assert (backup / f"snapshot.{txns[40].zxid:016x}").exists()
    assert not list((data / "version-2").glob("snapshot.*"))


def test_chop_dry_run_changes_nothing_and_a_held_log_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    txns = write_log(data, TxnMaker().some(20))
    segment = list_segments(data / "version-2")[0][1]
    content = segment.read_bytes()
    code, out, _ = admin("log", "chop", str(data), "--to", f"0x{txns[5].zxid:x}", "--dry-run")
    assert code == 0 and "would cut after 0x100000006" in out and segment.read_bytes() == content
    with segment.open("rb"):  # this test's own process stands in for a running server
        code, _, err = admin("log", "chop", str(data), "--to", f"0x{txns[5].zxid:x}")
    assert code == 2 and f"process {os.getpid()} holds the txn log" in err and segment.read_bytes() == content


def test_chop_past_the_end_cuts_nothing(tmp_path: Path) -> None:
    write_log(tmp_path / "data", TxnMaker().some(5))
    code, out, _ = admin("log", "chop", str(tmp_path / "data"), "--to", str(make_zxid(1, 99)))
    assert code == 0 and "nothing to cut" in out
