"""What the shell asks of the world: the network, the disk's slow calls, the clock, forked
children.  Two implementations: ``zabby.server.trio_io.TrioIO`` (trio on the operating system)
and ``zabby.sim.shell_io.SimIO`` (the simulator's network, file system, clock and crashes).

The shell calls each synchronously or awaits it; an awaited call may suspend (the server's
disk thread, a sleep) or finish at once (the simulator, except where it suspends a ``Pause``).
Everything the shell decides (which effect waits, in which order the parts of a ``Persist``
go, when the log is synced and how) stays in ``zabby.shell.executor``: an implementation only
does what it is asked.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, Protocol, TypeVar

from zabby.core.messages import Message, Snap
from zabby.engine import ClientsKept, Install, Recovered, Reload, WriteSnapshot
from zabby.membership import Membership

T = TypeVar("T")


class Digest(Protocol):
    """The digest of a SNAP's records computed beside the build (a forked child, in the server)."""

    def feed(self, encoded: bytes | memoryview) -> None: ...

    def abandon(self) -> None: ...


class ShellIO(Protocol):
    # ----------------------------------------------------------------- peers and clients
    def send(self, sid: int, message: Message) -> None:
        """Queue ``message`` on the link to ``sid`` (sent at ``flush_links``)."""

    def send_image(self, sid: int, message: Snap, image: Any) -> None:
        """The tree image that follows a SNAP on the link to ``sid``."""

    def flush_links(self) -> None: ...

    def drop_link(self, sid: int) -> None: ...

    def close_clients(self, keep: ClientsKept) -> None:
        """Close the client connections, but those ``keep`` names (``zabby.engine.effects.CloseClients``)."""

    def reach(self, members: tuple[Any, ...]) -> None:
        """Open links to these members too (a membership changed)."""

    async def record_membership(self, membership: Membership) -> None:
        """A committed membership: record it (the dynamic configuration file)."""

    # ----------------------------------------------------------------- the disk
    async def on_disk(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)``, off the loop where there is one (the disk thread)."""

    async def kernel_fdatasync(self) -> bool:
        """The log's sync done by the kernel while the loop goes on, if that is all it needs;
        False, having done nothing, otherwise (the shell then has the disk thread do it)."""

    def perf_s(self) -> float:
        """A clock for timing fsyncs (seconds)."""

    def want_sync(self) -> None:
        """An Append left the log's sync to the background: run ``EffectExecutor.sync_in_background``."""

    async def background_sync_progress(self) -> None:
        """Until the background sync in progress (or wanted) has made progress."""

    async def reload(self, effect: Reload) -> Recovered:
        """Recover from the data directory, as a restart would."""

    def write_snapshot(self, effect: WriteSnapshot) -> None:
        """Have the image written in the background; then call ``EffectExecutor.snapshot_written``."""

    def digest_child(self, sid: int) -> Digest | None:
        """A digest computed beside a SNAP being staged (None: the engine computes it)."""

    async def digest_result(self, digest: Any) -> int | None: ...

    def installed(self, effect: Install, path: Path) -> None:
        """A SNAP was made durable at ``path`` and ``effect.tree`` is the tree now."""

    # ----------------------------------------------------------------- time and the process
    async def sleep_until(self, until_ms: int) -> None: ...

    def fail_stop(self, reason: str) -> NoReturn: ...

    # ----------------------------------------------------------------- hooks
    watches_effects: bool  # before_effect is called only if set: a call per effect the server's I/O does without

    def before_effect(self, effect: Any) -> None:
        """About to carry out ``effect`` (the simulator may crash the server here)."""

    def failed(self, exc: Exception) -> None:
        """Carrying out an effect raised ``exc``; the engine is told next."""

    def flush(self) -> None:
        """The effects carried out so far are done: flush what they queued for clients."""

    def wake(self) -> None:
        """The engine has work for the peer task (its next turn, after the other tasks')."""

    def settled(self, wake: bool) -> None:
        """``run_effects`` returned; ``wake``: the peer task has work (an awaited effect, or
        the engine's next turn)."""
