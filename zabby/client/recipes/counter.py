"""A shared counter (kazoo's ``Counter``): read, add, write back with the version read.

A change reads the value and its version, then sets the new value *with that version*; a
concurrent change makes the set fail with BadVersionError and the change starts over (under
the client's retry policy, which also rides out connection losses).  The value is stored as
``repr(value)`` in ASCII (kazoo's format: ints, or floats with ``default=0.0``), or with
``support_curator=True`` as Curator's SharedCount does: a 4-byte big-endian signed int.

As with kazoo, a change whose reply was lost to a connection drop may have been applied and is
then applied again by the retry.

``AsyncCounter`` (``zabby.Client``): ``await counter.add(2)``, ``await counter.get_value()``.
``Counter`` (``SyncClient``): kazoo's ``counter += 2``, ``counter.value``; the same code.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from zabby.errors import BadVersionError, ForceRetryError

from ._runtime import ThreadRuntime

if TYPE_CHECKING:
    from ..aio import Client
    from ..blocking import BlockingClient

Number = int | float
_CURATOR = struct.Struct(">i")


class AsyncCounter:
    def __init__(self, client: Client, path: str, default: Number = 0, support_curator: bool = False) -> None:
        if not isinstance(default, (int, float)) or isinstance(default, bool):
            raise TypeError(f"the default must be an int or a float, not {type(default).__name__}")
        if support_curator and not isinstance(default, int):
            raise TypeError("when support_curator is enabled the default type must be an int")
        self.client = client
        self.path = path
        self.default = default
        self.default_type: type[int] | type[float] = type(default)
        self.support_curator = support_curator
        self.pre_value: Number | None = None
        self.post_value: Number | None = None
        self._ensured_path = False

    async def get_value(self) -> Number:
        """The counter's current value (the default while the node is empty)."""
        value, _ = await self._read()
        return value

    async def add(self, value: Number) -> AsyncCounter:
        """Add ``value`` (of the default's type); ``pre_value``/``post_value`` tell the change."""
        self._check(value)
        await self.client.retry(self._change, value)
        return self

    async def subtract(self, value: Number) -> AsyncCounter:
        self._check(value)
        return await self.add(-value)

    def _check(self, value: object) -> None:
        if not isinstance(value, self.default_type) or isinstance(value, bool):
            raise TypeError(f"invalid type for value change: {type(value).__name__} (the counter holds {self.default_type.__name__})")

    async def _read(self) -> tuple[Number, int]:
        if not self._ensured_path:
            await self.client.ensure_path(self.path)
            self._ensured_path = True
        data, stat = await self.client.get(self.path)
        return self._decode(data), stat.version

    async def _change(self, value: Number) -> None:
        self.pre_value, version = await self._read()
        post_value = self.pre_value + value
        try:
            await self.client.set(self.path, self._encode(post_value), version=version)
        except BadVersionError:
            self.post_value = None
            raise ForceRetryError() from None
        self.post_value = post_value

    def _decode(self, data: bytes) -> Number:
        if not data:
            return self.default
        if self.support_curator:
            if len(data) != _CURATOR.size:
                raise ValueError(f"{self.path} holds {len(data)} bytes, not a Curator SharedCount (4)")
            return int(_CURATOR.unpack(data)[0])
        try:
            return self.default_type(data.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            raise ValueError(f"{self.path} holds {data[:40]!r}, not a {self.default_type.__name__} counter") from None

    def _encode(self, value: Number) -> bytes:
        if self.support_curator:
            return _CURATOR.pack(int(value))
        return repr(value).encode("ascii")


class Counter:
    """kazoo's Counter for ``SyncClient``: ``counter += 2``, ``counter -= 1``, ``counter.value``."""

    def __init__(self, client: BlockingClient, path: str, default: Number = 0, support_curator: bool = False) -> None:
        self.client = client
        self._runtime = ThreadRuntime(client)
        self._counter = AsyncCounter(client._client, path, default, support_curator)

    @property
    def path(self) -> str:
        return self._counter.path

    @property
    def default(self) -> Number:
        return self._counter.default

    @property
    def pre_value(self) -> Number | None:
        return self._counter.pre_value

    @property
    def post_value(self) -> Number | None:
        return self._counter.post_value

    @property
    def value(self) -> Number:
        return self._runtime.run(self._counter.get_value, timeout=self.client.request_timeout * 2)

    def __add__(self, value: Number) -> Counter:
        self._runtime.run(self._counter.add, value, timeout=self._change_timeout())
        return self

    def __sub__(self, value: Number) -> Counter:
        self._runtime.run(self._counter.subtract, value, timeout=self._change_timeout())
        return self

    def _change_timeout(self) -> float:
        """The retry policy's deadline is the bound; this only guards against a hang."""
        return self.client.request_timeout * 4
