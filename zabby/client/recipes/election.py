"""Leader election on top of Lock (kazoo's ``Election``): the lock holder is the leader."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zabby.errors import CancelledError

from .lock import Lock


class Election:
    def __init__(self, client: Any, path: str, identifier: str | None = None) -> None:
        self.lock = Lock(client, path, identifier)

    def run(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Block until elected, run ``func`` as leader, then step down; None if cancelled."""
        if not callable(func):
            raise ValueError("leader function is not callable")
        try:
            with self.lock:
                return func(*args, **kwargs)
        except CancelledError:
            return None

    def cancel(self) -> None:
        self.lock.cancel()

    def contenders(self) -> list[str]:
        return self.lock.contenders()
