"""Peer authentication: a shared-secret challenge-response on every quorum and election link,
both ways (``quorum.auth.*``, in the spirit of ZooKeeper's quorum SASL).  Pure: frames and
MACs; the transport does the I/O and draws the nonces.

Grammar (each a peer frame: a 4-byte length, then msgpack)::

    acceptor -> dialer   ["zabby-challenge", 1, nonce_b]                      as soon as it accepts
    dialer   -> acceptor [sid, host, quorum_port, election_port, observer, nonce_a, mac_a]   the hello
    acceptor -> dialer   ["zabby-proof", mac_b]                                once mac_a checks out

    mac_a = HMAC-SHA256(secret, "zabby-peer-1|dial|<kind>|<dialer sid>|<acceptor sid>|" + nonce_b + nonce_a)
    mac_b = HMAC-SHA256(secret, "zabby-peer-1|accept|<kind>|<acceptor sid>|<dialer sid>|" + nonce_a + nonce_b)

The acceptor's fresh nonce makes a recorded hello worthless on another connection; the
names of both ends and of the link's kind in each MAC make it worthless toward another
server, on the other port, or reflected back.  A dialer that gets no challenge (an acceptor
without authentication) and an acceptor that gets a hello without a MAC (a dialer without it)
go on unauthenticated only where ``quorum.auth.required`` is false: the rolling upgrade's step.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import msgpack

VERSION = 1
NONCE_BYTES = 16
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
    except (ValueError, msgpack.UnpackException):
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


def checks_out(expected: bytes, given: Any) -> bool:
    return isinstance(given, bytes) and hmac.compare_digest(expected, given)
