"""The handshake's decision when the server stops serving between the connect's check and the
session's txn: a committed reconfig that took a learner's leader out, or a leader stepping
down in the Ready being carried out, leave ``serving`` true a moment longer than the engine
takes requests (found by scripts/jepsen.py --nemesis reconfig, seed 1313641638: the
connection failed with a traceback in the server's log)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from zabby.errors import Err, ZabbyError
from zabby.engine.stats import ServerStats
from zabby.server.clients.session import ClientSession
from zabby.server.process.sources import SessionSources
from zabby.wire.codec import ConnectRequest


class _Output:
    def __init__(self) -> None:
        self.sent: list[list[Any]] = []
        self.closing = False

    def send(self, values: list[Any]) -> None:
        self.sent.append(values)

    def close_after_flush(self, delay_s: float = 0.0) -> None:
        self.closing = True


class _HostThatJustStoppedServing:
    config = SimpleNamespace(skip_acl=False, leader_serves=True, connection_memory_bytes_max=32 * 2**20)
    serving, read_only, is_leader, standalone, last_zxid = True, False, False, False, 0x300000c6a
    stats = ServerStats()
    session_sources = SessionSources(per_source_max=2_000, alive=lambda session_id: True, entries_max=60_000)

    def negotiate_timeout(self, requested_ms: int) -> int:
        return requested_ms

    def check_member(self) -> None:  # a member: what fails is the session's creation
        pass

    def create_session(self, timeout_ms: int, done: Any) -> None:
        raise ZabbyError(Err.CONNECTIONLOSS, "this server is not serving")


def test_a_new_session_on_a_server_that_just_stopped_serving_is_refused_not_failed() -> None:
    output = _Output()
    session = ClientSession(_HostThatJustStoppedServing(), output, ("127.0.0.1", 41854))  # type: ignore[arg-type]
    started = session.connect(ConnectRequest(last_zxid_seen=0, timeout_ms=10_000, session_id=0, password=b"", read_only=False))
    assert started is False
    assert output.closing  # the client hears why, then tries another server
    [refusal] = output.sent
    assert refusal[2] == int(Err.CONNECTIONLOSS) and refusal[6] == 0x300000c6a
    assert refusal[-1] == "this server is not serving"
