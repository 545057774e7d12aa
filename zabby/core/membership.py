"""The memberships a server counts by (dynamic reconfiguration, as ZooKeeper 3.5+).

Theory of operation: ``committed`` is the membership in force; a logged RECONFIG txn makes
``proposed`` the membership it names, and until it commits, every decision needs a quorum of
both (``Quorums``).  It commits like any txn (acked by a quorum of both); the commit
activates it everywhere.  A server that is not a voter of the committed membership may still
follow (its acks count where it votes), which is how a new server joins before the reconfig
that adds it.  A leader the new membership leaves out hands over: the COMMIT that activates
it names a designated leader, for whom every learner votes first in the election that
follows (``zabby.core.broadcast``).

``hinted`` is a membership a vote proposed, newer than any we log: it counts in the next
election only (a joiner learns that way that it votes).  ``disowned_at`` records the
committed version whose voters, as a peer knows them, leave us out: a joiner's zoo.cfg lists
itself beside the initial servers, all at version 0, before the reconfig that adds it.

Every change of a view recomputes ``quorum``, the conjunction of the views' majorities.
"""

from __future__ import annotations

from zabby.core.messages import Notification
from zabby.core.quorum import Quorums
from zabby.membership import Membership, MembershipError
from zabby.opcodes import OpCode
from zabby.tree.txns import Txn, zxid_epoch

_RECONFIG = OpCode.RECONFIG  # a global: every logged txn is compared with it (see zabby.opcodes)


