"""The cut-over of docs/operations.md ("Moving from ZooKeeper"), rehearsed: three ZooKeeper 3.8
servers moved onto three zabby servers and back (``harness.differential.cutover``) while a kazoo
client holds an ephemeral znode, a kazoo writer writes, and a Curator LeaderLatch holds its
leadership; each keeps its session through both moves, and each move's write outage is
reported (``-s`` shows it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.differential.curator import run_suite
from harness.differential.cutover import CutOver, Phase, client
from zabby.testing import wait_until

HOLDER = "/cutover/kazoo-holder"


def test_the_move_and_back_keep_sessions_ephemerals_and_leadership(build_dir: Path, tmp_path: Path) -> None:
    cut = CutOver(tmp_path)
    cut.start()
    holder = client(cut.hosts)
    try:
        holder.create(HOLDER, b"held", ephemeral=True, makepath=True)
        session = holder.client_id[0]

        def holds() -> None:
            wait_until(lambda: holder.connected, 60, "the kazoo holder re-attached")
            stat = holder.exists(HOLDER)
            assert holder.client_id[0] == session and stat is not None and stat.ephemeralOwner == session

        def on_event(event: dict[str, Any]) -> None:
            if event["event"] == "midpoint":
                report(cut.to_zabby())
                holds()
            elif event["event"] == "back":
                report(cut.back_to_zookeeper())
                holds()

        (result,) = run_suite(build_dir, cut.hosts, ["cutover"], on_event=on_event, log=tmp_path / "curator.log", timeout_s=600)
    finally:
        holder.stop()
        holder.close()
        cut.stop()
    assert result["passed"], result["failures"]
    assert not result["leadership_losses"] and "LOST" not in {state["state"] for state in result["states"]}
    assert result["facts"]["midpoint_leader"] and result["facts"]["back_leader"]
    forward, back = cut.phases
    assert forward.after.znodes == forward.before.znodes and forward.after.ephemerals == forward.before.ephemerals
    assert min(forward.after.zxids.values()) >= max(forward.before.zxids.values())
    assert back.after.znodes == back.before.znodes and back.after.ephemerals == back.before.ephemerals
    assert forward.outage_s < 45 and back.outage_s < 45


def report(phase: Phase) -> None:
    print(f"{phase.name}: write outage {phase.outage_s:.1f} s; before {phase.before}; after {phase.after}")
    print("\n".join(f"    {line}" for line in phase.converted))
