"""A fair, ephemeral-sequential lock (kazoo's ``Lock``) with a fencing token.

Theory of operation
-------------------
A contender creates ``<path>/<uuid>__lock__<seq>`` (ephemeral, sequential) and holds the
lock when its node has the lowest sequence number; otherwise it watches only its immediate
predecessor (no herd effect) and re-checks when that node goes.  Fair: the order is the
creation order.  The uuid prefix lets a contender find its own node again if the create's
reply was lost to a connection drop (the create may have been applied).

``fencing_token`` is the lock node's czxid: it grows with every new holder, so a resource
that remembers the highest token it has seen can refuse a stale holder's writes.
A session loss (LOST) releases the lock on the server; ``is_acquired`` is then false.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from zabby.errors import CancelledError, ConnectionLoss, LockTimeout, NoNodeError, NodeExistsError

from ..states import KazooState

_WAIT_SLICE_S = 1.0
_MAX_ROUNDS = 1_000_000


def _sequence(name: str) -> int:
    return int(name[-10:]) if name[-10:].isdigit() else -1


class Lock:
    _NODE_NAME = "__lock__"
    _EXCLUDE_NAMES = ["__lock__"]

    def __init__(self, client: Any, path: str, identifier: str | None = None, extra_lock_patterns: tuple[str, ...] = ()) -> None:
        self.client = client
        self.path = path.rstrip("/") or "/"
        self._exclude_names = set(self._EXCLUDE_NAMES) | set(extra_lock_patterns)
        self.data = str(identifier or "").encode("utf-8")
        self.node: str | None = None
        self.prefix = uuid.uuid4().hex + self._NODE_NAME
        self.create_path = self.path + "/" + self.prefix
        self.is_acquired = False
        self.assured_path = False
        self.cancelled = False
        self.fencing_token: int | None = None
        self._wake = threading.Event()
        self._guard = threading.Lock()

    # -- public API ------------------------------------------------------------------------
    def acquire(self, blocking: bool = True, timeout: float | None = None, ephemeral: bool = True) -> bool:
        """Take the lock; False if not ``blocking`` and taken; LockTimeout after ``timeout``."""
        took = self._guard.acquire(False) if not blocking else self._guard.acquire(True, -1 if timeout is None else timeout)
        if not took:
            return False
        try:
            if self.is_acquired:
                raise RuntimeError("Lock is not re-entrant: already acquired")
            self.cancelled = False
            deadline = None if timeout is None else time.monotonic() + timeout
            self.client.add_listener(self._watch_session)
            try:
                got = self._acquire(blocking, deadline, ephemeral)
            except BaseException:
                self._best_effort_cleanup()
                raise
            finally:
                self.client.remove_listener(self._watch_session)
            if not got:
                self._best_effort_cleanup()
            self.is_acquired = got
            return got
        finally:
            self._guard.release()

    def release(self) -> bool:
        """Give the lock up (delete the node); True if it was held."""
        if not self.is_acquired:
            return False
        self.is_acquired = False
        node, self.node = self.node, None
        if node is not None:
            try:
                self.client.delete(self.path + "/" + node)
            except NoNodeError:
                pass
        return True

    def cancel(self) -> None:
        self.cancelled = True
        self._wake.set()

    def contenders(self) -> list[str]:
        """Identifiers of the contenders, holder first."""
        out = []
        for name in self._sorted_children():
            try:
                data, _ = self.client.get(self.path + "/" + name)
            except NoNodeError:
                continue
            out.append(data.decode("utf-8"))
        return out

    def __enter__(self) -> Lock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    # -- internals -------------------------------------------------------------------------
    def _watch_session(self, state: KazooState) -> None:
        if state != KazooState.CONNECTED:
            self._wake.set()

    def _acquire(self, blocking: bool, deadline: float | None, ephemeral: bool) -> bool:
        if not self.assured_path:
            self.client.ensure_path(self.path)
            self.assured_path = True
        self.node = self._create_node(ephemeral)
        for _ in range(_MAX_ROUNDS):
            if self.cancelled:
                raise CancelledError("lock acquisition cancelled")
            children = self._sorted_children()
            if self.node not in children:
                raise ConnectionLoss(f"lock node {self.node} vanished (session lost?)")
            index = children.index(self.node)
            if index == 0:
                return True
            if not blocking:
                return False
            self._wait_for(children[index - 1], deadline)
        raise LockTimeout("too many rounds waiting for the lock")

    def _create_node(self, ephemeral: bool) -> str:
        for _ in range(3):
            try:
                path, stat = self.client.create(self.create_path, self.data, ephemeral=ephemeral, sequence=True, include_data=True)
                self.fencing_token = stat.czxid
                name: str = path.rsplit("/", 1)[1]
                return name
            except ConnectionLoss:
                mine = [c for c in self._children() if c.startswith(self.prefix)]
                if mine:
                    node = mine[0]
                    self.fencing_token = self.client.exists(self.path + "/" + node).czxid
                    return node
            except NodeExistsError:  # pragma: no cover - sequential names are unique
                continue
        raise ConnectionLoss("could not create the lock node")

    def _wait_for(self, predecessor: str, deadline: float | None) -> None:
        self._wake.clear()
        if self.client.exists(self.path + "/" + predecessor, watch=self._on_predecessor) is None:
            return
        while not self._wake.is_set():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise LockTimeout(f"Failed to acquire lock on {self.path} within the timeout")
            self._wake.wait(_WAIT_SLICE_S if remaining is None else min(remaining, _WAIT_SLICE_S))
            if not self.client.connected:
                self._wait_connected(deadline)

    def _wait_connected(self, deadline: float | None) -> None:
        while not self.client.connected:
            if self.client.state == KazooState.LOST:
                raise ConnectionLoss("session lost while waiting for the lock")
            if deadline is not None and time.monotonic() >= deadline:
                raise LockTimeout(f"Failed to acquire lock on {self.path} within the timeout")
            time.sleep(0.02)
        self._wake.set()  # re-check the children after a reconnect

    def _on_predecessor(self, event: Any) -> None:
        self._wake.set()

    def _children(self) -> list[str]:
        try:
            children: list[str] = self.client.get_children(self.path)
            return children
        except NoNodeError:
            self.assured_path = False
            return []

    def _sorted_children(self) -> list[str]:
        names = [c for c in self._children() if any(n in c for n in self._exclude_names)]
        names.sort(key=_sequence)
        return names

    def _best_effort_cleanup(self) -> None:
        node, self.node = self.node, None
        if node is None:
            return
        try:
            self.client.delete(self.path + "/" + node)
        except Exception:  # the session may be gone; the node then goes with it
            pass