class Memberships:
    """One server's views of the membership: committed, proposed (logged), hinted (voted)."""

    def __init__(self, sid: int, committed: Membership, proposed: Membership | None) -> None:
        self.sid = sid
        self.committed = committed
        self.proposed = proposed
        self.hinted: Membership | None = None  # a vote's proposed membership, for the next election only
        self.disowned_at: int | None = None  # the committed version whose voters, as peers know them, leave us out
        self.disowned_by_sids: frozenset[int] = frozenset()  # that version's servers, as they know it
        self._views_changed()

    # ----------------------------------------------------------------- views
    def views(self, *, hinted: bool = True, proposed: bool = True) -> list[Membership]:
        """The committed membership first, then (unless ``proposed`` is False) the proposed
        and (unless ``hinted`` is False: our log's alone) the hinted one where there are."""
        return [m for m in (self.committed, self.proposed if proposed else None, self.hinted if hinted else None) if m is not None]

    def quorums(self, *, hinted: bool = True, proposed: bool = True) -> Quorums:
        return Quorums(m.voters for m in self.views(hinted=hinted, proposed=proposed))

    def newest_version(self) -> int:
        return max(m.version for m in self.views())

    def peers(self) -> frozenset[int]:
        """The servers to vote with: every member of the committed, proposed and hinted memberships."""
        return frozenset().union(*(m.sids for m in self.views())) - {self.sid}

    def is_member(self, sid: int) -> bool:
        """Named by the committed membership or the proposed one (``member_sids``): a server
        that is neither may sync as a non-voting learner (a joiner does, before its reconfig),
        but what it forwards is not taken, and its acks and votes count for nothing."""
        return sid in self.member_sids

    def counted_as_member(self) -> bool:
        """Our own view names us, and no peer's copy of the same version leaves us out (kept
        as ``counted``: asked for every client write)."""
        if not self.is_member(self.sid):
            return False
        return self.disowned_at != self.committed.version or self.sid in self.disowned_by_sids

    def _views_changed(self) -> None:
        """What follows from the views, made again whenever one changes."""
        self.quorum = self.quorums()
        self.member_sids = self.committed.sids | self.proposed.sids if self.proposed is not None else self.committed.sids
        self.counted = self.counted_as_member()  # after member_sids: it asks is_member

    def candidates(self) -> frozenset[int]:
        """Whom we may elect: the committed voters, without us if a peer's copy of the same
        version leaves us out (a joiner's zoo.cfg lists itself beside the initial servers,
        both at version 0: voting for itself, it would deny the others the quorum of a
        proposed membership that counts it)."""
        if self.disowned_at == self.committed.version:
            return self.committed.voters - {self.sid}
        return self.committed.voters

    def observes(self) -> bool:
        """Learn as an observer: one in our view and no voter there.  A server no membership
        names follows (a joining one, or one a reconfig removed): where a leader counts it
        as a voter, its acks count."""
        observers = self.committed.observers | (self.proposed.observers if self.proposed else frozenset())
        return self.sid in observers and self.sid not in self.quorum.voters

    # ----------------------------------------------------------------- the log's memberships
    def logged(self, txns: list[Txn]) -> None:
        """A logged RECONFIG txn: its membership is proposed from now on."""
        for txn in txns:
            if txn.type == _RECONFIG:
                self.proposed = Membership.parse(txn.body[0])
                self._views_changed()

    def truncated(self, zxid: int) -> None:
        """The log was cut after ``zxid``: a RECONFIG txn cut with it never commits."""
        if self.proposed is not None and self.proposed.version > zxid:
            self.proposed = None
            self._views_changed()

    def activate(self, commit_point: int) -> bool:
        """The proposed membership is committed once the commit point reaches its txn;
        True if it was activated now."""
        if self.proposed is None or commit_point < self.proposed.version:
            return False
        self.committed, self.proposed = self.proposed, None
        self._views_changed()
        return True

    def adopt(self, text: str) -> bool:
        """A committed membership newer than ours (a leader's at NEWLEADER, or a vote's):
        True if adopted."""
        if not text:
            return False
        membership = Membership.parse(text)
        if membership.version <= self.committed.version:
            return False
        self.committed = membership
        if self.proposed is not None and self.proposed.version <= membership.version:
            self.proposed = None
        self._views_changed()
        return True

    def synced_proposed(self, text: str) -> None:
        """At NEWLEADER our log is the leader's: so is the proposed membership (its RECONFIG
        may be in the history just synced, maybe only inside a SNAP's tree), or none."""
        proposed = Membership.parse(text) if text else None
        self.proposed = proposed if proposed is not None and proposed.version > self.committed.version else None
        self._views_changed()

    # ----------------------------------------------------------------- what votes tell
    def disowned_by(self, text: str) -> bool:
        """A peer's committed membership of our version, without us as a voter: True the
        first time (we vote again, for others only)."""
        if not text or self.disowned_at == self.committed.version or self.sid not in self.committed.voters:
            return False
        theirs = Membership.parse(text)
        if theirs.version != self.committed.version or self.sid in theirs.voters:
            return False
        self.disowned_at = theirs.version
        self.disowned_by_sids = theirs.sids
        self._views_changed()
        return True

    def adopt_hint(self, text: str) -> bool:
        """A vote's proposed membership, newer than what we know: our next election needs a
        quorum of it too, and it may make us a voter (then we follow rather than observe).
        Only a log makes a membership proposed, so the hint goes once the election is over.
        True if adopted."""
        if not text:
            return False
        hinted = Membership.parse(text)
        if hinted.version <= self.newest_version():
            return False
        self.hinted = hinted
        self._views_changed()
        return True

    def drop_hint(self) -> None:
        if self.hinted is not None:
            self.hinted = None
            self._views_changed()

    def speaks_for(self, sender: int, note: Notification) -> bool:
        """Whether a vote's memberships may change ours: only a member's (of a membership we
        hold, committed, proposed or hinted: the one a joiner joins) can, and only memberships it
        could have logged, versions no later than the last zxid it says it logged, text that parses.
        Anyone else's vote is answered and changes nothing (one forged vote from server 99 made
        it the ensemble's only member, on disk)."""
        if not any(sender in view.sids for view in self.views()):
            return False
        try:
            versions = [Membership.parse(text).version for text in (note.config, note.proposed) if text]
        except MembershipError:
            return False
        return all(version <= note.logged for version in versions)

    def abandoned_for(self, leading: Notification) -> bool:
        """Whether a leader's own notification shows that the membership our log proposes
        never committed and never will: that leader took over on a later epoch, and neither
        its committed membership nor the one it proposes is ours (so its log has not got it,
        and its history holds every txn committed before its epoch).  Joining it then takes
        a quorum of the committed membership alone: a quorum of the dead proposal too may
        never come (simulator seed 722227, with reconfigs: the two servers that logged a
        reconfig adding the second of them looked for ever beside the leader of the next
        epoch).  Its sync truncates the proposal from our log."""
        proposed = self.proposed
        if proposed is None or leading.peer_epoch <= zxid_epoch(proposed.version):
            return False
        committed = Membership.parse(leading.config).version if leading.config else 0
        theirs = Membership.parse(leading.proposed).version if leading.proposed else None
        return committed < proposed.version and theirs != proposed.version
