"""ZooKeeper's peer protocol spoken by zabby's core: each link's translation between the core's
messages (``zabby.core.messages``) and ZooKeeper 3.8's packets (``zabby.wire.zk_quorum``), sans-I/O.

Theory of operation: the core runs Zab as ZooKeeper does, with the same phases and the same
packets, but it batches where ZooKeeper sends one packet per txn, and keeps some state apart
that ZooKeeper sends along.  A link object holds what the translation needs of its stream:

* ``LearnerLink`` (this server learns from a leader speaking ZooKeeper's protocol).  A cumulative
  ACK of the core becomes one ACK per PROPOSAL it covers, committed or not (ZooKeeper's leader
  counts acks per proposal, and drops a learner that leaves one unacked for syncLimit), and the
  NEWLEADER ack also acks the sync's proposals (a ZooKeeper learner acks them once it logged
  them); a PING is answered with the touched
  sessions and their timeouts; a sync is forwarded as a REQUEST and the leader's SYNC answers
  the oldest one; REVALIDATE asks the leader to make this server a session's owner.
  A SNAP's tree is *fuzzy*: ZooKeeper's leader serializes it while it goes on applying, and
  the PROPOSALs and COMMITs that follow it may be in it already.  The link replays them onto
  the tree as ZooKeeper's own learner does (``zabby.tree.zk_replay``'s rules) until NEWLEADER,
  and only then hands the core a SNAP at the last zxid it committed, the tree's records, and
  the proposals not committed yet: from there on the stream is exact.
* ``LeaderLink`` (this server leads; the peer learns, in ZooKeeper's protocol).  The learner's
  id comes in its FOLLOWERINFO.  A core PROPOSAL of several txns becomes a PROPOSAL each; a
  cumulative COMMIT becomes a COMMIT for each proposal sent on this link and not committed
  yet (a ZooKeeper learner exits on a COMMIT that is not for its oldest pending proposal);
  an observer gets the sync's txns as PROPOSAL and COMMIT pairs only once they are committed
  (ZooKeeper's observer fails its sync on a proposal left uncommitted at UPTODATE) and
  INFORMs afterwards; PINGs start at UPTODATE (a ZooKeeper learner exits on one before its
  sync and answers none during it), and each answer is matched with the round of the PING it
  answers (``zabby.core.rounds``), the second ACK of NEWLEADER (sent after UPTODATE) dropped,
  and a COMMIT due between NEWLEADER and UPTODATE sent right after UPTODATE.  The learner's
  own writes and syncs are answered in the order it forwarded them: a ZooKeeper learner
  matches each COMMIT (or INFORM) and SYNC against the oldest write or sync it forwarded
  (CommitProcessor's queuedWriteRequests, Learner's pendingSyncs), and takes any other for
  another server's, answering its client out of order or never.  zabby's leader answers a
  sync once a round of PINGs confirmed its leadership (``zabby.core.rounds``), so the writes
  the learner forwarded after the sync may commit first, and the writes it forwarded just
  before may not be proposed yet when the sync arrives: the link holds those COMMITs back
  behind the SYNC, or the SYNC behind those COMMITs.

Votes go through ``vote_to_zk`` and ``vote_from_zk``; a ZooKeeper vote's membership text is
not zabby's, so it is not passed on (zabby does not follow a reconfig made by ZooKeeper).
Anything a ZooKeeper server would refuse as out of order raises ``RemoteProtocolError``:
the shell drops the link and the core resynchronises, as it does for its own protocol.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from zabby.core.messages import (
    Ack, AckEpoch, Commit, Diff, FollowerInfo, Inform, LeaderInfo, Message, NewLeader, Notification, Ping, Proposal,
    Request, Revalidate, Revalidated, Snap, SnapChunk, Sync, Trunc, UpToDate,
)  # fmt: skip
from zabby.core.types import ServerState
from zabby.errors import RemoteProtocolError
from zabby.opcodes import OpCode
from zabby.tree.txns import Txn, make_zxid, zxid_counter, zxid_epoch
from zabby.tree.zk_replay import ZkTree
from zabby.wire import jute
from zabby.wire.jute import Id
from zabby.wire.zk_quorum import (
    PACKET_BYTES_MAX, PROTOCOL_VERSION, SNAP_SIGNATURE, ElectionState, LearnerInfo, PacketReader, PacketType,
    QuorumPacket, Vote, decode_request, decode_revalidate, decode_revalidated, decode_touches, decode_txn, encode_request,
    encode_revalidate, encode_revalidated, encode_touches, encode_txn, int_bytes, int_data, learner_info, packet,
    request_body, request_from_body, txn_from_zk,
)  # fmt: skip
from zabby.wire.zk_snapshot import TreeStream, ZkTreeError, session_password
from zabby.wire.zk_txn import ZkTxn, ZkTxnError

SNAP_BYTES_MAX = 64 * 2**30  # a SNAP's tree: ZooKeeper sets no limit; this only stops a stream that never ends
SNAP_CHUNK_RECORDS = 4096  # records per SnapChunk handed to the core
SUPER_ID = ("super", "")  # the id ZooKeeper gives a session that proved its superDigest; its leader trusts it

_STATES = {ServerState.LOOKING.value: ElectionState.LOOKING, ServerState.FOLLOWING.value: ElectionState.FOLLOWING,
           ServerState.LEADING.value: ElectionState.LEADING, ServerState.OBSERVING.value: ElectionState.OBSERVING}  # fmt: skip
_STATE_NAMES = {int(code): name for name, code in _STATES.items()}


# ----------------------------------------------------------------------------- votes
def vote_to_zk(note: Notification, config: bytes) -> Vote:
    """A core vote as ZooKeeper's FastLeaderElection sends it, with ``config``: the membership
    as ZooKeeper writes it (``zk_quorum.config_text``), which ZooKeeper parses from every vote."""
    return Vote(int(_STATES[note.state]), note.leader, note.zxid, note.election_epoch, note.peer_epoch, config=config)


def vote_from_zk(vote: Vote) -> Notification:
    """A ZooKeeper vote for the core.

    Raises:
        RemoteProtocolError: a state no server is in.
    """
    state = _STATE_NAMES.get(vote.state)
    if state is None:
        raise RemoteProtocolError(f"a vote in state {vote.state}")
    return Notification(leader=vote.leader, zxid=vote.zxid, peer_epoch=vote.peer_epoch, election_epoch=vote.election_epoch, state=state)


def _txn(data: bytes | None) -> tuple[ZkTxn, Txn]:
    zk = decode_txn(data)
    try:
        return zk, txn_from_zk(zk)
    except ZkTxnError as exc:
        raise RemoteProtocolError(str(exc)) from None


# ----------------------------------------------------------------------------- learner side
class _FuzzySnap:
    """A SNAP's tree and the stream after it, until NEWLEADER (see the module's docstring)."""

    def __init__(self, stream: TreeStream, zxid: int) -> None:
        self.tree = ZkTree(stream.nodes, stream.sessions, zxid, None, stream.owned)
        self.proposed: deque[ZkTxn] = deque()  # after the tree, not committed yet

    def propose(self, zk: ZkTxn) -> None:
        self.proposed.append(zk)

    def commit(self, zxid: int) -> None:
        while self.proposed and self.proposed[0].zxid <= zxid:
            self.apply(self.proposed.popleft())

    def apply(self, zk: ZkTxn) -> None:
        """A committed txn, replayed as ZooKeeper's learner replays it onto a fuzzy tree."""
        self.tree.apply(zk)

    def messages(self) -> Iterator[Message]:
        """The SNAP the core is given, its records in chunks, and the proposals after it."""
        tree = self.tree
        nodes = list(tree.reachable())
        sessions = sorted(tree.sessions.items())
        yield Snap(zxid=tree.last_zxid)
        records: list[Any] = [("tree", tree.last_zxid, len(sessions), len(nodes))]
        records += [("session", session_id, timeout_ms, session_password(session_id)) for session_id, timeout_ms in sessions]
        records += [tuple(node) for node in nodes]
        for start in range(0, len(records), SNAP_CHUNK_RECORDS):
            chunk = tuple(records[start : start + SNAP_CHUNK_RECORDS])
            yield SnapChunk(chunk, start + SNAP_CHUNK_RECORDS >= len(records))
        if self.proposed:
            yield Proposal(txns=tuple(_zabby(zk) for zk in self.proposed))


