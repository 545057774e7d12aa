"""Which peer protocol a connection speaks, from its first bytes: for the bridge, which hands
each connection to the transport of its protocol, and for a server that speaks one only, which
says clearly why it hangs up on the other."""

from __future__ import annotations

from zabby.config import ZABBY_PROTOCOL, ZOOKEEPER_PROTOCOL

SNIFF_BYTES = 5  # zabby's frame length and the first byte of its payload
OTHER_PROTOCOL_ADVICE = "quorum.protocol.bridge=true takes both, for a rolling switch of the ensemble's protocol"


def protocol_of(head: bytes | bytearray) -> str:
    """The protocol of a connection that began with ``head`` (``SNIFF_BYTES`` at least).
    zabby's hello is a frame of at most a few KiB holding a msgpack array (0x90-0x9f);
    ZooKeeper's dialler opens with a negative long (the election port) or a packet's type and
    zxid, whose top byte (the epoch's) is never 0x90 or more."""
    if head[:2] == b"\0\0" and 0x90 <= head[4] <= 0x9F:
        return ZABBY_PROTOCOL
    return ZOOKEEPER_PROTOCOL
