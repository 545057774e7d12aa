"""``python -m harness.bench.write_path`` end to end on a few writes: every span of a write's path is
timed on the server that sees it, so the tool cannot silently lose one to a renamed hook."""

from __future__ import annotations

from pathlib import Path

from harness.bench import write_path
from harness.bench import write_path_hooks as hooks


def test_every_span_of_a_write_is_timed_where_it_happens(tmp_path: Path) -> None:
    spans, latencies, cpu = write_path.measure(tmp_path, writes=40, warmup=10)
    assert len(latencies) == 40 and all(latency > 0 for latency in latencies)
    assert set(cpu) == {"leader", "client's follower", "other follower"}  # its figures: the test below
    seen = {
        "client's follower": [hooks.CLIENT_TO_FORWARD, hooks.FORWARD_TO_PROPOSAL, hooks.FOLLOWER_FSYNC,
                              hooks.WAIT_FOR_LOGGED, hooks.LOGGED_TO_REPLY, hooks.CLIENT_TURNAROUND],
        "leader": [hooks.REQUEST_TO_PROPOSAL, hooks.LEADER_FSYNC],
        "other follower": [hooks.FOLLOWER_FSYNC],
    }  # fmt: skip
    for role, names in seen.items():
        for name in names:
            values = spans[role][name]
            assert len(values) >= 40 and all(value > 0 for value in values), (role, name, values)
    assert set().union(*(spans[role] for role in spans)) == set(hooks.PATH)
    table = write_path.table(spans, latencies, cpu)
    assert table.startswith("one-at-a-time setData through a follower: 40 writes")
    assert "CPU per write: leader " in table
    assert f"| {hooks.LEADER_FSYNC} | leader |" in table


def test_writes_go_on_with_the_other_follower_stopped(tmp_path: Path) -> None:
    """The leader and the client's follower are a quorum: the third server, stopped, does no
    work during the writes, and is let go on afterwards (it writes its spans as it exits).
    CPU time is counted in 10 ms ticks: 300 writes (~0.3 ms of each server's CPU apiece)
    give the two working servers several, where 30 could give one none."""
    spans, latencies, cpu = write_path.measure(tmp_path, writes=300, warmup=5, other_follower="stopped")
    assert len(latencies) == 300
    assert cpu["other follower"] == 0 and cpu["leader"] > 0 and cpu["client's follower"] > 0
    assert "other follower" in spans
