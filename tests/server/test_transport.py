"""Transport without sockets: what it hands to its links."""

from __future__ import annotations

import pytest

from zabby.config import PeerAddress
from zabby.core.messages import Ack, Proposal, decode
from zabby.server.peering import transport as transport_module
from zabby.server.peering.transport import Transport
from zabby.tree.txns import Txn


def test_one_message_to_many_peers_is_encoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    peers = {sid: PeerAddress(sid, "127.0.0.1", 2000 + sid, 3000 + sid) for sid in (1, 2, 3)}
    transport = Transport(1, peers, lambda sid, messages: None, lambda sid: None)
    encoded: list[object] = []
    real_encode = transport_module.encode
    monkeypatch.setattr(transport_module, "encode", lambda message: encoded.append(message) or real_encode(message))
    sent: list[tuple[int, bytes]] = []
    monkeypatch.setattr(transport, "send_frame", lambda sid, kind, payload: sent.append((sid, payload)))
    proposal = Proposal(txns=(Txn(0x100000001, 7, 1, 1000, 1, ("/a", b"", (), 0, 1)),))
    transport.send(2, proposal)
    transport.send(3, proposal)
    transport.send(2, Ack(zxid=0x100000001))
    transport.send(3, Ack(zxid=0x100000001))  # equal, not the same object: encoded again
    assert encoded == [proposal, Ack(zxid=0x100000001), Ack(zxid=0x100000001)]
    assert [sid for sid, _ in sent] == [2, 3, 2, 3]
    assert decode(sent[0][1]) == decode(sent[1][1]) == proposal
