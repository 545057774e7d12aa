"""What the engine asks of its driver (effects), and the ports it calls synchronously.

The engine decides; a driver carries out.  ``Engine.next_effect`` hands out one effect at a
time and the driver answers with its result (or the error it raised) on the next call, so
the order of every step — send early, persist, apply, send, drop links — is written once,
in the engine, for the trio server and for the simulator alike.

Effects that answer with a value: ``Reload`` (a ``Recovered``), ``Persist`` and
``CheckSpace`` (True if the disk is short of space afterwards), and ``Append``.  The others answer None.  An effect the driver could not
carry out is answered with the exception it raised; the engine then repairs itself
(``zabby.engine.engine``), or asks to stop (``FailStop``) if the disk failed.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import field
from typing import Any, Protocol

from zabby.core.messages import Message
from zabby.core.peer import DurableState
from zabby.membership import Membership
from zabby.records import immutable
from zabby.tree.datatree import DataTree
from zabby.tree.txns import Txn
from zabby.tree.watches import WatchHistory

Frozen = Any  # a tree image taken at one zxid: a forked child (server) or a tuple of records (sim)


@immutable
class Send:
    """Send ``messages`` in order.  A ``Snap`` to ``sid`` at ``zxid`` is followed on that link
    by ``images[(sid, zxid)]``, the tree exactly at that zxid (the engine guarantees one)."""

    messages: list[tuple[int, Message]]
    images: dict[tuple[int, int], Frozen] = field(default_factory=dict)


@immutable
class Persist:
    """Durably store, in this order: the accepted epoch (when not None), a log cut after
    ``truncate_to`` (when not None), ``append``, an fsync of the log if ``sync``, and last
    the current epoch (when not None: see ``zabby.core.ready``).  Answer whether the disk is
    short of space (the log could not reserve more)."""

    accepted_epoch: int | None
    current_epoch: int | None
    truncate_to: int | None
    append: list[Txn]
    sync: bool


@immutable
class Append:
    """Append ``txns`` to the log now and, if ``sync``, have the log made durable: here, or in
    the background, reporting ``Engine.log_synced(zxid)`` each time everything appended up
    to ``zxid`` is durable, until the log's last zxid is.  Answer ``(space_low, durable)``:
    whether the disk is short of space, and whether the whole log is durable already (a
    driver that syncs inline always says so; one that syncs in the background says so when
    it synced this one here, and reports the rest through ``log_synced``)."""

    txns: list[Txn]
    sync: bool


@immutable
class Recovered:
    """What a restart would find on disk: the tree (newest snapshot plus the whole log) and
    the core's durable state; and the watch history of the log's txns replayed onto the
    snapshot (None: a history that starts at the tree's zxid)."""

    tree: DataTree
    durable: DurableState
    history: WatchHistory | None = None


@immutable
class Reload:
    """Close the log and recover from disk; answer with a ``Recovered``."""

    why: str
    snapshot_wanted: bool = False  # carried into the answer's DurableState


@immutable
class StageSnapshot:
    """Write ``records``, the next part of the SNAP stream from leader ``sid`` at ``zxid``, to
    disk as they arrive (not durable yet); ``start``: the stream begins, and any earlier one
    from ``sid`` is discarded.  ``Install`` finishes it.  ``encoded``: the same records as
    they came over the wire, when the transport kept them (``SnapChunk.encoded``)."""

    sid: int
    zxid: int
    records: tuple[Any, ...]
    start: bool
    encoded: bytes | memoryview = b""


@immutable
class Install:
    """Make the leader ``sid``'s snapshot at ``zxid`` this server's whole history (Zab SNAP):
    the stream staged from it, whose records built ``tree``, made durable.  Answered with the
    ``records_digest`` of the staged records, or None: the engine then computes the tree's."""

    tree: DataTree
    zxid: int
    sid: int


@immutable
class FlushClients:
    """Write the answers queued for clients now: the engine asks once a Ready's applies
    answered writes, after the Ready's ACKs and LOGGEDs and before the rest of its work (a
    client that writes one request at a time waits for nothing else)."""


FLUSH_CLIENTS = FlushClients()


@immutable
class DropLinks:
    sids: tuple[int, ...]


class ClientsKept(enum.Enum):
    """Which client connections a ``CloseClients`` leaves open."""

    NONE = "none"
    IDLE = "idle"  # those with a session and no request unanswered: they are held from now
    HELD = "held"  # those held (by the last ``ClientsKept.IDLE``)
    UNHELD = "unheld"  # those not held: read-only sessions made since


@immutable
class CloseClients:
    """Close client connections (they see ConnectionLoss): every one, or all but those
    ``keep`` names.  A server that stops serving holds its idle clients through the election
    (``ClientsKept.IDLE``) and closes the rest, whose requests it can no longer answer."""

    keep: ClientsKept = ClientsKept.NONE


@immutable
class WriteSnapshot:
    """Write ``image`` (the tree at ``zxid``) to disk in the background; then call
    ``Engine.snapshot_written`` with the outcome.  Start a new log segment first."""

    image: Frozen
    zxid: int


@immutable
class Purge:
    """Remove the snapshots and log segments older than the retained ones."""


@immutable
class CheckSpace:
    """Try again to reserve log space; answer True if the disk is still short of it."""


@immutable
class Reconfigure:
    """The membership changed: reach every member of ``membership`` and ``proposed`` (a
    reconfig in progress); when ``committed`` (the committed membership is new), record it
    as the dynamic configuration (``zoo.cfg.dynamic.<version>``)."""

    membership: Membership
    proposed: Membership | None
    committed: bool


@immutable
class Pause:
    """Do nothing until the monotonic clock reaches ``until_ms`` (a repair that follows
    another one too soon: no busy loop on a bad disk)."""

    until_ms: int


@immutable
class FailStop:
    """The disk failed: stop this server now (exit code 74 for a process)."""

    reason: str


Effect = Send | FlushClients | Persist | Append | Reload | StageSnapshot | Install | DropLinks | CloseClients | WriteSnapshot | Purge | CheckSpace | Reconfigure | Pause | FailStop


class Clock(Protocol):
    def wall_ms(self) -> int: ...

    def monotonic_ms(self) -> int: ...


class Freezer(Protocol):
    """Takes a tree image *now*, while the tree is at the zxid the image is for."""

    def image_for_peer(self, tree: DataTree, sid: int) -> Frozen: ...

    def image_for_disk(self, tree: DataTree) -> Frozen: ...

    def discard(self, image: Frozen) -> None: ...


class ClientSink(Protocol):
    """What the engine knows of a client: where its watch events go, and how to end it."""

    session_id: int

    def __hash__(self) -> int: ...  # a watcher: the watch tables are keyed by it

    def send_events(self, zxid: int, events: list[tuple[int, str]]) -> None:
        """The watch events ``(type, path)`` one txn (``zxid``) fired for this client, in order."""
        ...

    def close_after_flush(self) -> None: ...


Done = Callable[[Txn, Any], None]
SyncDone = Callable[[], None]
