"""Length-prefixed frames: a 4-byte big-endian length, then that many bytes of payload.

``FrameDecoder.receive_data`` accepts any split of the byte stream and returns the complete
payloads; a length over ``frame_bytes_max`` raises ``OversizeError``, a ``RemoteProtocolError``
(the stream can no longer be trusted).  Reading is O(bytes received): consumed bytes are
dropped in one slice.
"""

from __future__ import annotations

from zabby.errors import OversizeError

FRAME_HEADROOM_BYTES = 1024  # a frame holds jute.maxbuffer of data plus the request's header
FRAME_BYTES_MAX_DEFAULT = 0xFFFFF + FRAME_HEADROOM_BYTES


def encode_frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


class FrameDecoder:
    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT) -> None:
        self.frame_bytes_max = frame_bytes_max
        self._buffer = bytearray()

    def receive_data(self, data: bytes | bytearray) -> list[bytes]:
        buffer = self._buffer
        if not buffer and len(data) > 4:  # one whole frame, nearly every read of a request at a time: no copy into the buffer
            length = int.from_bytes(data[:4], "big")
            if length + 4 == len(data) and length <= self.frame_bytes_max:
                return [bytes(data[4:])]
        buffer += data
        frames: list[bytes] = []
        offset, size = 0, len(buffer)
        while size - offset >= 4:
            length = int.from_bytes(buffer[offset : offset + 4], "big")
            if length > self.frame_bytes_max:
                raise OversizeError(f"frame of {length} bytes is over the {self.frame_bytes_max}-byte limit")
            end = offset + 4 + length
            if end > size:
                break
            frames.append(bytes(buffer[offset + 4 : end]))
            offset = end
        if offset:
            del buffer[:offset]
        return frames

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)
