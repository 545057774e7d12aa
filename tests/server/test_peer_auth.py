"""The peer authentication handshake's MACs (zabby.server.peer_auth): each binds the secret,
both nonces, the role, the link's kind and both server ids."""

from __future__ import annotations

import os

from zabby.server import peer_auth

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
