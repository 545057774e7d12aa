"""Any jute op through kazoo's own connection: for the ops kazoo's API has no method for
(container and TTL creates, multiRead, getEphemerals, whoAmI, addWatch, ...)."""

from __future__ import annotations

from typing import Any

from zabby.wire import jute


class KazooOp:
    """Any jute op as a kazoo request object, so kazoo's own connection (framing, xids,
    session, error mapping) carries ops its API has no method for (whoAmI, addWatch, ...)."""

    def __init__(self, op: int, record: jute.Record | None = None) -> None:
        self.type = op
        self.record = record

    def serialize(self) -> bytes:
        return b"" if self.record is None else self.record.encode()

    def deserialize(self, buffer: bytes, offset: int) -> Any:
        record_type = jute.RESPONSE_RECORDS.get(self.type)
        if record_type is None:
            return True
        record = record_type.read(jute.Reader(bytes(buffer), offset))
        if isinstance(record, jute.MultiResponse):
            return record.results  # kazoo post-processes a multi's answer as a list
        return record


def kazoo_call(client: Any, op: int, record: jute.Record | None = None, timeout_s: float = 10.0) -> Any:
    """Send one jute op through a started KazooClient; raise kazoo's exception for an error."""
    result = client.handler.async_result()
    client._call(KazooOp(op, record), result)
    return result.get(timeout=timeout_s)
