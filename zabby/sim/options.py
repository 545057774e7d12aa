"""SimOptions and ``swarm(rng)``: every knob of one simulated run, drawn from the seed.

Swarm testing (TigerBeetle's ``options_swarm``): rather than one fixed fault mix, each seed
draws its own cluster size, delays and fault probabilities, so some seeds are calm, some
are storms, and a bug that needs a rare mix still gets found.  Probabilities are per tick
(faults) or per message (network), and every duration is a count of ticks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from zabby.tree.txns import ZXID_COUNTER_LAST


@dataclass(frozen=True, slots=True)
class SimOptions:
    seed: int
    voter_count: int = 3
    observer_count: int = 0
    spare_count: int = 0  # servers outside the first membership, for reconfigs to add
    # phases
    ticks_safety: int = 600
    ticks_liveness_max: int = 1500
    # Peer timing (ticks)
    init_limit_ticks: int = 40
    sync_limit_ticks: int = 25
    ping_interval_ticks: int = 5
    finalize_wait_ticks: int = 3
    notify_interval_ticks_min: int = 3
    notify_interval_ticks_max: int = 24
    commit_log_count: int = 20  # the leader's DIFF window: small, so SNAP happens too
    zxid_counter_last: int = ZXID_COUNTER_LAST  # small: epochs run out of counters (ZOOKEEPER-1277)
    # network (per message unless noted)
    delay_ticks_min: int = 1
    delay_ticks_max: int = 3
    break_probability: float = 0.0  # the connection breaks: in-flight messages are lost
    break_detect_ticks_max: int = 0  # how long a dead connection goes unnoticed
    duplicate_probability: float = 0.0  # a message is delivered twice on its link
    reorder_probability: float = 0.0  # a message overtakes the one queued before it
    partition_probability: float = 0.0  # per tick: start a partition
    partition_symmetric_probability: float = 1.0
    partition_ticks_max: int = 100
    # nodes (per tick)
    crash_probability: float = 0.0
    crash_in_ready_probability: float = 0.5  # a crash lands inside the next Ready, not between
    restart_ticks_max: int = 80
    clock_jump_probability: float = 0.0  # one node gets a burst of ticks at once
    clock_jump_ticks_max: int = 60
    clock_stall_probability: float = 0.0  # one node's ticks stop for a while (a GC pause)
    batch_probability: float = 0.5  # per delivery round: queue every due message, then work
    # disk
    snapshot_every_txns: int = 25
    snapshot_ticks_max: int = 0  # a snapshot is written in the background for up to this many ticks (0: at once)
    log_segment_bytes_max: int = 1 << 20  # small: the log rolls often, and purging drops whole segments
    log_reserve_bytes: int = 0  # the log's space reserved ahead (preAllocSize)
    turn_ops_max: int = 2_000  # ops a driver's turn applies before the engine leaves the rest to the next turn
    sync_in_background: bool = True  # fsyncs are slow: once it timed one, the shell never syncs inline (else: inline for one write alone)
    kernel_sync: bool = False  # the log's fdatasync is the kernel's AIO (else the disk thread's)
    torn_writes: bool = False  # a crash may keep part of an unsynced write
    reordered_writes: bool = False  # a crash may keep an unsynced write and lose one made before it
    disk_fault_probability: float = 0.0  # per tick: a server's disk fails its next write or fsync (EIO), or fills up
    bit_flip_probability: float = 0.0  # per tick: a bit of a server's log or snapshot flips (one damaged server at a time)
    # workload
    client_count: int = 3
    request_probability: float = 0.3  # per idle client per tick
    sync_probability: float = 0.1  # of a client's operations, how many are syncs
    request_timeout_ticks: int = 120
    reconfig_probability: float = 0.0  # of a client's writes, how many are reconfigs (super user)
    forge_probability: float = 0.0  # per tick: a forged vote, request or learner packet reaches a server
    client_hold_ticks: int = 4  # electionClientHoldMs, in ticks: idle clients held through an election (at most half the shortest session)

    @property
    def node_count(self) -> int:
        return self.voter_count + self.observer_count + self.spare_count

    def calm(self) -> SimOptions:
        """The liveness phase: no more faults of any kind."""
        return replace(
            self, break_probability=0.0, duplicate_probability=0.0, reorder_probability=0.0,
            partition_probability=0.0, crash_probability=0.0, clock_jump_probability=0.0,
            clock_stall_probability=0.0, forge_probability=0.0, disk_fault_probability=0.0, bit_flip_probability=0.0,
        )  # fmt: skip


ROLLOVER_SHARE = 0.15  # seeds whose epochs have few zxid counters, so leaders step down for new ones
STORAGE_SHARE = 0.3  # seeds with the storage nemesis: torn and reordered unsynced writes, EIO and ENOSPC


def _maybe(rng: random.Random, p_on: float, high: float) -> float:
    """A fault probability: off for part of the seeds, else uniform in (0, high]."""
    return rng.uniform(0.0, high) if rng.random() < p_on else 0.0


def swarm(rng: random.Random, seed: int, reconfig_share: float = 0.0, forge_share: float = 0.0) -> SimOptions:
    """``reconfig_share``: the share of seeds whose clients reconfigure (spares, a reconfig
    probability); off by default until the seeds it finds are fixed (docs/reliability.md).
    ``forge_share``: the share of seeds with the forging nemesis (votes, memberships,
    forwarded writes and learner packets from servers that are no members, and stale or
    impossible memberships in members' names)."""
    voter_count = rng.choice((1, 3, 3, 3, 5, 5))
    observer_count = 1 if rng.random() < 0.2 else 0
    delay_max = rng.randint(1, 4)
    finalize_wait = rng.randint(1, 6)
    # Timeouts stay sane against the delays, as a deployment's do (ticks of seconds,
    # latencies of milliseconds): a ping round trip fits in syncLimit, a whole sync in initLimit.
    ping_interval = rng.randint(2, 8)
    sync_limit = ping_interval + 3 * delay_max + rng.randint(4, 30)
    options = SimOptions(
        seed=seed,
        voter_count=voter_count,
        observer_count=observer_count,
        init_limit_ticks=sync_limit + 8 * delay_max + 2 * finalize_wait + rng.randint(0, 30),
        sync_limit_ticks=sync_limit,
        ping_interval_ticks=ping_interval,
        finalize_wait_ticks=finalize_wait,
        notify_interval_ticks_min=rng.randint(2, 5),
        notify_interval_ticks_max=rng.randint(8, 40),
        commit_log_count=rng.choice((2, 5, 10, 50, 500)),
        delay_ticks_min=rng.randint(1, delay_max),
        delay_ticks_max=delay_max,
        break_probability=_maybe(rng, 0.6, 0.01),
        break_detect_ticks_max=rng.choice((0, 0, 5, 30)),
        duplicate_probability=_maybe(rng, 0.2, 0.01),
        reorder_probability=_maybe(rng, 0.2, 0.01),
        partition_probability=_maybe(rng, 0.6, 0.02),
        partition_symmetric_probability=rng.random(),
        partition_ticks_max=rng.randint(10, 150),
        crash_probability=_maybe(rng, 0.7, 0.02),
        crash_in_ready_probability=rng.random(),
        restart_ticks_max=rng.randint(1, 120),
        clock_jump_probability=_maybe(rng, 0.4, 0.01),
        clock_jump_ticks_max=rng.randint(5, 3 * sync_limit),
        clock_stall_probability=_maybe(rng, 0.3, 0.01),
        batch_probability=rng.choice((0.0, 0.5, 0.9, 1.0)),
        snapshot_every_txns=rng.choice((3, 10, 40, 1000)),
        log_segment_bytes_max=rng.choice((256, 4096, 1 << 20)),
        client_count=rng.randint(1, 5),
        request_probability=rng.uniform(0.05, 0.6),
        sync_probability=rng.uniform(0.0, 0.2),
        **_reconfig_options(rng, reconfig_share),  # drawn after the rest: the seeds from before reconfig keep their options
    )
    # drawn last, so every seed from before keeps the options it had
    options = replace(options, snapshot_ticks_max=rng.choice((0, 0, 3, 30)))
    forging = rng.random() < forge_share
    if forging:
        options = replace(options, forge_probability=rng.uniform(0.005, 0.05))
    if rng.random() < ROLLOVER_SHARE:  # drawn after the rest, as above
        options = replace(options, zxid_counter_last=rng.randint(3, 80))
    options = replace(options, sync_in_background=rng.random() < 0.5, log_reserve_bytes=rng.choice((0, 64, 4096)))
    if rng.random() < STORAGE_SHARE:
        options = replace(options, torn_writes=rng.random() < 0.7, reordered_writes=rng.random() < 0.5,
                          disk_fault_probability=_maybe(rng, 0.7, 0.01), bit_flip_probability=_maybe(rng, 0.5, 0.05))  # fmt: skip
    options = replace(options, turn_ops_max=rng.choice((2_000, 2_000, 1, 3)))  # last, as above; small: Readys finished over many turns
    options = replace(options, kernel_sync=rng.random() < 0.5)  # last, as above
    return replace(options, client_hold_ticks=rng.choice((0, 1, 4)))  # last, as above


def _reconfig_options(rng: random.Random, share: float) -> dict[str, Any]:
    if rng.random() >= share:
        return {}
    return {"spare_count": rng.choice((0, 1, 2)), "reconfig_probability": rng.uniform(0.01, 0.1)}
