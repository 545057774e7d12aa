"""The msgpack client protocol: one msgpack array per frame (see docs/protocol.md).

This module only turns frames into Python values and back, and says which shapes are legal;
what an op means lives in the server and the client.
"""

from __future__ import annotations

from typing import Any

import msgpack

from zabby.errors import RemoteProtocolError

PROTOCOL_NAME = "zabby"
PROTOCOL_VERSION = 1

XID_NOTIFICATION = -1
XID_PING = -2
XID_AUTH = -4
XID_SET_WATCHES = -8

_packer_options = {"use_bin_type": True}


def pack(value: Any) -> bytes:
    return msgpack.packb(value, **_packer_options)


def pack_frame(value: Any) -> bytes:
    payload = msgpack.packb(value, **_packer_options)
    return len(payload).to_bytes(4, "big") + payload


def unpack(frame: bytes) -> Any:
    """Decode one frame; anything but a well-formed msgpack array is a RemoteProtocolError."""
    try:
        value = msgpack.unpackb(frame, raw=False, use_list=True, strict_map_key=True)
    except msgpack.StackError:
        raise RemoteProtocolError("malformed msgpack frame: arrays or maps nested too deeply") from None
    except msgpack.FormatError:
        raise RemoteProtocolError("malformed msgpack frame: a byte that begins no msgpack value") from None
    except Exception as exc:  # msgpack raises several unrelated types, some without a message
        raise RemoteProtocolError(f"malformed msgpack frame: {type(exc).__name__}{f': {exc}' if str(exc) else ''}") from None
    if not isinstance(value, list) or not value:
        raise RemoteProtocolError("a frame must be a non-empty msgpack array")
    return value


def connect_request(last_zxid_seen: int, timeout_ms: int, session_id: int, password: bytes, read_only: bool) -> list[Any]:
    return [PROTOCOL_NAME, PROTOCOL_VERSION, last_zxid_seen, timeout_ms, session_id, password, read_only]


def connect_refusal(code: int, zxid: int, message: str) -> list[Any]:
    """The connect response that refuses a session: ``code`` and why, in ``message``."""
    return [PROTOCOL_NAME, PROTOCOL_VERSION, code, 0, 0, b"", zxid, False, message]


def parse_connect_request(value: list[Any]) -> tuple[int, int, int, bytes, bool]:
    """Return (last_zxid_seen, timeout_ms, session_id, password, read_only)."""
    if len(value) != 7 or value[0] != PROTOCOL_NAME:
        raise RemoteProtocolError("the first frame must be a zabby connect request")
    _, version, last_zxid, timeout_ms, session_id, password, read_only = value
    if version != PROTOCOL_VERSION:
        raise RemoteProtocolError(f"unsupported protocol version {version!r}")
    if not (isinstance(last_zxid, int) and isinstance(timeout_ms, int) and isinstance(session_id, int)):
        raise RemoteProtocolError("connect request fields must be integers")
    if not isinstance(password, bytes):
        raise RemoteProtocolError("connect request password must be bytes")
    return last_zxid, timeout_ms, session_id, password, bool(read_only)
