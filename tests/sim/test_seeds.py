"""The deterministic simulator in CI: a fixed range of seeds, the pinned regression seeds,
and exact replay.  ``-m slow`` adds a 10,000-seed soak.

A failing seed prints ``reproduce: python -m zabby.sim --seed N`` (add ``-v`` for the
trace).  A seed reproduces its schedule only with the same code: when the simulator or the
swarm changes, a pinned seed may stop exercising its bug, so each pin names the bug, and
``tests/core`` keeps a hand-built test for it too.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterable

import pytest

from zabby.sim.runner import Result, run

# Sized for ~2 minutes on two idle cores: a seed with the storage nemesis, reconfigs and
# forgeries in their shares runs at ~1.7 seeds per CPU-second (measured 2026-11-28), so 1,000
# seeds took 5-8 minutes of the default run; the 10,000-seed soak (-m slow) covers the rest.
CI_SEEDS = range(1, 401)
SOAK_SEEDS = range(1, 10_001)
RECONFIG_SHARE = 0.3  # of the CI and soak seeds, how many reconfigure (spare servers, super-user clients)
FORGE_SHARE = 0.3  # of the CI and soak seeds, how many have the forging nemesis (zabby.sim.forge)

# Seeds that once failed and led to a fix.  A seed replays its bug only with the simulator
# it was found with: 41 was found once the simulator drove the server's own engine (checked
# by reverting the fix); the others were found by earlier simulators, so the hand-built test
# named beside each is the real guard, and the seed stays as a cheap smoke test.
REGRESSIONS = {
    41: "a learner wrote the new current epoch before the fsync of the DIFF it logged in the same Ready, "
    "crashed, lost the DIFF, led on that epoch and truncated committed txns (ZOOKEEPER-4643; "
    "tests/server/test_driver.py checks the order of the server's writes)",
    47: "late NEWLEADER ack got no COMMIT (test_a_learner_synced_after_establishment_gets_...)",
    114: "stale FOLLOWERINFO → second sync on the next connection (test_second_leaderinfo_goes_looking, "
    "test_second_ackepoch_drops_the_learner, test_second_sync_mode_message_goes_looking)",
    138: "SNAP left a gap beyond the leader's window (test_snap_carries_every_pending_txn_even_beyond_the_window)",
    463: "a reordered stream dropped the snapshot, the learner acked NEWLEADER over its old log "
    "(test_snap_never_installed_goes_looking_instead_of_acking_newleader)",
    5457: "a leader took the new current epoch before a quorum acked it, lost to a follower ahead of it, "
    "then won the next election on that epoch with a stale log (test_the_leader_takes_the_new_epoch_only_...)",
    6199: "the same: the stale leader truncated committed txns from the others",
    5862: "the sim shell installed a chunk of an earlier sync's SNAP (shell rule, as zabby.server.node)",
    734305: "a server that had picked an epoch of its own as a would-be leader refused the LEADERINFO of the lower "
    "epoch the others then established, and looked again for as long as that leader led "
    "(test_a_leader_steps_down_for_a_learner_that_promised_an_epoch_above_its_own)",
    735429: "the same",
    82: "a segment left last when recovery removed an empty one after it kept its reserve, and appends landed "
    "after the zeros (test_a_segment_left_last_by_an_empty_one_is_appended_to_after_its_records_not_its_zeros)",
    120: "a bit flipped in the last record was cut as a torn tail, dropping a txn that may have been acknowledged "
    "(test_a_flipped_bit_in_the_last_record_is_damage_not_a_torn_tail)",
    175: "a member that took a bit flip while running was counted repaired before any recovery read it",
    74454: "the checker disarmed a flip in a segment its restart did not read (older than the snapshot), and "
    "called the repair a finding when a TRUNC made that segment the last one and its reload read the flip",
}


def _run(seed: int) -> Result:
    return run(seed, reconfig_share=RECONFIG_SHARE, forge_share=FORGE_SHARE)


def _failures(seeds: Iterable[int]) -> list[Result]:
    seeds = list(seeds)
    workers = min(os.cpu_count() or 1, 4)
    if workers == 1:
        results = map(_run, seeds)
        return [r for r in results if not r.ok]
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    with context.Pool(workers) as pool:
        return [r for r in pool.imap_unordered(_run, seeds, chunksize=8) if not r.ok]


def _report(failures: list[Result]) -> str:
    failures.sort(key=lambda r: r.seed)
    return "\n".join(f"seed {r.seed}: {r.error}\n  {r.reproduce()}" for r in failures[:10])


@pytest.mark.parametrize("seed", sorted(REGRESSIONS), ids=lambda s: f"seed{s}")
def test_regression_seed(seed: int) -> None:
    result = run(seed)
    assert result.ok, f"{REGRESSIONS[seed]}\n{result.error}\n{result.reproduce()}"


# Seeds of the reconfiguring swarm that once failed and led to a fix: seed -> (reconfig share, bug).
RECONFIG_REGRESSIONS = {
    30817: (RECONFIG_SHARE, "a learner took the epoch of a leader that never had its quorum, and was then ahead of "
            "the only server the others could elect (test_no_newleader_goes_out_before_a_quorum_acked_the_epoch)"),
    4578: (RECONFIG_SHARE, "an observer that a vote's hint made the only voter of a proposed membership, and the old "
           "leader that had logged it, never joined the new leader (test_a_server_that_only_a_votes_hint_...)"),
    501479: (1.0, "a leader stepped down, again and again, at the ACKEPOCH of a learner ahead of it that no election "
             "could make leader (test_a_leader_syncs_a_learner_ahead_of_it_that_no_election_could_make_leader)"),
    722227: (1.0, "two servers that had logged a reconfig no later leader had never joined the leader of the next "
             "epoch (test_a_server_whose_logged_reconfig_a_later_leader_never_had_joins_that_leader)"),
    723131: (1.0, "a learner that had promised an epoch above the established leader's "
             "(test_a_leader_steps_down_for_a_learner_that_promised_an_epoch_above_its_own)"),
}


# Seeds of the CI and soak swarm (reconfigs and forgeries in their shares) that once failed.
SWARM_REGRESSIONS = {
    2187: "a core restart left the link to a leader a reconfig had added up, and that leader's stream ran on "
    "into the next sync (test_a_core_restart_drops_the_link_to_a_leader_the_configuration_file_does_not_name)",
    2971: "the forging nemesis sent votes in members' names with a membership of the receiver's version that "
    "left it out, and every server stopped voting for itself (a lie only quorum authentication stops: "
    "the nemesis no longer tells it)",
    514: "a log that did not continue its snapshot (the newest, a SNAP's, damaged) crashed the replay instead of "
    "starting a repair (DataDir._replay raises RecoveryError)",
    599: "the simulator dropped a FailStop while it finished a background sync first",
    5364: "a crash's partial append met a full disk (the simulator hands the error on as the server would)",
    4590: "a reload the core asked for (its tree ahead of a TRUNC) found a flipped snapshot and started a repair, "
    "and the core went on as if its tree were whole (Engine._reload restarts the core instead)",
    5819: "a bit flipped in a SNAP's snapshot; recovery fell back to an older one and replayed onto it a log of a "
    "later epoch that continued the SNAP's, a history without the txns in between "
    "(test_a_log_of_a_later_epoch_continues_only_the_newest_snapshot)",
    6403: "a bit flipped in the last record's length framed the wrong bytes and was cut as a torn tail "
    "(test_a_flipped_bit_in_the_last_record_is_damage_not_a_torn_tail[3])",
}


@pytest.mark.parametrize("seed", sorted(SWARM_REGRESSIONS), ids=lambda s: f"seed{s}")
def test_regression_seed_of_the_swarm(seed: int) -> None:
    result = _run(seed)
    assert result.ok, f"{SWARM_REGRESSIONS[seed]}\n{result.error}\n{result.reproduce()}"


@pytest.mark.parametrize("seed", sorted(RECONFIG_REGRESSIONS), ids=lambda s: f"seed{s}")
def test_regression_seed_with_reconfigs(seed: int) -> None:
    share, bug = RECONFIG_REGRESSIONS[seed]
    result = run(seed, reconfig_share=share)
    assert result.ok, f"{bug}\n{result.error}\n{result.reproduce()}"


@pytest.mark.timeout(900)  # ~75 CPU-seconds: ~40 s on two idle cores, longer on a busy machine
def test_ci_seed_range() -> None:
    failures = _failures(CI_SEEDS)
    assert not failures, f"{len(failures)} of {len(CI_SEEDS)} seeds failed:\n{_report(failures)}"


def test_reconfig_seeds_change_the_membership() -> None:
    """The reconfiguring swarm does reconfigure: memberships commit, under faults."""
    results = [run(seed, reconfig_share=1.0) for seed in range(1, 21)]
    assert all(r.ok for r in results), _report([r for r in results if not r.ok])
    assert sum(r.stats["memberships"] for r in results) >= 10
    assert sum(r.stats["crashes"] + r.stats["breaks"] for r in results) > 0


def test_forging_seeds_forge_and_change_no_membership() -> None:
    """The forging nemesis does forge (votes with memberships from servers that are no
    members, stale and impossible ones in members' names, forwarded writes), with reconfigs
    beside it, and every seed holds: no membership recorded that no reconfig committed."""
    results = [run(seed, reconfig_share=1.0, forge_share=1.0) for seed in range(1, 21)]
    assert all(r.ok for r in results), _report([r for r in results if not r.ok])
    assert sum(r.stats["forged"] for r in results) >= 50
    assert sum(r.stats["memberships"] for r in results) >= 5


def test_snapshots_written_in_the_background_skip_the_ones_due_meanwhile_and_die_with_their_server() -> None:
    """As the server's forked child: a snapshot takes ticks to write, the engine skips the ones
    that fall due meanwhile (ZooKeeper's rule), and a crash leaves it unfinished."""
    unfinished: list[str] = []
    results = [run(seed, trace=lambda line: unfinished.append(line) if "dies unfinished" in line else None,
                   snapshot_ticks_max=30, snapshot_every_txns=3, crash_probability=0.01) for seed in range(1, 21)]  # fmt: skip
    assert all(r.ok for r in results), _report([r for r in results if not r.ok])
    assert sum(r.stats["snapshots_skipped"] for r in results) > 0
    assert sum(r.stats["snapshots"] for r in results) > 0 and unfinished


def test_replay_is_exact() -> None:
    """Same seed, same run: the trace and every counter match."""
    first: list[str] = []
    second: list[str] = []
    a = run(7, trace=first.append)
    b = run(7, trace=second.append)
    assert first == second and a.stats == b.stats and a.ok == b.ok
    assert a.stats["committed"] > 0 and a.stats["crashes"] + a.stats["breaks"] > 0


def test_a_broken_core_is_caught() -> None:
    """The checkers bite: a leader that commits without waiting for a quorum loses writes."""
    from zabby.core.quorum import Majority

    original = Majority.committed
    Majority.committed = lambda self, acked: max(acked.values())  # type: ignore[method-assign]
    try:
        caught = next((r for r in map(_run, range(1, 41)) if not r.ok), None)  # the first that notices is enough
    finally:
        Majority.committed = original  # type: ignore[method-assign]
    assert caught is not None, "40 seeds ran a leader that commits alone, and no checker noticed"


def test_a_proposal_overtaking_the_one_before_it_is_caught() -> None:
    """The sender's side of a stream: a leader whose next PROPOSAL leaves before the one it
    held behind its log's sync (the bug f93061c fixed) is caught where it sends, though its
    learners would only have resynced."""
    from zabby.core.messages import Message
    from zabby.core.replica import Replica

    def send_early(self: Replica, sid: int, message: Message) -> None:  # blind to the Readys not yet advanced
        (self._ready.messages if sid in self._regular_sids else self._ready.early_messages).append((sid, message))

    original = Replica._send_early
    Replica._send_early = send_early  # type: ignore[method-assign]
    try:
        caught = next((r for r in map(_run, range(1, 41)) if "right after" in (r.error or "")), None)
    finally:
        Replica._send_early = original  # type: ignore[method-assign]
    assert caught is not None, "40 seeds ran a leader whose PROPOSALs overtake each other, and no checker noticed"


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_soak_seeds() -> None:
    failures = _failures(SOAK_SEEDS)
    assert not failures, f"{len(failures)} of {len(SOAK_SEEDS)} seeds failed:\n{_report(failures)}"


def test_a_shell_that_acks_before_its_fsync_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator runs the server's own shell: a bug planted in its ordering, an Append
    answered durable while its fsync is still left to the background (so a follower ACKs, and
    a leader counts itself, before the txn is on its disk), loses committed txns at a crash,
    and a seed of the default range catches it."""
    from zabby.engine import Append
    from zabby.shell import EffectExecutor

    honest = EffectExecutor._append_in_background

    def acks_before_fsync(self: EffectExecutor, effect: Append) -> tuple[bool, bool]:
        space_low, durable = honest(self, effect)
        return space_low, durable or effect.sync

    monkeypatch.setattr(EffectExecutor, "_append_in_background", acks_before_fsync)
    caught = next((r for r in map(_run, CI_SEEDS[:100]) if not r.ok), None)
    assert caught is not None, "100 seeds ran a shell that acknowledges before its fsync, and no checker noticed"
    assert "lacks committed txn" in (caught.error or ""), caught.error
