"""Every client opcode's reply, byte for byte, as ZooKeeper 3.8's server sends it: the same raw
jute requests (successes and errors) to ZooKeeper (Debian's jars) and to zabby, standalone,
each reply and watch event compared once zxids, times and session ids are masked
(harness/differential/wire.py says how).  This is what ZooKeeper's Java client reads: it broke
on addWatch when zabby sent no ErrorResponse, and a null znode's data read back as empty."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.differential.servers import running_pair
from harness.differential.wire import differences, normalised, run_steps, steps
from harness.local.zookeeper import ZooKeeperUnavailable, ensure_zookeeper
from zabby.opcodes import OpCode
from zabby.wire import jute


@pytest.fixture(scope="module")
def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    try:
        ensure_zookeeper()
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"ZooKeeper 3.8 cannot run here: {exc}")
    with running_pair(Path(tmp_path_factory.mktemp("wire"))) as (reference, zabby):
        yield int(reference.hosts.rpartition(":")[2]), zabby.port


def test_every_reply_is_the_bytes_zookeeper_sends(ports: tuple[int, int]) -> None:
    reference, zabby = run_steps(ports[0]), run_steps(ports[1])
    assert len(reference) == len(steps()), reference[-1]  # ZooKeeper answered every step
    assert differences(reference, zabby) == []
    kinds = {kind for _, frames in zabby for _, _, kind, _ in frames}
    assert {"event", "ErrorResponse", "MultiResponse", "GetDataResponse", "Create2Response"} <= kinds


def test_the_comparison_sees_a_missing_body_and_a_null_read_as_empty() -> None:
    header = jute.ReplyHeader(5, 9, 0).encode()
    assert normalised(OpCode.ADD_WATCH, header) != normalised(OpCode.ADD_WATCH, header + jute.ErrorResponse(0).encode())
    stat = jute.Stat(*range(11))
    null, empty = (header + jute.GetDataResponse(data, stat).encode() for data in (None, b""))
    assert normalised(OpCode.GET_DATA, null) != normalised(OpCode.GET_DATA, empty)
    later = header + jute.GetDataResponse(None, jute.Stat(*range(1, 12))).encode()
    assert normalised(OpCode.GET_DATA, null)[3][4:] != normalised(OpCode.GET_DATA, later)[3][4:]  # versions are not masked
