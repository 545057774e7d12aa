"""``log verify`` and ``log dump`` on the data dirs of a (short) fault-harness run: servers
killed, paused and restarted under load, so the logs hold several epochs, truncations and
logs replaced by SNAPs.  Every log verifies, dumps every record it holds, and all servers'
logs agree on every zxid they share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.jepsen.runner import RunSpec, run_once
from harness.jepsen.workloads import WorkloadSpec
from tests.ops.helpers import admin

pytest.importorskip("kazoo")


@pytest.mark.timeout(200)
def test_logs_of_a_fault_harness_run_verify_and_dump(tmp_path: Path) -> None:
    workload = WorkloadSpec(keys=3, session_timeout_s=8.0, op_timeout_s=4.0, churn_session_timeout_s=3.0)
    spec = RunSpec(seed=11, out_dir=tmp_path, servers=3, duration_s=15.0, nemesis="kill", clients=("zabby",), workers=3,
                   tick_ms=500, fault_s=3.0, quiet_s=2.0, workload=workload, keep_data=True)  # fmt: skip
    record = run_once(spec)
    assert sum(record["faults"].values()) > 0, record
    data_dirs = sorted(Path(record["dir"]).glob("server*/data"))
    assert len(data_dirs) == 3
    by_zxid: dict[str, dict[str, object]] = {}
    for data_dir in data_dirs:
        code, out, err = admin("log", "verify", str(data_dir))
        assert code == 0, out + err
        count = int(out.rsplit("OK: ", 1)[1].split()[0])
        code, out, err = admin("log", "dump", str(data_dir), "--json")
        assert code == 0, err
        rows = [json.loads(line) for line in out.splitlines()]
        assert len(rows) == count > 0
        zxids = [int(row["zxid"], 16) for row in rows]
        assert zxids == sorted(set(zxids))
        for row in rows:
            assert by_zxid.setdefault(row["zxid"], row) == row, f"{data_dir}: {row} differs from another server's"
