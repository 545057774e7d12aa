"""The peer ports before a link has authenticated (issue 56): what an outsider without the
quorum secret can cost a server there.  Each of these once worked."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from harness.jepsen import hostile_ports
from tests.ensemble.forged_peer import closed_by_peer, listening, open_as, vm_kb
from zabby.server.peering.transport import MEMBER_FRAME_BYTES_MAX
from zabby.testing import Ensemble, wait_until

SECRET = b"0123456789abcdef-the-secret"


def _auth(folder: Path) -> dict[str, object]:
    path = folder / "quorum.secret"
    path.write_bytes(SECRET)
    return {"quorum.auth.enabled": "true", "quorum.auth.secretFile": path}


def test_an_outsider_holding_the_unidentified_slots_keeps_no_member_out(tmp_path: Path) -> None:
    """An outsider without the secret held all 32 slots for links that had not said who they
    are (each opened again after the hello's deadline): once the leader died the followers
    could not link to each other, and the ensemble never served again."""
    ensemble = Ensemble(tmp_path, 3, **_auth(tmp_path))
    ensemble.start()
    stop = threading.Event()
    try:
        leader = ensemble.wait_leader()
        followers = [sid for sid in ensemble.servers if sid != leader]
        ports = [port for sid in followers for port in ensemble.ports[sid][:2]]
        attackers = [threading.Thread(target=hostile_ports.peer_slot_hold, args=(port,),
                                      kwargs={"sources": hostile_ports.ATTACKER_HOSTS[:16], "per_source": 4, "hold_s": 60.0, "stop": stop},
                                      daemon=True) for port in ports]  # fmt: skip
        for attacker in attackers:
            attacker.start()
        time.sleep(3.0)  # the slots are taken
        ensemble.servers[leader].kill()
        new_leader = ensemble.wait_leader(30.0, excluding=leader)
        assert new_leader in followers
    finally:
        stop.set()
        ensemble.kill_all()


def _lonely_member(tmp_path: Path) -> tuple[Ensemble, int]:
    """Server 1 of a 3-server ensemble with quorum authentication, alone (it looks for a
    leader for as long as the test runs, its peer ports open); and its quorum port."""
    ensemble = Ensemble(tmp_path, 3, **_auth(tmp_path))
    ensemble.servers[1].launch()
    wait_until(lambda: listening(ensemble.ports[1][0]), 20, "server 1's quorum port")
    return ensemble, ensemble.ports[1][0]


def test_a_hello_whose_nonce_or_mac_is_a_number_costs_nothing(tmp_path: Path) -> None:
    """A 60-byte hello whose nonce (or MAC) was the integer N made the server allocate and
    HMAC N bytes: +256 MiB for N = 2^28 (1 GiB and a 1.8 s stall for 2^30)."""
    ensemble, port = _lonely_member(tmp_path)
    try:
        server = ensemble.servers[1]
        before_kb = vm_kb(server.proc.pid, "VmRSS")  # type: ignore[union-attr]
        outcome = hostile_ports.peer_number_fields(port, count=2, size=2**28)
        assert outcome.closed_by_server == 2
        growth_mb = (vm_kb(server.proc.pid, "VmHWM") - before_kb) / 1024  # type: ignore[union-attr]
        assert growth_mb < 32, f"{growth_mb:.0f} MB"
        assert "its nonce (16 bytes) is int 268435456" in server.log_path.read_text()
    finally:
        ensemble.kill_all()


def test_hellos_that_do_not_authenticate_leave_nothing_behind(tmp_path: Path) -> None:
    """Every hello was stored (by the id it claimed) before its MAC was checked, and never
    removed: +79 MB per 20,000 hellos."""
    ensemble, port = _lonely_member(tmp_path)
    try:
        server = ensemble.servers[1]
        hostile_ports.peer_hello_flood(port, count=500)  # the server's allocator warms up
        before_kb = vm_kb(server.proc.pid, "VmRSS")  # type: ignore[union-attr]
        outcome = hostile_ports.peer_hello_flood(port, count=12_000)
        assert outcome.closed_by_server == outcome.connections == 12_000
        growth_mb = (vm_kb(server.proc.pid, "VmRSS") - before_kb) / 1024  # type: ignore[union-attr]
        assert growth_mb < 2.5, f"{growth_mb:.1f} MB"  # 5.3 MB before
        server.check_running()
    finally:
        ensemble.kill_all()


def test_links_of_servers_no_membership_names_are_bounded(tmp_path: Path) -> None:
    """Without quorum authentication any process may link as a server no membership names
    (it may sync as a non-voting learner): 16 such links at once, the others closed."""
    ensemble = Ensemble(tmp_path, 3)
    ensemble.servers[1].launch()
    port = ensemble.ports[1][0]
    wait_until(lambda: listening(port), 20, "server 1's quorum port")
    socks = []
    try:
        socks = [open_as(port, 90 + index) for index in range(20)]
        time.sleep(1.0)  # every hello read
        closed = [closed_by_peer(sock, 0.05) for sock in socks]
        assert closed.count(True) == 4 and not any(closed[:16])
        assert "16 servers no membership names are linked" in ensemble.servers[1].log_path.read_text()
    finally:
        for sock in socks:
            sock.close()
        ensemble.kill_all()


def test_a_members_frame_is_bounded(tmp_path: Path) -> None:
    """A link that claims a member's id (from its host, its link down) sends frames of the
    record limit (64 MiB) at most: one announcing more is refused before it is read."""
    ensemble = Ensemble(tmp_path, 3)
    ensemble.servers[1].launch()
    port = ensemble.ports[1][0]
    wait_until(lambda: listening(port), 20, "server 1's quorum port")
    try:
        sock = open_as(port, 2)
        with sock:
            sock.sendall((MEMBER_FRAME_BYTES_MAX + 1).to_bytes(4, "big"))
            assert closed_by_peer(sock, 5.0)
        ensemble.servers[1].check_running()
    finally:
        ensemble.kill_all()
