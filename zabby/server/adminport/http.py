"""The bits of HTTP/1.1 the admin endpoint speaks: one GET (HEAD, POST) per connection, a
bounded request head, and answers with a Content-Length, or streamed until close.  Pure:
bytes in, a ``Request`` out; a ``Response`` in, bytes out.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field

REQUEST_BYTES_MAX = 8192
CSP_HEADER = "Content-Security-Policy"
SECURITY_HEADERS = (  # on every answer, unless it names its own (zabby.server.adminport.browsers)
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
    (CSP_HEADER, "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"),
    ("Referrer-Policy", "no-referrer"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
)
SNAPSHOT_ZXID_HEADER = "last_zxid"  # ZooKeeper 3.9's name, on /commands/snapshot's answer
SNAPSHOT_DIGEST_HEADER = "X-Zabby-Digest"  # the tree digest at that zxid


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str
    headers: dict[str, str]  # names lower-cased
    local_address: str  # the address the connection arrived on

    @property
    def path(self) -> str:
        return urllib.parse.unquote(self.target.split("?", 1)[0]).rstrip("/") or "/"

    @property
    def query(self) -> dict[str, str]:
        return dict(urllib.parse.parse_qsl(self.target.partition("?")[2]))


@dataclass(frozen=True, slots=True)
class Response:
    status: str  # "200 OK"
    content_type: str
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = field(default=())

    def head(self, length: int | None) -> bytes:
        """The status line and headers; without a length the body runs until the close."""
        lines = [f"HTTP/1.1 {self.status}", f"Content-Type: {self.content_type}", "Connection: close"]
        if length is not None:
            lines.append(f"Content-Length: {length}")
        own = {name.lower() for name, _ in self.headers}
        lines += [f"{name}: {value}" for name, value in (*self.headers, *(h for h in SECURITY_HEADERS if h[0].lower() not in own))]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def encode(self, send_body: bool = True) -> bytes:
        return self.head(len(self.body)) + (self.body if send_body else b"")


def head_complete(data: bytes) -> bool:
    return b"\r\n\r\n" in data or b"\n\n" in data or len(data) >= REQUEST_BYTES_MAX


def parse_request(data: bytes, local_address: str) -> Request | None:
    """The request in ``data`` (its head), or None if it is not a GET, HEAD or POST request
    line (a POST's body, if any, is not read: the commands that change state take none)."""
    head = data.replace(b"\r\n", b"\n").split(b"\n\n", 1)[0].decode("latin-1")
    request_line, *header_lines = head.split("\n")
    parts = request_line.split()
    if len(parts) < 2 or parts[0] not in ("GET", "HEAD", "POST"):
        return None
    headers = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return Request(parts[0], parts[1], headers, local_address)
