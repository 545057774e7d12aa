"""Peer authentication: a shared-secret challenge-response on every quorum and election link,
both ways (``quorum.auth.*``, in the spirit of ZooKeeper's quorum SASL).  Pure: frames and
MACs; the transport does the I/O and draws the nonces.

Grammar (each a peer frame: a 4-byte length, then msgpack)::

    acceptor -> dialer   ["zabby-challenge", 1, nonce_b]                      as soon as it accepts
    dialer   -> acceptor [sid, host, quorum_port, election_port, observer, nonce_a, mac_a]   the hello
    acceptor -> dialer   ["zabby-proof", mac_b]                                once mac_a checks out

    mac_a = HMAC-SHA256(secret, "zabby-peer-1|dial|<kind>|<dialer sid>|<acceptor sid>|" + nonce_b + nonce_a)
    mac_b = HMAC-SHA256(secret, "zabby-peer-1|accept|<kind>|<acceptor sid>|<dialer sid>|" + nonce_a + nonce_b)

Every field of a hello is checked for its type and size before it is used (``parse_hello``):
an id in [0, 2^63), a host of at most ``HOST_CHARS_MAX`` characters, ports in [0, 65535], a
boolean, and a nonce and a MAC of exactly ``NONCE_BYTES`` and ``MAC_BYTES``.  Nothing of a
hello is kept before its MAC checks out.

The acceptor's fresh nonce makes a recorded hello worthless on another connection; the
names of both ends and of the link's kind in each MAC make it worthless toward another
server, on the other port, or reflected back.  A dialer that gets no challenge (an acceptor
without authentication) and an acceptor that gets a hello without a MAC (a dialer without it)
go on unauthenticated only where ``quorum.auth.required`` is false: the rolling upgrade's step.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

import msgpack

from zabby.errors import RemoteProtocolError
from zabby.membership import Member

VERSION = 1
NONCE_BYTES = 16
MAC_BYTES = hashlib.sha256().digest_size
HOST_CHARS_MAX = 255  # a DNS name is at most 253
SID_LIMIT = 2**63  # ids are in [0, SID_LIMIT)
PORT_LIMIT = 2**16
CHALLENGE = "zabby-challenge"
PROOF = "zabby-proof"


def _mac(secret: bytes, role: str, kind: str, own: int, other: int, first: bytes, second: bytes) -> bytes:
    label = f"zabby-peer-{VERSION}|{role}|{kind}|{own}|{other}|".encode()
    return hmac.new(secret, label + first + second, hashlib.sha256).digest()


def dial_mac(secret: bytes, kind: str, dialer: int, acceptor: int, nonce_b: bytes, nonce_a: bytes) -> bytes:
    """What the dialer proves with its hello."""
    return _mac(secret, "dial", kind, dialer, acceptor, nonce_b, nonce_a)


def accept_mac(secret: bytes, kind: str, acceptor: int, dialer: int, nonce_a: bytes, nonce_b: bytes) -> bytes:
    """What the acceptor proves with its proof frame."""
    return _mac(secret, "accept", kind, acceptor, dialer, nonce_a, nonce_b)


def challenge_payload(nonce: bytes) -> bytes:
    return msgpack.packb([CHALLENGE, VERSION, nonce])


def proof_payload(mac: bytes) -> bytes:
    return msgpack.packb([PROOF, mac])


def _unpacked(payload: bytes) -> Any:
    try:
        return msgpack.unpackb(payload)
    except (ValueError, TypeError, msgpack.UnpackException):  # TypeError: a map keyed by a list
        return None


def parse_challenge(payload: bytes) -> bytes | None:
    """The acceptor's nonce, or None if ``payload`` is no challenge of this version."""
    value = _unpacked(payload)
    if isinstance(value, list) and len(value) == 3 and value[0] == CHALLENGE and value[1] == VERSION and isinstance(value[2], bytes):
        return value[2] if len(value[2]) == NONCE_BYTES else None
    return None


def parse_proof(payload: bytes) -> bytes | None:
    value = _unpacked(payload)
    if isinstance(value, list) and len(value) == 2 and value[0] == PROOF and isinstance(value[1], bytes):
        return value[1]
    return None


@dataclass(frozen=True, slots=True)
class Hello:
    """What a new link's hello said: the address it gives (its ``sid`` the id it claims), and
    with ``quorum.auth`` its nonce and proof."""

    address: Member
    nonce: bytes | None
    mac: bytes | None

    @property
    def sid(self) -> int:
        return self.address.sid


def parse_hello(payload: bytes) -> Hello:
    """The hello in ``payload``, every field checked for its type and size first.

    Raises:
        RemoteProtocolError: naming the first field that is not what the grammar says.
    """
    fields = _unpacked(payload)
    if not isinstance(fields, list) or len(fields) not in (5, 7):
        raise RemoteProtocolError("bad hello frame from a peer: not a list of 5 or 7 fields")
    sid, host, quorum_port, election_port, observer = fields[:5]
    _check(_is_int(sid) and 0 <= sid < SID_LIMIT, "its server id", sid)
    _check(isinstance(host, str) and len(host) <= HOST_CHARS_MAX, f"its host (a string of at most {HOST_CHARS_MAX})", host)
    for port in (quorum_port, election_port):
        _check(_is_int(port) and 0 <= port < PORT_LIMIT, "a port", port)
    _check(isinstance(observer, bool), "its observer flag", observer)
    nonce = mac = None
    if len(fields) == 7:
        nonce, mac = fields[5], fields[6]
        _check(isinstance(nonce, bytes) and len(nonce) == NONCE_BYTES, f"its nonce ({NONCE_BYTES} bytes)", nonce)
        _check(isinstance(mac, bytes) and len(mac) == MAC_BYTES, f"its MAC ({MAC_BYTES} bytes)", mac)
    return Hello(Member(sid, host, quorum_port, election_port, observer), nonce, mac)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(holds: bool, what: str, value: Any) -> None:
    if not holds:
        shown = f"{type(value).__name__} of {len(value)}" if isinstance(value, (bytes, str, list, dict)) else f"{type(value).__name__} {value!r:.40}"
        raise RemoteProtocolError(f"bad hello frame from a peer: {what} is {shown}")


def checks_out(expected: bytes, given: Any) -> bool:
    return isinstance(given, bytes) and hmac.compare_digest(expected, given)
