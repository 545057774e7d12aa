"""What a process on the same host that knows the peer protocol can do, on default settings
(issue 43).  Each of these once worked."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl

from tests.ensemble.forged_peer import closed_by_peer, listening, open_as, send_as, vm_kb
from zabby.client.fourletter import srvr
from zabby.core.messages import Commit, FollowerInfo, Notification, Proposal, Request
from zabby.membership import Member, Membership
from zabby.opcodes import OpCode
from zabby.testing import Ensemble, wait_until
from zabby.tree.txns import Txn


def test_a_vote_from_a_server_that_is_no_member_changes_no_membership(tmp_path: Path) -> None:
    """One notification from server 99 carrying a membership, to a server electing a leader,
    became its configuration on disk, and then every server's: none could start again."""
    ensemble = Ensemble(tmp_path, 3)
    lonely = ensemble.servers[1]
    lonely.launch()  # alone: it looks for a leader for as long as the others are down
    try:
        wait_until(lambda: listening(ensemble.ports[1][1]), 20, "server 1's election port")
        forged = Membership.of([Member(99, "127.0.0.1", 1, 1)], 2**40).text()
        vote = Notification(leader=99, zxid=2**50, peer_epoch=99, election_epoch=1, state="looking", config=forged, proposed=forged, logged=2**50)
        for _ in range(3):
            send_as(ensemble.ports[1][1], 99, [vote], hold_s=0.3)
        for server in (ensemble.servers[2], ensemble.servers[3]):
            server.launch()
        for server in ensemble.servers.values():
            server.wait_serving(30)
        assert "server.99" not in lonely.four_letter("conf")
        lonely.restart()  # what it keeps on disk is the ensemble's membership
        assert lonely.mode() in ("leader", "follower")
    finally:
        ensemble.kill_all()


def test_a_process_that_claims_a_server_id_writes_nothing_past_acls_and_ends_no_session(tmp_path: Path) -> None:
    """Any sid was taken as a learner, its forwarded Requests right after FOLLOWERINFO, and
    the superuser flag they carried believed: a digest-protected znode was overwritten and a
    victim's session closed, its ephemeral lock deleted."""
    ensemble = Ensemble(tmp_path, 3)
    ensemble.start()
    owner = KazooClient(hosts=ensemble.hosts, timeout=10, auth_data=[("digest", "alice:secret")])
    owner.start(timeout=20)
    try:
        owner.create("/secret", b"mine", acl=[make_digest_acl("alice", "secret", all=True)])
        owner.create("/lock", b"", ephemeral=True)
        victim_session = owner.client_id[0]
        leader = next(sid for sid, server in ensemble.servers.items() if server.mode() == "leader")
        follower = next(sid for sid in ensemble.servers if sid != leader)
        info = FollowerInfo(accepted_epoch=2**20, last_zxid=0)
        attacks = [
            Request(session_id=victim_session, cxid=1, op=int(OpCode.SET_DATA), args=("/secret", b"stolen", -1), auth_ids=(), superuser=True),
            Request(session_id=0, cxid=2, op=int(OpCode.SET_DATA), args=("/secret", b"stolen", -1), auth_ids=(), superuser=True),
            Request(session_id=victim_session, cxid=3, op=int(OpCode.CLOSE_SESSION), args=(), auth_ids=(), superuser=True),
        ]
        for claimed in (99, follower):  # a stranger, and a member's id (not synced on this link)
            send_as(ensemble.ports[leader][0], claimed, [info, *attacks], hold_s=1.0)
        time.sleep(1.0)
        reader = KazooClient(hosts=ensemble.hosts, timeout=10)
        reader.start(timeout=20)
        try:
            try:
                reader.get("/secret")
                raise AssertionError("the protected znode is readable without its digest")
            except NoAuthError:
                pass
            assert reader.exists("/lock") is not None  # the victim's session lives
        finally:
            reader.stop()
            reader.close()
        assert owner.get("/secret")[0] == b"mine"
        wait_until(lambda: all(s.mode() in ("leader", "follower") for s in ensemble.servers.values()), 30, "the ensemble serving")
    finally:
        owner.stop()
        owner.close()
        ensemble.kill_all()


def test_a_hello_cannot_take_a_live_members_link_nor_claim_a_member_from_another_host(tmp_path: Path) -> None:
    """A hello that claimed a member's id replaced that member's link."""
    ensemble = Ensemble(tmp_path, 3)
    ensemble.start()
    try:
        leader = next(sid for sid, server in ensemble.servers.items() if server.mode() == "leader")
        follower = next(sid for sid in ensemble.servers if sid != leader)
        impostor = open_as(ensemble.ports[leader][0], follower)  # from the member's own host: its link is live
        stranger_host = open_as(ensemble.ports[leader][0], follower, source="127.0.0.2")
        assert closed_by_peer(impostor) and closed_by_peer(stranger_host)
        log = ensemble.servers[leader].log_path.read_text()
        assert f"link for server {follower}" in log or "its link is live" in log
        client = KazooClient(hosts=ensemble.servers[follower].hosts, timeout=10)
        client.start(timeout=20)
        try:
            client.create("/through-the-follower", b"ok")  # its link to the leader still carries its writes
        finally:
            client.stop()
            client.close()
    finally:
        ensemble.kill_all()


