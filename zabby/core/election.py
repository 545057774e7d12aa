"""Fast leader election (ZooKeeper's FastLeaderElection), as a pure state machine.

Theory of operation: a LOOKING server proposes a vote ``(leader, zxid, epoch)`` and sends it
to every voter, tagged with its election epoch (the logical clock).  On each notification:

* from a LOOKING server with a higher election epoch: adopt that epoch, forget the votes of
  the old one, and propose the better of the sender's vote and our own first vote;
* with the same election epoch: switch to the sender's vote if it wins the total order
  ``epoch, then zxid, then sid``;
* lower election epoch: ignored (the caller answers so the sender catches up);
* from a server that is FOLLOWING or LEADING: remember it outside the election; a quorum of
  such votes for one leader, confirmed by the leader itself saying LEADING, ends our election
  at once (joining a working ensemble; the quorum of the memberships our log holds, not of
  one a vote only hinted at).

When a quorum of LOOKING votes in our election epoch equals our proposal, we wait
``finalize_wait_ticks`` for a better one; if none comes, the vote decides the role.  Only
voters can win; observers look for the leader the same way but their votes do not count.
"""

from __future__ import annotations

from dataclasses import dataclass

from zabby.core.messages import Notification
from zabby.core.quorum import Majority, Quorums
from zabby.core.types import ServerState


@dataclass(frozen=True, slots=True)
class Vote:
    leader: int
    zxid: int
    epoch: int

    def beats(self, other: Vote) -> bool:
        return (self.epoch, self.zxid, self.leader) > (other.epoch, other.zxid, other.leader)


class Election:
    def __init__(self, sid: int, quorum: Majority | Quorums, logical_clock: int, own: Vote, finalize_wait_ticks: int,
                 candidates: frozenset[int] | None = None, join_quorum: Majority | Quorums | None = None, *,
                 abstain: bool = False) -> None:  # fmt: skip
        """``candidates``: who may be elected (default: every voter).  While a reconfig is
        proposed, only the committed membership's voters: a server only the proposed one
        names is no candidate for a voter that has not logged the proposal, and votes for
        it would never make a quorum of both.  ``join_quorum``: whose word lets us join a
        leader already established (default: ``quorum``); the caller leaves out a membership
        it only heard of in a vote, which it may itself be the only voter of.  ``abstain``:
        vote for nobody whatever we hear (a server repairing its storage), so our vote is
        in no one's quorum; we follow a leader the others established."""
        self.sid = sid
        self.quorum = quorum
        self.join_quorum = quorum if join_quorum is None else join_quorum
        self.candidates = frozenset() if abstain else quorum.voters if candidates is None else candidates
        self.logical_clock = logical_clock
        self.own = own
        self.proposal = own if sid in self.candidates else Vote(-1, -1, -1)
        self.received: dict[int, Vote] = {}
        self.outside: dict[int, tuple[Vote, int, str]] = {}
        self.finalize_wait_ticks = finalize_wait_ticks
        self.finalize_at: int | None = None
        self.joined = False  # decided by joining a leader already established
        if sid in quorum.voters:
            self.received[sid] = self.proposal

    def notification(self, state: ServerState) -> Notification:
        vote = self.proposal
        return Notification(leader=vote.leader, zxid=vote.zxid, peer_epoch=vote.epoch,
                            election_epoch=self.logical_clock, state=state.value)  # fmt: skip

    def receive(self, sender: int, n: Notification, now: int) -> tuple[bool, Vote | None]:
        """Take one notification; return (our proposal changed, decided vote or None)."""
        vote = Vote(n.leader, n.zxid, n.peer_epoch)
        if n.state == ServerState.LOOKING.value:
            changed = self._receive_looking(sender, vote, n.election_epoch)
            return changed, self._check_decided(now)
        self.outside[sender] = (vote, n.election_epoch, n.state)
        if n.election_epoch == self.logical_clock and sender in self.quorum.voters:
            self.received[sender] = vote
        return False, self._join_established(vote, n.election_epoch)

    def _receive_looking(self, sender: int, vote: Vote, election_epoch: int) -> bool:
        valid = vote.leader in self.candidates
        if not valid and sender not in self.quorum.voters:
            return False
        changed = False
        if election_epoch > self.logical_clock:
            # A voter's later election, even when it proposes nobody we could elect (a server
            # a reconfig adds votes for nobody until it learns the membership that has it).
            self.logical_clock = election_epoch
            self.received = {}
            base = self.own if self.sid in self.candidates else Vote(-1, -1, -1)
            self.proposal = vote if valid and vote.beats(base) else base
            changed = True
        elif election_epoch < self.logical_clock:
            return False
        elif valid and vote.beats(self.proposal):
            self.proposal = vote
            changed = True
        if changed:
            self.finalize_at = None
            if self.sid in self.quorum.voters:
                self.received[self.sid] = self.proposal
        if valid and sender in self.quorum.voters:
            self.received[sender] = vote
        return changed

    def _check_decided(self, now: int) -> Vote | None:
        agreeing = [sid for sid, vote in self.received.items() if vote == self.proposal]
        if self.proposal.leader < 0 or not self.quorum.has_quorum(agreeing):
            return None
        if self.finalize_at is None:
            self.finalize_at = now + self.finalize_wait_ticks
        return None

    def tick(self, now: int) -> Vote | None:
        if self.finalize_at is not None and now >= self.finalize_at:
            return self.proposal
        return None

    def _join_established(self, vote: Vote, election_epoch: int) -> Vote | None:
        """A quorum of servers outside the election agree on a leader that says it leads."""
        same = [sid for sid, (v, _, _) in self.outside.items() if (v.leader, v.epoch) == (vote.leader, vote.epoch)]
        if vote.leader == self.sid or not self.join_quorum.has_quorum(same):
            return None
        confirmed = self.outside.get(vote.leader)
        if confirmed is None or confirmed[2] != ServerState.LEADING.value:
            return None
        self.logical_clock = max(self.logical_clock, election_epoch)
        self.joined = True
        return vote
