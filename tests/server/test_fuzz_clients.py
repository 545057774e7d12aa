"""Structured fuzzing of both client protocols against a real server (``harness.jepsen.fuzz``):
valid sessions, mutated.  Whatever a connection sends, the server answers or closes that
connection, stays up, serves a well-behaved client beside it, keeps what it acknowledged to
that client (across a restart too) and logs no error of its own.  A short run here; a long one
to replay by seed: ``python scripts/fuzz_clients.py --seed N --examples M``."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings

from harness.jepsen import fuzz
from harness.local.jute_session import JuteSession
from zabby.opcodes import OpCode
from zabby.testing import ServerProcess
from zabby.wire import jute

EXAMPLES = 150


def test_any_client_input_leaves_the_server_serving_others(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, maxSessionTimeout=60_000)
    server.start()
    target = fuzz.Target(server.port, server.log_path)
    try:
        closed = []

        @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(case=fuzz.CASES)
        def one_connection(case: fuzz.Case) -> None:
            closed.append(target.send(case).closed)
            server.check_running()
            target.check()

        one_connection()
        assert len(closed) >= EXAMPLES // 2 and any(closed) and not all(closed)  # it ran, and cases went both ways
        target.close()
        server.kill()  # what it acknowledged is on disk
        server.start()
        with JuteSession(server.port) as session:
            session.connect()
            header, reply = session.call(OpCode.GET_DATA, jute.GetDataRequest("/fuzz-acked", False))
        assert target.acked >= 10 and header.err == 0 and reply.data == str(target.acked).encode()
    finally:
        server.kill()
