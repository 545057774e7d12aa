"""Descriptors are the server's own (issue 56): a server whose descriptors a client or an
admin-port flood can use up refused its real clients and took the next log roll's EMFILE for
a failed disk (exit 74, which systemd's unit does not restart)."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from pathlib import Path

import pytest
import trio
import trio.testing

from harness.jepsen import hostile, hostile_ports
from harness.local.jute_session import OPEN_ACL, JuteSession
from zabby.opcodes import OpCode
from zabby.server.process.descriptors import Descriptors
from zabby.server.process.listeners import serve_listeners
from zabby.testing import ServerProcess
from zabby.wire import jute

DESCRIPTORS_MAX = 256


def _segments(server: ServerProcess) -> set[str]:
    return {path.name for path in (server.data_dir / "version-2").glob("log.*")}


def _flood_clients(port: int, source: str, stop: threading.Event) -> None:
    hostile.attack_from(source)
    while not stop.is_set():
        hostile.connection_flood(("127.0.0.1", port), connections=60, hold_s=2.0, stop=stop)


def test_floods_of_client_and_admin_connections_leave_the_server_its_descriptors(tmp_path: Path) -> None:
    """With RLIMIT_NOFILE at 256, 512 idle admin connections and 240 client connections from
    other hosts: the bystander's session keeps writing, the log rolls (a snapshot every 20
    txns), and the server stays up."""
    server = ServerProcess(tmp_path, snapCount=20)
    server.descriptors_max = DESCRIPTORS_MAX
    server.start()
    stop = threading.Event()
    floods = [threading.Thread(target=hostile_ports.admin_idle_flood, args=(server.admin_port,),
                               kwargs={"per_source": 64, "hold_s": 60.0, "stop": stop}, daemon=True)]  # fmt: skip
    floods += [threading.Thread(target=_flood_clients, args=(server.port, f"127.0.1.{i}", stop), daemon=True) for i in range(1, 5)]
    try:
        with JuteSession(server.port, timeout_s=10.0) as bystander:
            bystander.connect(timeout_ms=30_000)
            bystander.call(OpCode.CREATE, jute.CreateRequest("/bystander", b"", OPEN_ACL, 0))
            before = _segments(server)
            for flood in floods:
                flood.start()
            time.sleep(3.0)  # the floods hold what they can
            slowest_s = 0.0
            for index in range(100):
                started = time.perf_counter()
                header, _ = bystander.call(OpCode.SET_DATA, jute.SetDataRequest("/bystander", str(index).encode(), -1))
                slowest_s = max(slowest_s, time.perf_counter() - started)
                assert header.err == 0
            server.check_running()
            assert _segments(server) - before, "the log never rolled"
            assert slowest_s < 2.0, f"{slowest_s:.2f} s"
        stop.set()
        for flood in floods:
            flood.join(30.0)
        with JuteSession(server.port, timeout_s=10.0) as fresh:  # once the floods are gone, new clients are served again
            fresh.connect(timeout_ms=30_000)
            assert fresh.call(OpCode.EXISTS, jute.ExistsRequest("/bystander", False))[0].err == 0
        server.check_running()
    finally:
        stop.set()
        server.kill()


def test_max_cnxns_bounds_a_client_port(tmp_path: Path) -> None:
    """maxCnxns (ZooKeeper's total on one client port) was read as an unknown key."""
    server = ServerProcess(tmp_path, maxCnxns=3)
    server.start()
    try:
        sessions = [JuteSession(server.port, timeout_s=10.0) for _ in range(3)]
        for session in sessions:
            session.connect(timeout_ms=30_000)
        extra = JuteSession(server.port, timeout_s=5.0)
        with pytest.raises((ConnectionError, OSError)):
            extra.connect(timeout_ms=30_000)
        extra.close()
        sessions.pop().close()
        time.sleep(0.2)
        with JuteSession(server.port, timeout_s=10.0) as again:
            again.connect(timeout_ms=30_000)
        for session in sessions:
            session.close()
    finally:
        server.kill()


class _StarvedListener(trio.abc.Listener[trio.abc.Stream]):
    """accept() fails with EMFILE ``failures`` times, then yields one connection."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.given = False

    async def accept(self) -> trio.abc.Stream:
        await trio.lowlevel.checkpoint()
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        if self.given:
            await trio.sleep_forever()
        self.given = True
        return trio.testing.memory_stream_pair()[0]

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


def test_accept_backs_off_when_descriptors_run_out_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    served: list[trio.abc.Stream] = []

    async def main() -> None:
        async def handler(stream: trio.abc.Stream) -> None:
            served.append(stream)

        listener = _StarvedListener(failures=50)
        with trio.move_on_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve_listeners, handler, [listener])
                while not served:
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()

    with caplog.at_level(logging.WARNING, logger="zabby.server.listeners"):
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert len(served) == 1
    assert len([r for r in caplog.records if "EMFILE" in r.getMessage()]) == 1  # 50 failures, 5 s: one line


def test_connections_take_descriptors_from_what_the_reserve_leaves() -> None:
    descriptors = Descriptors(capacity=2)
    assert descriptors.take() and descriptors.take() and not descriptors.take()
    descriptors.give_back()
    assert descriptors.take() and descriptors.refused == 1


def test_a_limit_that_leaves_no_room_for_connections_stops_the_start_with_its_reason(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path)
    server.descriptors_max = 64
    server.launch()
    try:
        assert server.proc is not None and server.proc.wait(30) == 2
        assert "raise it (ulimit -n, LimitNOFILE=)" in server.log_path.read_text()
    finally:
        server.kill()
