"""Ready: what the shell must do for the core, in this order (etcd raft's contract).

0. send ``early_messages`` (the leader's PROPOSAL, COMMIT, INFORM and PING, a learner's
   forwarded writes: they promise nothing about the sender's disk, so the leader's fsync runs
   in parallel with its followers', and a write reaches the leader without waiting for one);
1. persist ``accepted_epoch`` (atomically, fsynced) when not None;
2. ``truncate_to``: cut the log after that zxid (and reload the tree to it if the tree is ahead);
3. append ``append`` to the log, fsync if ``must_sync``;
4. persist ``current_epoch`` when not None: only now, once the log holds what this Ready
   appended.  A learner takes the new epoch at NEWLEADER, often in the same Ready as the
   DIFF it logged just before; with the epoch on disk and the DIFF lost to a crash, it could
   win the next election on that epoch with a log missing committed txns, and truncate them
   from the others (ZooKeeper's ZOOKEEPER-4643; the simulator's seed 41);
5. apply ``committed`` to the tree in order (and answer the clients waiting for them); a
   ``Snap`` among the messages carries an image of the tree taken during this step, exactly
   when the tree is at the Snap's zxid.  When an earlier Ready logged every committed txn
   (none is in ``append``) and this one writes no epoch and cuts nothing, this step may come
   before steps 1-4: under pipelined load those txns are then answered without waiting for
   the fsync of the ones logged after them;
6. send ``messages`` in order, each ``Snap`` followed by its image;
7. close the links in ``drop_links``; act on ``requests``, ``touched_sessions``, ``sync_replies``
   (the requests and touched sessions ask for no effect: a shell may act on them as soon as
   steps 1-4 are done, and ``zabby.engine`` does, so that a forwarded write is prepared
   while the log syncs);
8. call ``peer.advance(ready)``.

ACKs and the leader's LOGGED are among the messages, so they leave only after what they tell of is on disk.
A shell may carry out steps 5-8 later, once a background fsync covers the Ready's appends,
and take the next Readys meanwhile (``zabby.engine``, for a Ready that only appends,
commits and sends): it applies only what is durable in its own log, and keeps the order.
Until a Ready is advanced, the core keeps later early messages to the servers that Ready
has regular messages for behind them (regular too), so each link keeps its order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from zabby.core.messages import Message, Request, Sync
from zabby.core.types import ServerState, ZabPhase
from zabby.tree.txns import Txn


class SoftState(NamedTuple):
    """What the shell sees of the core's role; a tuple because it is built and compared after
    every input (cheaper than a frozen dataclass, and as immutable)."""

    state: ServerState
    phase: ZabPhase
    leader: int | None
    epoch: int
    serving: bool


@dataclass(slots=True)
class Ready:
    soft_state: SoftState
    accepted_epoch: int | None = None
    current_epoch: int | None = None
    truncate_to: int | None = None
    append: list[Txn] = field(default_factory=list)
    must_sync: bool = False
    committed: list[Txn] = field(default_factory=list)
    messages: list[tuple[int, Message]] = field(default_factory=list)
    early_messages: list[tuple[int, Message]] = field(default_factory=list)
    drop_links: list[int] = field(default_factory=list)
    requests: list[tuple[int, Request]] = field(default_factory=list)
    touched_sessions: list[int] = field(default_factory=list)
    sync_replies: list[Sync] = field(default_factory=list)

    def asks_for_effects(self) -> bool:
        """Whether the shell has anything to send, store, apply or drop (steps 0-7 but acting on
        ``requests``, ``touched_sessions`` and ``sync_replies``, which need no effect)."""
        return bool(self.early_messages) or self.asks_beyond_early_messages()

    def asks_beyond_early_messages(self) -> bool:
        """``asks_for_effects`` with step 0 left out: whether anything is to be stored, applied,
        sent after the persist or dropped."""
        return bool(
            self.accepted_epoch is not None or self.current_epoch is not None or self.truncate_to is not None
            or self.append or self.must_sync or self.committed or self.messages or self.drop_links
        )  # fmt: skip

    def is_empty(self) -> bool:
        return not (self.asks_for_effects() or self.requests or self.touched_sessions or self.sync_replies)
