"""One server process: its engine, the effect executor that carries its effects out over
trio and the operating system, its peer links and its client connections.

Theory of operation: ``zabby.engine.Engine`` owns the core, the tree, sessions, watches and
every decision.  ``ZabbyServer`` feeds it (peer messages from the transport, ticks from the
ticker, client calls from the connections) and stands in for it to the sessions
(``SessionHost``).  What the engine asks is carried out by the one effect executor
(``zabby.shell.EffectExecutor``, the same the simulator runs), over this process's I/O
(``zabby.server.trio_io.TrioIO``: the peer task, the background syncer, the disk thread).

A failed disk is the one thing that stops the process (``disk.fail_stop``, exit code 74),
and the engine decides that too.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any

import trio

from zabby.config import ZOOKEEPER_PROTOCOL, ServerConfig
from zabby.core.messages import Message
from zabby.engine import ClientSink, Engine, Recovered, core_timing
from zabby.engine.stats import ServerStats
from zabby.engine.storage import Storage
from zabby.membership import Membership
from zabby.server.clients.budget import ClientMemory
from zabby.server.clients.passes import PassBudget
from zabby.server.clients.session import ClientSession
from zabby.server.clients.throttle import GuessThrottle
from zabby.server.peering.gate import InputGate
from zabby.server.peering.bridge import BridgeTransport
from zabby.server.peering.transport import Deliver, LinkClosed, Transport
from zabby.server.peering.zk_transport import ZkTransport
from zabby.server.process.descriptors import Descriptors
from zabby.server.process.forks import ForkFreezer
from zabby.server.process.ratelog import RateLimitedLogs
from zabby.server.process.sources import SessionSources, source_of
from zabby.server.trio_io import SystemClock, TrioIO
from zabby.shell import EffectExecutor
from zabby.storage.datadir import DataDir
from zabby.storage.txnlog import TxnLog
from zabby.tree.datatree import DataTree
from zabby.tree.watches import WatchHistory
from zabby.wire.framing import FRAME_HEADROOM_BYTES

LOGGER = logging.getLogger("zabby.server")
CONN_LOGGER = logging.getLogger("zabby.server.conn")
CLIENT_LOG_INTERVAL_S = 1.0


class ZabbyServer:
    """One server process: its engine, peer links, disk thread and client connections."""

    def __init__(self, config: ServerConfig, storage: Storage, recovered: Recovered, descriptors: Descriptors | None = None) -> None:
        """``recovered``: what ``storage.recover`` gave, with ``config.membership``;
        ``descriptors``: what connections may hold (default: this process's, now)."""
        self.config = config
        self.descriptors = descriptors or Descriptors.for_server(config)
        self.storage = storage
        self.stats = ServerStats()
        self.connections: set[ClientSession] = set()  # every client session, attached or not
        self.core_tick_ms, peer_config = core_timing(config)
        self.recorded_membership = config.membership  # what the configuration files say now
        self.io = TrioIO(self)
        self.executor = EffectExecutor(storage, self.io, ensemble=bool(config.peers))
        self.engine = Engine(config, peer_config, self.core_tick_ms, recovered, clock=SystemClock(),
                             freezer=ForkFreezer(storage.snap_dir, zookeeper_peer=self._syncs_in_zookeeper),
                             rng=random.SystemRandom(), stats=self.stats)  # fmt: skip
        self.engine.space_low = storage.space_low
        self.executor.drive(self.engine)
        # what the sessions call at every batch: the executor's and the I/O's own, no forward between
        self.begin_batch = self.executor.begin_batch
        self.end_batch = self.executor.end_batch
        self.flush_soon = self.io.flush_soon
        self.wake_when_unthrottled = self.io.wake_when_unthrottled
        self.run_effects = self.executor.run_effects
        self.client_memory = ClientMemory(config.client_memory_budget_bytes, config.connection_memory_bytes_max,
                                          config.jute_buffer_bytes_max + FRAME_HEADROOM_BYTES)  # fmt: skip
        self.client_logs = RateLimitedLogs(CONN_LOGGER, CLIENT_LOG_INTERVAL_S)  # refusals and closes a flood repeats
        self.guesses = GuessThrottle()  # SASL responses, by client host
        self.session_sources = SessionSources(config.sessions_per_host_max, self._session_alive, config.sessions_max)
        self.passes = PassBudget(self.engine)  # what a pass of trio's scheduler may do (installed by run_peer)
        self.transport: Transport | ZkTransport | BridgeTransport | None = None
        self.input_gate = InputGate()  # what peers queue in the engine while it awaits an effect
        if config.peers and config.quorum_bridge:
            self.transport = BridgeTransport(config.quorum_protocol, self._zabby_transport, self._zookeeper_transport, self._deliver)
        elif config.peers and config.quorum_protocol == ZOOKEEPER_PROTOCOL:
            self.transport = self._zookeeper_transport(self._deliver)
        elif config.peers:
            self.transport = self._zabby_transport(self._deliver)

    def _zabby_transport(self, deliver: Deliver, link_closed: LinkClosed = lambda sid, kind: None) -> Transport:
        """Peer links in zabby's protocol; their unread input counts in the clients' budget."""
        config = self.config
        return Transport(config.server_id, {p.sid: p for p in config.peers}, deliver, self._link_down, config.quorum_tls,
                         memory=self.client_memory, warn=self.warn_rate_limited, auth=config.quorum_auth,
                         gate=self.input_gate, limits=config.peer_links, link_closed=link_closed)  # fmt: skip

    def _zookeeper_transport(self, deliver: Deliver, link_closed: LinkClosed = lambda sid, kind: None) -> ZkTransport:
        config = self.config
        return ZkTransport(config.server_id, {p.sid: p for p in config.peers}, deliver, self._link_down,
                           session_timeout=self._session_timeout, heard=self.engine.heard_from, gate=self.input_gate,
                           digest_of=self._zk_digest_of, carried=self.engine.zk_digest_carried,
                           membership_version=config.membership_version, warn=self.warn_rate_limited,
                           link_closed=link_closed)  # fmt: skip

    def _syncs_in_zookeeper(self, sid: int) -> bool:
        """Whether a SNAP to ``sid`` is ZooKeeper's serialized tree."""
        if isinstance(self.transport, BridgeTransport):
            return self.transport.speaks_zookeeper(sid)
        return self.config.quorum_protocol == ZOOKEEPER_PROTOCOL

    # ----------------------------------------------------------------- what sessions see
    @property
    def datadir(self) -> DataDir:
        return self.storage.datadir

    @property
    def log(self) -> TxnLog:
        return self.storage.log

    @property
    def tree(self) -> DataTree:
        return self.engine.tree

    @property
    def watches(self) -> Any:
        return self.engine.watches

    @property
    def history(self) -> WatchHistory:
        return self.engine.history

    @property
    def sessions(self) -> Any:
        return self.engine.sessions

    @property
    def peer(self) -> Any:
        return self.engine.peer

    @property
    def last_zxid(self) -> int:
        return self.engine.tree.last_zxid

    @property
    def serving(self) -> bool:
        return self.engine.serving

    @property
    def is_leader(self) -> bool:
        return self.engine.is_leader

    @property
    def standalone(self) -> bool:
        return self.engine.standalone

    @property
    def state(self) -> str:
        return self.engine.state

    @property
    def outstanding(self) -> int:
        return self.engine.outstanding

    @property
    def quorum_size(self) -> int:
        """The voters of the committed membership (ZooKeeper's ``getVotingView().size()``), not
        the majority of them."""
        return len(self.engine.peer.membership.voters)

    @property
    def membership(self) -> Membership | None:
        """The committed membership, addresses and all (None for a standalone server)."""
        return self.engine.peer.membership if self.config.peers else None

    @property
    def current_epoch(self) -> int:
        return int(self.engine.peer.current_epoch)

    @property
    def space_low(self) -> bool:
        return bool(self.engine.space_low)

    def learner_acked(self) -> tuple[tuple[int, int], ...]:
        """The leader's learners and the last zxid each acknowledged (empty elsewhere)."""
        if not self.engine.is_leader:
            return ()
        return tuple((learner.sid, learner.acked_zxid) for learner in self.engine.peer.status().learners)

    @property
    def last_proposal_bytes(self) -> tuple[int, int, int]:
        return self.engine.last_proposal_bytes

    def submit(self, op: int, args: tuple[Any, ...], caller: Any, cxid: int, done: Any) -> None:
        self.engine.submit(op, args, caller, cxid, done)

    @property
    def throttled(self) -> bool:
        return self.engine.throttled

    def secret_attempt(self, source: str) -> bool:
        """Whether ``source`` (a client's address) may try a secret now: a SASL response, the
        admin port's HTTP Basic credentials (an IPv6 /64 counts as one source)."""
        return self.guesses.attempt(source_of(source), time.monotonic())

    def warn_rate_limited(self, kind: str, message: str) -> None:
        self.client_logs.warning(kind, message)

    def create_session(self, timeout_ms: int, done: Any) -> None:
        self.engine.create_session(timeout_ms, done)

    def check_member(self) -> None:
        self.engine.check_member()

    @property
    def read_only(self) -> bool:
        return self.engine.read_only

    def create_local_session(self, timeout_ms: int) -> tuple[int, bytes]:
        return self.engine.create_local_session(timeout_ms)

    def close_session(self, session_id: int, cxid: int, done: Any) -> None:
        self.engine.close_session(session_id, cxid, done)

    def client_sync(self, session_id: int, cxid: int, done: Any) -> None:
        self.engine.client_sync(session_id, cxid, done)

    def wait_for_zxid(self, owner: Any, zxid: int, timeout_ms: int, done: Any) -> None:
        self.engine.wait_for_zxid(owner, zxid, timeout_ms, done)

    def negotiate_timeout(self, requested_ms: int) -> int:
        return self.engine.negotiate_timeout(requested_ms)

    def check_session(self, session_id: int, password: bytes) -> int | None:
        return self.engine.check_session(session_id, password)

    def touch(self, session_id: int) -> None:
        self.engine.touch(session_id)

    def attach(self, session_id: int, sink: ClientSink) -> None:
        self.engine.attach(session_id, sink)

    def detach(self, sink: ClientSink) -> None:
        self.connections.discard(sink)
        self.engine.detach(sink)

    def learner_counts(self) -> dict[str, int]:
        return self.engine.learner_counts()

    def _zk_digest_of(self, zxid: int) -> tuple[int, int] | None:
        digests = self.engine.zk_digests
        return None if digests is None else digests.digest_of(zxid)

    def _session_alive(self, session_id: int) -> bool:
        return session_id in self.engine.tree.sessions

    def _session_timeout(self, session_id: int) -> int | None:
        entry = self.engine.tree.sessions.get(session_id)
        return None if entry is None else entry[0]

    def _deliver(self, sid: int, messages: list[Message]) -> None:
        for message in messages:
            self.engine.receive(sid, message)
        self.run_effects()

    def _link_down(self, sid: int) -> None:
        self.engine.link_down(sid)
        self.run_effects()

    async def run_ticker(self) -> None:
        while True:
            await trio.sleep(self.core_tick_ms / 1000)
            self.engine.tick()
            self.run_effects()
            self.client_logs.flush()

    async def run_peer(self, nursery: trio.Nursery) -> None:
        await self.io.run_peer(nursery)

    def close(self) -> None:
        """At shutdown: nothing half written left behind, the log closed."""
        self.executor.close()
        self.storage.close()
        self.io.close()