def _zabby(zk: ZkTxn) -> Txn:
    try:
        return txn_from_zk(zk)
    except ZkTxnError as exc:
        raise RemoteProtocolError(str(exc)) from None


class LearnerLink:
    """This server's link to its leader, in ZooKeeper's protocol (see the module's docstring).

    Args:
        sid: this server's id (in FOLLOWERINFO).
        session_timeout: a session's timeout, for the touches a PING answer reports (None: not
            known here, left out).
        carried: told the digest each PROPOSAL or INFORM carried (None: none), by zxid, as it
            is read (``zabby.engine.zk_digests``: checked when the txn is applied).
    """

    def __init__(self, sid: int, session_timeout: Callable[[int], int | None], packet_bytes_max: int = PACKET_BYTES_MAX,
                 snap_bytes_max: int = SNAP_BYTES_MAX,
                 carried: Callable[[int, tuple[int, int] | None], None] = lambda zxid, digest: None) -> None:  # fmt: skip
        self.sid = sid
        self.session_timeout = session_timeout
        self.carried = carried
        self.snap_bytes_max = snap_bytes_max
        self.reader = PacketReader(packet_bytes_max)
        self._tree: TreeStream | None = None  # a SNAP's tree arriving
        self._snap_zxid = 0
        self._fuzzy: _FuzzySnap | None = None  # the tree in, NEWLEADER not yet
        self._unacked: deque[int] = deque()  # proposals received and not acked (committed or not: the leader waits for each)
        self._syncs: deque[Sync] = deque()  # forwarded, not answered
        self._ping_zxid = 0

    @property
    def receiving_tree(self) -> bool:
        """A SNAP's tree is arriving (the core hears nothing meanwhile: ``heard_from``)."""
        return self._tree is not None

    # ----------------------------------------------------------------- leader → us
    def receive(self, data: bytes) -> list[Message]:
        """The core's messages in what the leader sent.  Raises: RemoteProtocolError."""
        out: list[Message] = []
        pending = data
        while True:
            if self._tree is not None:
                try:
                    rest = self._tree.feed(pending)
                except ZkTreeError as exc:
                    raise RemoteProtocolError(f"the SNAP's tree: {exc}") from None
                if rest is None:
                    return out
                self._fuzzy, self._tree, pending = _FuzzySnap(self._tree, self._snap_zxid), None, rest
            self.reader.feed(pending)
            pending = b""
            while self._tree is None and (packet_ := self.reader.next_packet()) is not None:
                self._packet(packet_, out)
            if self._tree is None:
                return out
            pending = self.reader.take_rest()

    def _packet(self, p: QuorumPacket, out: list[Message]) -> None:  # noqa: C901 -- one branch per packet type
        kind = p.type
        if kind == PacketType.PROPOSAL:
            zk, txn = _txn(p.data)
            self.carried(zk.zxid, zk.digest)
            if self._fuzzy is not None:
                self._fuzzy.propose(zk)
                return
            self._unacked.append(txn.zxid)
            out.append(Proposal(txns=(txn,)))
        elif kind == PacketType.COMMIT:
            self._commit(p.zxid, out)
        elif kind == PacketType.PING:
            self._ping_zxid = p.zxid
            out.append(Ping())
        elif kind == PacketType.INFORM:
            zk, txn = _txn(p.data)
            self.carried(zk.zxid, zk.digest)
            if self._fuzzy is not None:
                self._fuzzy.apply(zk)
            else:
                out.append(Inform(txns=(txn,)))
        elif kind == PacketType.SYNC:
            if self._syncs:
                out.append(self._syncs.popleft())
        elif kind == PacketType.REVALIDATE:
            session_id, valid = decode_revalidated(p.data)
            out.append(Revalidated(session_id=session_id, valid=valid))
        elif kind == PacketType.LEADERINFO:
            out.append(LeaderInfo(epoch=zxid_epoch(p.zxid)))
        elif kind in (PacketType.DIFF, PacketType.TRUNC):
            self._unacked.clear()
            out.append(Diff(zxid=p.zxid) if kind == PacketType.DIFF else Trunc(zxid=p.zxid))
        elif kind == PacketType.SNAP:
            self._unacked.clear()
            self._tree, self._snap_zxid = TreeStream(self.snap_bytes_max, SNAP_SIGNATURE), p.zxid
        elif kind == PacketType.NEWLEADER:
            self._new_leader(p.zxid, out)
        elif kind == PacketType.UPTODATE:
            out.append(UpToDate())
        elif kind in (PacketType.COMMITANDACTIVATE, PacketType.INFORMANDACTIVATE):
            raise RemoteProtocolError("the leader activates a reconfig: zabby does not follow a ZooKeeper leader through one")
        else:
            raise RemoteProtocolError(f"a {_name(kind)} packet from the leader")

    def _commit(self, zxid: int, out: list[Message]) -> None:
        if self._fuzzy is not None:
            self._fuzzy.commit(zxid)
            return
        out.append(Commit(zxid=zxid))

    def _new_leader(self, zxid: int, out: list[Message]) -> None:
        fuzzy, self._fuzzy = self._fuzzy, None
        if fuzzy is not None:
            for message in fuzzy.messages():
                if isinstance(message, Proposal):
                    self._unacked.extend(txn.zxid for txn in message.txns)
                out.append(message)
        out.append(NewLeader(zxid=zxid))

    # ----------------------------------------------------------------- us → leader
    def send(self, message: Message) -> bytes:
        """The packets for one core message (b"": none goes to a ZooKeeper leader).

        Raises:
            ValueError: a forwarded write that cannot be written as ZooKeeper's request.
        """
        if isinstance(message, Ack):
            return self._acks(message.zxid)
        if isinstance(message, Request):
            body = encode_request(message.session_id, message.cxid, message.op, request_body(message.op, message.args))
            auth = [Id(scheme, ident) for scheme, ident in message.auth_ids]
            if message.superuser:
                auth.append(Id(*SUPER_ID))  # as ZooKeeper's learner adds it for a client that proved superDigest
            return packet(PacketType.REQUEST, -1, body, auth or None)
        if isinstance(message, Ping):
            touches = [(s, t) for s in message.sessions if (t := self.session_timeout(s)) is not None]
            return packet(PacketType.PING, self._ping_zxid, encode_touches(touches))
        if isinstance(message, Sync):
            self._syncs.append(message)
            body = encode_request(message.session_id, message.cxid, OpCode.SYNC, jute.SyncRequest("/").encode())
            return packet(PacketType.REQUEST, -1, body)
        if isinstance(message, Revalidate):
            return packet(PacketType.REVALIDATE, -1, encode_revalidate(message.session_id, message.timeout_ms))
        if isinstance(message, FollowerInfo):
            kind = PacketType.OBSERVERINFO if message.observer else PacketType.FOLLOWERINFO
            info = LearnerInfo(self.sid, PROTOCOL_VERSION, message.config_version).encode()
            return packet(kind, make_zxid(message.accepted_epoch, 0), info)
        if isinstance(message, AckEpoch):
            return packet(PacketType.ACKEPOCH, message.last_zxid, int_bytes(message.current_epoch))
        return b""

    def _acks(self, zxid: int) -> bytes:
        """One ACK per proposal the core's ACK covers; NEWLEADER's also covers the sync's."""
        unacked, acks = self._unacked, []
        if zxid_counter(zxid) == 0:
            acks.append(packet(PacketType.ACK, zxid))
            zxid = unacked[-1] if unacked else 0
        while unacked and unacked[0] <= zxid:
            acks.append(packet(PacketType.ACK, unacked.popleft()))
        return b"".join(acks)


