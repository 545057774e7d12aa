"""Observers, a server that joins later (also before the others list it), and sessions of
clients on followers kept alive and expired by the leader."""

from __future__ import annotations

import time
from pathlib import Path

from tests.server.wire import raw_session
from zabby.client.fourletter import srvr
from zabby.errors import Err
from zabby.opcodes import EventType
from zabby.testing import Ensemble, ServerProcess, free_port, wait_until

TICK_MS = 200


def test_observer_serves_reads_forwards_writes_and_never_votes(tmp_path: Path) -> None:
    group = Ensemble(tmp_path, 3, observers=1, tickTime=TICK_MS)
    group.start()
    try:
        group.wait_leader()
        observer = group.servers[4]
        observer.wait_mode({"observer"})
        session = raw_session(observer.port)
        assert session.create("/from-observer", b"o")[2] == 0
        assert session.call(4, "/from-observer", False)[3] == b"o"
        leader = group.leader()
        assert leader is not None
        leader_mntr = group.servers[leader].mntr()
        assert leader_mntr["zk_synced_observers"] == "1" and leader_mntr["zk_synced_followers"] == "2"
        assert leader_mntr["zk_quorum_size"] == "3"  # voters only: the observer is not counted
        for sid in (1, 2, 3):
            if sid != leader:
                group.servers[sid].kill()
        observer.wait_mode({"not serving"})  # an observer alone is no quorum
    finally:
        group.kill_all()


def test_server_joining_before_the_others_list_it(tmp_path: Path) -> None:
    group = Ensemble(tmp_path, 3, tickTime=TICK_MS)
    group.start()
    try:
        leader = group.wait_leader()
        raw_session(group.servers[leader].port).create("/old", b"1")
        # server 4's config lists all four servers; the running three still list only themselves
        peers = [line for line in group.servers[1].config_path.read_text().splitlines() if line.startswith("server.")]
        folder = tmp_path / "server4"
        (folder / "data").mkdir(parents=True)
        (folder / "data" / "myid").write_text("4\n")
        own = f"127.0.0.1:{free_port()}:{free_port()}"
        newcomer = ServerProcess(folder, tickTime=TICK_MS, initLimit=10, syncLimit=5, **{"server.4": own},
                                 **dict(line.split("=", 1) for line in peers))  # fmt: skip
        newcomer.start(30)
        try:
            newcomer.wait_mode({"follower", "observer"})
            wait_until(lambda: _zxid(newcomer) == _zxid(group.servers[leader]), 10, "the newcomer synced")  # it syncs ...
            refused = raw_session(newcomer.port)  # ... but takes no writes (a session is one) until a reconfig adds it
            assert refused.err == Err.NOTREADONLY and "no member" in refused.handshake[-1]
        finally:
            newcomer.kill()
    finally:
        group.kill_all()


def _zxid(server: ServerProcess) -> str:
    return srvr(server.port)["Zxid"]


def test_sessions_on_followers_live_and_expire_through_the_leader(tmp_path: Path) -> None:
    group = Ensemble(tmp_path, 3, tickTime=TICK_MS)
    group.start()
    try:
        leader = group.wait_leader()
        follower = next(sid for sid in group.servers if sid != leader)
        owner = raw_session(group.servers[follower].port, timeout_ms=1000)
        assert owner.create("/alive", mode=1)[2] == 0
        watcher = raw_session(group.servers[leader].port)
        watcher.call(3, "/alive", True)
        deadline = time.monotonic() + 3.0  # three session timeouts, pinging all along
        while time.monotonic() < deadline:
            assert owner.call(11)[2] == 0
            time.sleep(0.2)
        assert watcher.call(3, "/alive", False)[3] is not None, "pings through a follower keep the session"
        watcher.events.clear()
        watcher.sock.settimeout(10)  # the owner goes silent: the leader expires it everywhere
        event = watcher.receive()
        assert event[3] == EventType.NODE_DELETED and event[5] == "/alive"
    finally:
        group.kill_all()
