"""The peer authentication handshake's MACs (zabby.server.peering.peer_auth): each binds the secret,
both nonces, the role, the link's kind and both server ids."""

from __future__ import annotations

import os

import msgpack
import pytest

from zabby.errors import RemoteProtocolError
from zabby.server.peering import peer_auth

SECRET = b"a shared secret of the ensemble"


def test_a_proof_holds_only_for_its_own_link() -> None:
    nonce_a, nonce_b = os.urandom(16), os.urandom(16)
    mac = peer_auth.dial_mac(SECRET, "quorum", 1, 2, nonce_b, nonce_a)
    assert mac == peer_auth.dial_mac(SECRET, "quorum", 1, 2, nonce_b, nonce_a)
    others = [
        peer_auth.dial_mac(b"another secret of the ensemble!", "quorum", 1, 2, nonce_b, nonce_a),
        peer_auth.dial_mac(SECRET, "election", 1, 2, nonce_b, nonce_a),  # the other port
        peer_auth.dial_mac(SECRET, "quorum", 3, 2, nonce_b, nonce_a),  # another claimed id
        peer_auth.dial_mac(SECRET, "quorum", 1, 3, nonce_b, nonce_a),  # toward another server
        peer_auth.dial_mac(SECRET, "quorum", 1, 2, os.urandom(16), nonce_a),  # a recorded hello, a new challenge
        peer_auth.accept_mac(SECRET, "quorum", 1, 2, nonce_b, nonce_a),  # reflected as the acceptor's proof
    ]
    assert all(not peer_auth.checks_out(mac, other) for other in others)


def test_frames_parse_only_as_what_they_are() -> None:
    nonce = os.urandom(16)
    assert peer_auth.parse_challenge(peer_auth.challenge_payload(nonce)) == nonce
    assert peer_auth.parse_challenge(peer_auth.proof_payload(nonce)) is None
    assert peer_auth.parse_challenge(b"\xc1garbage") is None
    assert peer_auth.parse_challenge(peer_auth.challenge_payload(b"short")) is None
    assert peer_auth.parse_proof(peer_auth.proof_payload(b"mac")) == b"mac"
    assert not peer_auth.checks_out(b"mac", None)


def _hello(*fields: object) -> bytes:
    return msgpack.packb(list(fields))


def test_a_hello_parses_only_with_every_field_of_its_type_and_size() -> None:
    good = peer_auth.parse_hello(_hello(3, "zk3.example", 2888, 3888, False, bytes(16), bytes(32)))
    assert (good.sid, good.address.host, good.nonce, good.mac) == (3, "zk3.example", bytes(16), bytes(32))
    assert peer_auth.parse_hello(_hello(3, "h", 1, 1, True)).mac is None  # without quorum.auth
    bad = [
        _hello(3, "h", 1, 1, False, 2**30, bytes(32)),  # a number where the nonce goes: once bytes(2^30)
        _hello(3, "h", 1, 1, False, bytes(16), 2**30),
        _hello(3, "h", 1, 1, False, bytes(15), bytes(32)),
        _hello(3, "h", 1, 1, False, bytes(16), bytes(64)),
        _hello(-1, "h", 1, 1, False), _hello(2**63, "h", 1, 1, False), _hello(True, "h", 1, 1, False),
        _hello(3, "h" * 256, 1, 1, False), _hello(3, b"h", 1, 1, False),
        _hello(3, "h", 65536, 1, False), _hello(3, "h", 1, "1", False), _hello(3, "h", 1, 1, 1),
        _hello(3, "h", 1, 1), _hello(3, "h", 1, 1, False, bytes(16)), msgpack.packb({"sid": 3}), b"\xc1",
        b"\x97\x03\xa1h\x01\x01\xc2\xc4\x10" + bytes(16) + b"\x81\x90\x01",  # its MAC a map keyed by a list
    ]
    for payload in bad:
        with pytest.raises(RemoteProtocolError, match="bad hello frame"):
            peer_auth.parse_hello(payload)