# ----------------------------------------------------------------------------- leader side
Forwarded = tuple[bool, int, int]  # a learner's forwarded sync (True) or write (False): its session and cxid


class LeaderLink:
    """A ZooKeeper learner's link to this server, which leads (see the module's docstring).
    ``sid`` is None until its FOLLOWERINFO or OBSERVERINFO came."""

    def __init__(self, packet_bytes_max: int = PACKET_BYTES_MAX, digest_of: Callable[[int], tuple[int, int] | None] = lambda zxid: None) -> None:
        """``digest_of``: ZooKeeper's tree digest after a txn (``zabby.engine.zk_digests``), which
        its learners check; None: the txn goes without one, and is not checked."""
        self.digest_of = digest_of
        self.sid: int | None = None
        self.observer = False
        self.reader = PacketReader(packet_bytes_max)
        self._sent: deque[int] = deque()  # proposals sent, not committed on this link
        self._held: list[Txn] = []  # an observer's sync txns, sent once committed
        self._committed = 0  # the last zxid committed on this link
        self._last_zxid = 0  # the last zxid sent
        self._rounds: deque[int] = deque()  # the rounds of the pings not answered yet
        self._newleader_acked = False
        self._newleader_sent = False
        self._uptodate = False
        self._commits_after_uptodate: list[bytes] = []  # COMMITs that must wait for UPTODATE
        # the learner's forwarded writes and syncs not answered on this link, in its order: (a sync?, session, cxid)
        self._forwarded: deque[Forwarded] = deque()
        self._forwarded_count: dict[Forwarded, int] = {}  # how many times each is in _forwarded
        self._answers_of: dict[int, Forwarded] = {}  # zxid -> the forwarded write it answers (sent, not committed)
        self._commits_held: deque[tuple[bytes, Forwarded | None]] = deque()  # COMMIT and INFORM packets held back, in zxid order
        self._syncs_held: deque[Forwarded] = deque()  # SYNCs held back

    # ----------------------------------------------------------------- learner → us
    def receive(self, data: bytes) -> list[Message]:
        """The core's messages in what the learner sent.  Raises: RemoteProtocolError."""
        self.reader.feed(data)
        out: list[Message] = []
        while (p := self.reader.next_packet()) is not None:
            message = self._message(p)
            if message is not None:
                out.append(message)
        return out

    def _message(self, p: QuorumPacket) -> Message | None:  # noqa: C901 -- one branch per packet type
        kind = p.type
        if kind == PacketType.ACK:
            if zxid_counter(p.zxid) == 0:
                if self._newleader_acked:
                    return None  # the second ACK of the new epoch, after UPTODATE
                self._newleader_acked = True
            return Ack(zxid=p.zxid)
        if kind == PacketType.PING:
            touched = decode_touches(p.data)
            return Ping(sessions=tuple(session_id for session_id, _ in touched), round=self._rounds.popleft() if self._rounds else 0)
        if kind == PacketType.REQUEST:
            message = self._request(p)
            entry = (isinstance(message, Sync), message.session_id, message.cxid)
            self._forwarded.append(entry)
            self._forwarded_count[entry] = self._forwarded_count.get(entry, 0) + 1
            return message
        if kind == PacketType.REVALIDATE:
            session_id, timeout_ms = decode_revalidate(p.data)
            return Revalidate(session_id=session_id, timeout_ms=timeout_ms)
        if kind in (PacketType.FOLLOWERINFO, PacketType.OBSERVERINFO):
            if self.sid is not None:
                raise RemoteProtocolError(f"a second {_name(kind)} on the link of server {self.sid}")
            info = learner_info(p)
            self.sid, self.observer = info.server_id, kind == PacketType.OBSERVERINFO
            return FollowerInfo(accepted_epoch=zxid_epoch(p.zxid), last_zxid=0, observer=self.observer, config_version=info.config_version)
        if self.sid is None:
            raise RemoteProtocolError(f"a {_name(kind)} before the learner said who it is")
        if kind == PacketType.ACKEPOCH:
            epoch = int_data(p)  # -1: the learner had accepted this epoch before; its log's epoch is a floor of its own
            return AckEpoch(current_epoch=epoch if epoch >= 0 else zxid_epoch(p.zxid), last_zxid=p.zxid)
        raise RemoteProtocolError(f"a {_name(kind)} packet from a learner")

    @staticmethod
    def _request(p: QuorumPacket) -> Request | Sync:
        session_id, cxid, op, body = decode_request(p.data)
        if op == OpCode.SYNC:
            return Sync(session_id=session_id, cxid=cxid)
        try:
            args = request_from_body(session_id, op, body)
        except RemoteProtocolError:
            args = ()  # the leader's prep answers it with an ERROR txn, as ZooKeeper's would
        auth = tuple((i.scheme or "", i.id or "") for i in p.authinfo or ())
        return Request(session_id=session_id, cxid=cxid, op=op, args=args, auth_ids=auth)

    # ----------------------------------------------------------------- us → learner
    def send(self, message: Message) -> bytes:  # noqa: C901 -- one branch per message type
        """The packets for one core message (b"": none goes to a ZooKeeper learner)."""
        if isinstance(message, Proposal):
            return self._proposal(message.txns)
        if isinstance(message, Commit):
            return self._commit(message.zxid)
        if isinstance(message, Inform):
            return self._inform(message.txns)
        if isinstance(message, Ping):
            if not self._uptodate:
                return b""  # a ZooKeeper learner exits on a PING before its sync, and answers none until UPTODATE
            self._rounds.append(message.round)
            return packet(PacketType.PING, self._last_zxid)
        if isinstance(message, Sync):
            self._syncs_held.append((True, message.session_id, message.cxid))
            return self._in_order()
        if isinstance(message, Revalidated):
            return packet(PacketType.REVALIDATE, -1, encode_revalidated(message.session_id, message.valid))
        if isinstance(message, LeaderInfo):
            return packet(PacketType.LEADERINFO, make_zxid(message.epoch, 0), int_bytes(PROTOCOL_VERSION))
        if isinstance(message, (Diff, Trunc, Snap)):
            kind = PacketType.DIFF if isinstance(message, Diff) else PacketType.TRUNC if isinstance(message, Trunc) else PacketType.SNAP
            self._sent.clear()
            self._held.clear()
            self._answers_of.clear()
            self._committed = self._last_zxid = message.zxid
            return packet(kind, message.zxid)
        if isinstance(message, NewLeader):
            self._newleader_sent = True
            return packet(PacketType.NEWLEADER, message.zxid)
        if isinstance(message, UpToDate):
            self._uptodate = True
            waiting, self._commits_after_uptodate = self._commits_after_uptodate, []
            return packet(PacketType.UPTODATE, -1) + b"".join(waiting)
        return b""

    def _proposal(self, txns: tuple[Txn, ...]) -> bytes:
        if self.observer:
            if not self._uptodate:
                self._held.extend(txns)
            return b""
        self._sent.extend(txn.zxid for txn in txns)
        self._last_zxid = txns[-1].zxid
        for txn in txns:
            self._note_answer(txn)
        return b"".join(packet(PacketType.PROPOSAL, txn.zxid, self._entry(txn)) for txn in txns)

    def _note_answer(self, txn: Txn) -> None:
        """Whether ``txn`` answers a write the learner forwarded (its session and cxid)."""
        entry = (False, txn.session_id, txn.cxid)
        if entry in self._forwarded_count:
            self._answers_of[txn.zxid] = entry

    def _answer_key(self, zxid: int) -> Forwarded | None:
        return self._answers_of.pop(zxid, None)

    def _in_order(self, commits: Iterable[tuple[bytes, Forwarded | None]] = ()) -> bytes:
        """The COMMIT or INFORM packets of ``commits`` (each with the forwarded write it
        answers, if any) and the SYNCs held that may go now, in order: a COMMIT answering the
        learner's write waits until every sync it forwarded before has its SYNC (and the
        COMMITs after it wait with it), a SYNC until every write it forwarded before has its
        COMMIT."""
        held, syncs = self._commits_held, self._syncs_held
        held.extend(commits)
        out = []
        while True:
            if held and self._answerable(held[0][1]):
                out.append(held.popleft()[0])
            elif syncs and self._answerable(syncs[0]):
                syncs.popleft()
                out.append(packet(PacketType.SYNC, 0))
            else:
                return b"".join(out)

    def _answerable(self, key: Forwarded | None) -> bool:
        """Whether an answer to ``key`` may go now (None: it answers none of the learner's); if
        so, ``key`` leaves the forwarded ones, with any write before it that never became a
        txn (the leader proposes the learner's writes in the order they came)."""
        forwarded = self._forwarded
        if key is None or key not in self._forwarded_count:
            return True
        while forwarded[0] != key:
            if forwarded[0][0] or key[0]:
                return False  # a sync before it, or a write before a sync: that one is answered first
            self._forget(forwarded.popleft())
        self._forget(forwarded.popleft())
        return True

    def _forget(self, entry: Forwarded) -> None:
        left = self._forwarded_count[entry] - 1
        if left:
            self._forwarded_count[entry] = left
        else:
            del self._forwarded_count[entry]

    def _entry(self, txn: Txn) -> bytes:
        return encode_txn(txn, self.digest_of(txn.zxid))

    def _commit(self, zxid: int) -> bytes:
        out: list[bytes] = []
        if self.observer:
            while self._held and self._held[0].zxid <= zxid:
                txn = self._held.pop(0)
                out += (packet(PacketType.PROPOSAL, txn.zxid, self._entry(txn)), packet(PacketType.COMMIT, txn.zxid))
                self._committed = self._last_zxid = txn.zxid
        commits = []
        sent = self._sent
        while sent and sent[0] <= zxid:
            self._committed = sent.popleft()
            commits.append((packet(PacketType.COMMIT, self._committed), self._answer_key(self._committed)))
        if self._newleader_sent and not self._uptodate:
            # A ZooKeeper learner reads a COMMIT between NEWLEADER and UPTODATE against the
            # proposals that came after NEWLEADER, and fails its sync when there are none
            # (Learner.syncWithLeader's NullPointerException): after UPTODATE it commits them.
            self._commits_after_uptodate += [data for data, _ in commits]
            return b"".join(out)
        return b"".join(out) + self._in_order(commits)

    def _inform(self, txns: tuple[Txn, ...]) -> bytes:
        out = []
        for txn in txns:
            if txn.zxid <= self._committed:
                continue
            if self._held and self._held[0].zxid <= txn.zxid:
                self._held = [held for held in self._held if held.zxid > txn.zxid]
            self._note_answer(txn)
            out.append((packet(PacketType.INFORM, txn.zxid, self._entry(txn)), self._answer_key(txn.zxid)))
            self._committed = self._last_zxid = txn.zxid
        return self._in_order(out)


def _name(kind: int) -> str:
    try:
        return PacketType(kind).name
    except ValueError:
        return f"type-{kind}"