def test_peer_ports_hold_no_more_than_a_bounded_amount_for_strangers(tmp_path: Path) -> None:
    """8 links each holding an unfinished 59 MiB frame took a follower from 36 to 527 MB."""
    ensemble = Ensemble(tmp_path, 3)
    ensemble.start()
    socks = []
    try:
        target = ensemble.servers[1]
        pid = target.proc.pid  # type: ignore[union-attr]
        before_kb = vm_kb(pid, "VmRSS")
        chunk = b"\x00" * (1 << 20)
        for index in range(8):
            sock = open_as(ensemble.ports[1][0], 90 + index)  # servers no membership names
            sock.sendall((59 * 2**20).to_bytes(4, "big"))
            try:
                for _ in range(58):
                    sock.sendall(chunk)
            except OSError:
                pass  # refused: its frame is over a stranger's limit
            socks.append(sock)
        silent = [socket.create_connection(("127.0.0.1", ensemble.ports[1][0]), timeout=5) for _ in range(40)]
        socks.extend(silent)  # never say who they are
        assert all(closed_by_peer(sock, 5.0) for sock in silent)  # the hello's deadline
        growth_mb = (vm_kb(pid, "VmHWM") - before_kb) / 1024
        assert growth_mb < 100, f"{growth_mb:.0f} MB"
        assert target.mode() in ("leader", "follower")
    finally:
        for sock in socks:
            sock.close()
        ensemble.kill_all()


def _auth(tmp_path: Path, secret: bytes, required: bool = True) -> dict[str, object]:
    path = tmp_path / f"secret-{secret.hex()[:8]}"
    path.write_bytes(secret)
    return {"quorum.auth.enabled": "true", "quorum.auth.secretFile": path, "quorum.auth.required": str(required).lower()}


def test_with_quorum_authentication_a_peer_without_the_secret_is_not_heard(tmp_path: Path) -> None:
    """With quorum.auth on, the ensemble works, and a process without the secret gets no link:
    its vote and its forwarded writes are never read."""
    ensemble = Ensemble(tmp_path, 3, **_auth(tmp_path, b"0123456789abcdef-the-secret"))
    ensemble.start()
    try:
        leader = next(sid for sid, server in ensemble.servers.items() if server.mode() == "leader")
        client = KazooClient(hosts=ensemble.hosts, timeout=10)
        client.start(timeout=20)
        client.create("/with-auth", b"ok")
        victim = client.client_id[0]
        closing = Request(session_id=victim, cxid=1, op=int(OpCode.CLOSE_SESSION), args=(), auth_ids=(), superuser=True)
        for claimed in (99, leader % 3 + 1):
            send_as(ensemble.ports[leader][0], claimed, [FollowerInfo(accepted_epoch=2**20, last_zxid=0), closing], hold_s=0.5)
        time.sleep(0.5)
        assert client.exists("/with-auth") is not None and client.client_id[0] == victim  # its session lives
        client.stop()
        client.close()
        log = ensemble.servers[leader].log_path.read_text()
        assert "does not authenticate" in log
    finally:
        ensemble.kill_all()


def test_a_server_with_another_secret_cannot_join_and_the_upgrade_step_takes_both(tmp_path: Path) -> None:
    """Rolling upgrade: with quorum.auth.required=false links authenticate where both ends do
    and are taken unauthenticated otherwise; with it true, a wrong secret keeps a server out."""
    upgrading = Ensemble(tmp_path / "upgrade", 3)
    for sid in (1, 2):  # already upgraded; server 3 still without quorum.auth
        upgrading.servers[sid].config_path.write_text(upgrading.servers[sid].config_path.read_text() + "".join(
            f"{key}={value}\n" for key, value in _auth(tmp_path, b"0123456789abcdef-the-secret", required=False).items()))
    upgrading.start()
    upgrading.kill_all()
    strict = Ensemble(tmp_path / "strict", 3, **_auth(tmp_path, b"0123456789abcdef-the-secret"))
    wrong = strict.servers[3]
    wrong.config_path.write_text(wrong.config_path.read_text().replace(str(tmp_path / "secret-30313233"), str(tmp_path / "secret-wrong")))
    (tmp_path / "secret-wrong").write_bytes(b"0123456789abcdef-another-one")
    try:
        for sid in (1, 2):
            strict.servers[sid].launch()
        wrong.launch()
        for sid in (1, 2):
            strict.servers[sid].wait_serving(30)
        time.sleep(2.0)
        assert wrong.mode() != "follower" and wrong.mode() != "leader"  # it never joins
        assert "proof is wrong" in strict.servers[1].log_path.read_text() + strict.servers[2].log_path.read_text()
    finally:
        strict.kill_all()


def test_a_process_that_claims_the_leaders_id_puts_nothing_in_a_followers_log(tmp_path: Path) -> None:
    """A hello claiming the leader's id to a follower, then PROPOSAL and COMMIT: the follower
    applied the txn (and undid it at its resync 5 ms later)."""
    ensemble = Ensemble(tmp_path, 3)
    ensemble.start()
    try:
        leader = next(sid for sid, server in ensemble.servers.items() if server.mode() == "leader")
        follower = next(sid for sid in ensemble.servers if sid != leader)
        epoch = int(srvr(ensemble.servers[follower].port)["Zxid"], 16) >> 32
        zxid = (epoch << 32) | 0xFFFF
        forged = Txn(zxid, 0, 1, 0, int(OpCode.CREATE), ("/injected", b"", ((31, "world", "anyone"),), 0, 1))
        send_as(ensemble.ports[follower][0], leader, [Proposal(txns=(forged,)), Commit(zxid=zxid)], hold_s=1.0)
        client = KazooClient(hosts=ensemble.servers[follower].hosts, timeout=10)
        client.start(timeout=20)
        try:
            assert client.exists("/injected") is None
        finally:
            client.stop()
            client.close()
        assert "its link is live" in ensemble.servers[follower].log_path.read_text()
        mntr = ensemble.servers[follower].four_letter("mntr")
        assert "zk_core_restarts_count\t0" in mntr  # it never applied it (and had to repair itself from disk)
    finally:
        ensemble.kill_all()
