"""States, phases and sync modes (ZooKeeper's QuorumPeer enums)."""

from __future__ import annotations

import enum


class ServerState(enum.Enum):
    LOOKING = "looking"
    FOLLOWING = "following"
    LEADING = "leading"
    OBSERVING = "observing"


class ZabPhase(enum.Enum):
    ELECTION = "ELECTION"
    DISCOVERY = "DISCOVERY"
    SYNCHRONIZATION = "SYNCHRONIZATION"
    BROADCAST = "BROADCAST"


class SyncMode(enum.Enum):
    DIFF = "DIFF"
    TRUNC_DIFF = "TRUNC+DIFF"
    TRUNC = "TRUNC"
    SNAP = "SNAP"
