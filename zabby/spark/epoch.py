"""The project epoch: one writer per project, fenced by the replicated log itself.

Kylin 5 keeps an epoch row per project (owner, renew time, epoch id) renewed by heartbeat and
checked before each write; a paused owner whose heartbeat expired can still be in the middle
of a write when it wakes up.  zabby makes the epoch a Lock on ephemeral sequential nodes under
``<project>/epoch``: the holder is the contender with the lowest sequence; its node lives
exactly as long as its session, and its czxid (the fencing token) grows with every new owner.
Every metadata multi carries ``check(<my epoch node>, 0)``: once the session is gone (expired
while the driver was paused or partitioned) the node is gone, so the whole multi fails with
NoNode, even if the client has silently opened a new session since.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from zabby.errors import LockTimeout, NoNodeError

from .model import Layout, Op


class EpochError(RuntimeError):
    """Base of the epoch errors."""


class EpochTaken(EpochError):
    """Another driver owns the project's epoch (and did not give it up in time)."""


class FencedError(EpochError):
    """This driver no longer owns the epoch: its write was refused by the fencing check."""


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class ProjectEpoch:
    """Take, hold and check the epoch of one project (see the module docstring)."""

    def __init__(self, client: Any, layout: Layout, owner: str | None = None) -> None:
        self.client = client
        self.layout = layout
        self.owner = owner or default_owner()
        self._lock = client.Lock(layout.epoch, self.owner)

    # -- owning -------------------------------------------------------------------------
    def acquire(self, timeout: float | None = 30.0, blocking: bool = True) -> int:
        """Become the project's writer; returns the fencing token. EpochTaken if not in time."""
        self.client.ensure_path(self.layout.epoch)
        try:
            got = self._lock.acquire(blocking=blocking, timeout=timeout)
        except LockTimeout as exc:
            raise EpochTaken(f"epoch of {self.layout.project} is held by {self.owners()[:1]}") from exc
        if not got:
            raise EpochTaken(f"epoch of {self.layout.project} is held by {self.owners()[:1]}")
        return self.token

    def release(self) -> None:
        try:
            self._lock.release()
        except Exception:  # the session may be gone: the node is gone with it
            pass

    def __enter__(self) -> ProjectEpoch:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    # -- facts --------------------------------------------------------------------------
    @property
    def node_path(self) -> str:
        if self._lock.node is None:
            raise FencedError(f"not the epoch owner of {self.layout.project}")
        return f"{self.layout.epoch}/{self._lock.node}"

    @property
    def token(self) -> int:
        """The fencing token: czxid of our epoch node (larger for every later owner)."""
        if self._lock.fencing_token is None:
            raise FencedError(f"not the epoch owner of {self.layout.project}")
        return int(self._lock.fencing_token)

    @property
    def held(self) -> bool:
        """Our node still exists on the server (one round trip)."""
        try:
            return self._lock.node is not None and self.client.exists(self.node_path) is not None
        except NoNodeError:
            return False

    def owners(self) -> list[str]:
        """Contenders' identifiers, the owner first."""
        try:
            return self._lock.contenders()
        except Exception:
            return []

    def check_op(self) -> Op:
        """The op every metadata multi starts with: our ephemeral epoch node, never modified."""
        return Op.check(self.node_path, 0)
