"""SASL for clients (zabby.sasl): DIGEST-MD5 against the users of a JAAS Server section,
as ZooKeeper 3.8 offers it, through kazoo's own ``sasl_options`` (pure-sasl) and ZooKeeper's
Java client (zkCli.sh); ``sasl:`` ACLs, the super user, and enforce.auth."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, NoAuthError, SessionClosedRequireSaslError
from kazoo.protocol.states import KazooState
from kazoo.security import ACL, Id

from zabby import SyncClient
from zabby.config import ConfigError, from_dict
from zabby.errors import AuthFailedError as ClientAuthFailedError
from zabby.errors import ConfigurationError as ClientConfigurationError
from zabby.sasl import DigestMd5Client, DigestMd5Server, JaasError, SaslFailure, jaas_users
from zabby.server.clients.session import AUTH_FAILURE_DELAY_S
from zabby.testing import ServerProcess, wait_until

puresasl_client = pytest.importorskip("puresasl.client")

JAAS = """
/* ZooKeeper's own form (its DigestLoginModule) */
Server {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    user_super="adminsecret"
    user_bob="bob\\"s secret";
};
Client {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    username="bob"
    password="bob\\"s secret";
};
"""
SASL_PROVIDER = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"


def _client(password: str) -> object:
    return puresasl_client.SASLClient(host="zk-sasl-md5", service="zookeeper", mechanism="DIGEST-MD5", username="bob", password=password)


def _exchange(server: DigestMd5Server, password: str) -> bytes:
    client = _client(password)
    challenge = server.step(client.process(None) or b"")
    return server.step(client.process(challenge))


def test_the_jaas_server_section_gives_the_users() -> None:
    assert jaas_users(JAAS) == {"super": "adminsecret", "bob": 'bob"s secret'}
    with pytest.raises(JaasError, match="no JAAS section Other"):
        jaas_users(JAAS, "Other")
    with pytest.raises(JaasError, match="no user"):
        jaas_users('Server { org.apache.zookeeper.server.auth.DigestLoginModule required; };')


def test_digest_md5_with_the_right_password_and_nothing_else() -> None:
    server = DigestMd5Server({"bob": "pw"})
    answer = _exchange(server, "pw")
    assert answer.startswith(b"rspauth=") and server.user == "bob"
    with pytest.raises(SaslFailure, match="already authenticated"):
        server.step(b"")
    with pytest.raises(SaslFailure, match="wrong password"):
        _exchange(DigestMd5Server({"bob": "other"}), "pw")
    with pytest.raises(SaslFailure, match="no such user"):
        _exchange(DigestMd5Server({"alice": "pw"}), "pw")
    # a response made for another server's nonce (a replay) fails
    first, second = DigestMd5Server({"bob": "pw"}), DigestMd5Server({"bob": "pw"})
    client = _client("pw")
    client.process(None)
    response = client.process(first.step(b""))
    second.step(b"")
    with pytest.raises(SaslFailure, match="another nonce"):
        second.step(response)
    for garbage in (b"\xff\xfe", b"username=", b'username="bob",username="eve"', b"x" * 5000):
        server = DigestMd5Server({"bob": "pw"})
        server.step(b"")
        with pytest.raises(SaslFailure):
            server.step(garbage)


def test_the_sasl_settings(tmp_path: Path) -> None:
    (tmp_path / "jaas.conf").write_text(JAAS)
    config = from_dict({"dataDir": str(tmp_path), "sasl.jaasConfig": "jaas.conf", "enforce.auth.enabled": "true",
                        "enforce.auth.schemes": "sasl", "superUser": "super"}, tmp_path)  # fmt: skip
    assert config.sasl_users == {"super": "adminsecret", "bob": 'bob"s secret'} and config.sasl_acls
    assert config.enforce_auth_schemes == {"sasl"} and config.sasl_super_user == "super"
    assert from_dict({"dataDir": str(tmp_path), "authProvider.1": SASL_PROVIDER}).sasl_acls
    with pytest.raises(ConfigError, match="not available"):
        from_dict({"dataDir": str(tmp_path), "sessionRequireClientSASLAuth": "true"})  # no SASL configured
    with pytest.raises(ConfigError, match="enforce.auth.enabled='maybe' is not a boolean"):  # the key, as written, named
        from_dict({"dataDir": str(tmp_path), "zookeeper.enforce.auth.enabled": "maybe"})
    with pytest.raises(ConfigError, match="authProvider"):
        from_dict({"dataDir": str(tmp_path), "authProvider.1": "com.example.Kerberos"})
    with pytest.raises(ConfigError, match="sasl.jaasConfig"):
        from_dict({"dataDir": str(tmp_path), "sasl.jaasConfig": "missing.conf"}, tmp_path)


@pytest.fixture(scope="module")
def sasl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = Path(tmp_path_factory.mktemp("sasl"))
    (folder / "jaas.conf").write_text(JAAS)
    server = ServerProcess(folder / "server", **{"sasl.jaasConfig": str(folder / "jaas.conf"), "authProvider.1": SASL_PROVIDER,
                                                 "superUser": "super"})  # fmt: skip
    server.start()
    yield server
    server.kill()


def _kazoo(server: ServerProcess, user: str | None = None, password: str = "") -> KazooClient:
    options = None if user is None else {"mechanism": "DIGEST-MD5", "username": user, "password": password}
    client = KazooClient(hosts=server.hosts, sasl_options=options, timeout=10, connection_retry={"max_tries": 0})
    client.start(timeout=10)
    return client


def test_kazoo_authenticates_by_sasl_and_sasl_acls_hold(sasl_server: ServerProcess) -> None:
    bob = _kazoo(sasl_server, "bob", 'bob"s secret')
    anonymous = _kazoo(sasl_server)
    superuser = _kazoo(sasl_server, "super", "adminsecret")
    try:
        bob.create("/bobs", b"mine", acl=[ACL(31, Id("sasl", "bob"))])
        assert bob.get("/bobs")[0] == b"mine" and bob.get_acls("/bobs")[0] == [ACL(31, Id("sasl", "bob"))]
        with pytest.raises(NoAuthError):
            anonymous.get("/bobs")
        assert superuser.get("/bobs")[0] == b"mine"  # superUser=super: the SASL user that may do anything
        bob.create("/mine-by-auth", b"", acl=[ACL(31, Id("auth", ""))])  # the "auth" scheme expands to sasl:bob
        assert bob.get_acls("/mine-by-auth")[0] == [ACL(31, Id("sasl", "bob"))]
        bob.delete("/bobs")
    finally:
        for client in (bob, anonymous, superuser):
            client.stop()
            client.close()


def test_a_wrong_sasl_password_is_refused(sasl_server: ServerProcess) -> None:
    client = KazooClient(hosts=sasl_server.hosts, sasl_options={"mechanism": "DIGEST-MD5", "username": "bob", "password": "wrong"},
                         timeout=10, connection_retry={"max_tries": 0})  # fmt: skip
    try:
        client.start(timeout=10)
    except AuthFailedError:
        pass
    try:  # kazoo says CONNECTED before its SASL exchange, then loses the session (AUTH_FAILED) once refused
        wait_until(lambda: client.state == KazooState.LOST, 10.0, "kazoo's session lost to AUTH_FAILED")
        assert not client.connected
    finally:
        client.stop()
        client.close()


def test_enforce_auth_lets_only_sasl_sessions_in(tmp_path: Path) -> None:
    (tmp_path / "jaas.conf").write_text(JAAS)
    server = ServerProcess(tmp_path / "server", **{"sasl.jaasConfig": str(tmp_path / "jaas.conf"), "enforce.auth.enabled": "true",
                                                   "enforce.auth.schemes": "sasl"})  # fmt: skip
    server.start()
    try:
        bob = _kazoo(server, "bob", 'bob"s secret')
        bob.create("/in", b"")
        bob.stop()
        plain = KazooClient(hosts=server.hosts, timeout=10, connection_retry={"max_tries": 0})
        plain.start(timeout=10)
        with pytest.raises(SessionClosedRequireSaslError):
            plain.get("/in")
        plain.stop()
    finally:
        server.kill()


def test_zookeepers_java_client_authenticates_by_sasl(sasl_server: ServerProcess, tmp_path: Path) -> None:
    from harness.local.zookeeper import ZooKeeperUnavailable, ensure_zookeeper

    try:
        ensure_zookeeper()
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"ZooKeeper's Java client cannot run here: {exc}")
    (tmp_path / "client-jaas.conf").write_text(JAAS)
    environment = {"CLIENT_JVMFLAGS": f"-Djava.security.auth.login.config={tmp_path / 'client-jaas.conf'} -Dzookeeper.sasl.client=true"}
    import os

    script = "create /javasasl x sasl:bob:cdrwa\nget /javasasl\ngetAcl /javasasl\nwhoami\ndelete /javasasl\nquit\n"
    done = subprocess.run(["/usr/share/zookeeper/bin/zkCli.sh", "-server", sasl_server.hosts], input=script, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **environment}, check=False)  # fmt: skip
    out = done.stdout + done.stderr
    assert "state:SaslAuthenticated" in out and "'sasl,'bob" in out and "sasl: bob" in out, out[-3000:]
    assert "Exception" not in out and "ConnectionLoss" not in out and "AuthFailed" not in out, out[-3000:]


def test_zabbys_client_side_of_digest_md5() -> None:
    server, client = DigestMd5Server({'bo"b': "p\\w"}), DigestMd5Client('bo"b', "p\\w")
    final = server.step(client.step(server.step(client.step(b"") or b"")) or b"")
    assert server.user == 'bo"b' and client.step(final) is None and client.complete
    liar = DigestMd5Client("bob", "pw")
    liar.step(b"")
    liar.step(b'realm="zk-sasl-md5",nonce="abc",qop="auth",charset=utf-8,algorithm=md5-sess')
    with pytest.raises(SaslFailure, match="rspauth"):
        liar.step(b"rspauth=00000000000000000000000000000000")  # a server that does not know the password


def test_zabbys_sync_client_authenticates_by_sasl(sasl_server: ServerProcess) -> None:
    with SyncClient(sasl_server.hosts, timeout=10, sasl_options={"mechanism": "DIGEST-MD5", "username": "bob", "password": 'bob"s secret'}) as bob:
        bob.create("/zabby-sasl", b"z", acl=[ACL(31, Id("sasl", "bob"))])
        assert bob.get("/zabby-sasl")[0] == b"z" and ("sasl", "bob") in bob.whoami()
        bob.delete("/zabby-sasl")
    with pytest.raises(ClientAuthFailedError, match="wrong password"):
        SyncClient(sasl_server.hosts, timeout=10, sasl_options={"mechanism": "DIGEST-MD5", "username": "bob", "password": "no"}).start()
    with pytest.raises(ClientConfigurationError, match="DIGEST-MD5 only"):
        SyncClient(sasl_server.hosts, sasl_options={"mechanism": "GSSAPI"})


def test_sasl_replies_are_zookeepers_records(sasl_server: ServerProcess) -> None:
    """processSasl's replies: header zxid 0, a SetSASLResponse even with an error (then the
    connection closes)."""
    from harness.local.jute_session import JuteSession
    from zabby.opcodes import OpCode
    from zabby.wire import jute

    with JuteSession(sasl_server.port) as session:
        session.connect()
        xid = session.send(OpCode.SASL, jute.GetSASLRequest(b""))
        payload = session.receive_frame()
        header = jute.ReplyHeader.decode(payload[:16])
        assert (header.xid, header.zxid, header.err) == (xid, 0, 0)
        assert b'realm="zk-sasl-md5"' in jute.SetSASLResponse.decode(payload[16:]).token
        sent = time.monotonic()
        xid = session.send(OpCode.SASL, jute.GetSASLRequest(b'username="bob",nonce="x",cnonce="y",nc=00000001,response=0,digest-uri="zookeeper/zk-sasl-md5"'))
        payload = session.receive_frame()
        assert time.monotonic() - sent >= AUTH_FAILURE_DELAY_S * 0.9  # a failure is answered late: guessing is slow
        assert jute.ReplyHeader.decode(payload[:16]) == jute.ReplyHeader(xid, 0, -115)  # AUTHFAILED
        assert jute.SetSASLResponse.decode(payload[16:]).token is None
        with pytest.raises(ConnectionError):
            session.receive_frame()


def test_a_response_in_utf8_fails_alike_for_a_user_that_exists_and_one_that_does_not() -> None:
    """A non-ASCII response was answered BADARGUMENTS at once for a user that exists, and
    AUTHFAILED after the failure delay for one that does not: an oracle of user names."""
    for user in ("bob", "nobody"):
        server = DigestMd5Server({"bob": "pw"})
        nonce = server.step(b"").decode().split('nonce="')[1].split('"')[0]
        response = f'username="{user}",nonce="{nonce}",cnonce="c",nc=00000001,response=é,digest-uri="zookeeper/zk-sasl-md5"'
        with pytest.raises(SaslFailure, match="wrong password, or no such user"):
            server.step(response.encode())


def test_sasl_guessing_is_slowed_by_source_address_not_by_connection(tmp_path: Path) -> None:
    """A delay per connection slowed nothing: 300 connections made 735-864 guesses a second,
    and a right answer came at once, so silence already meant "wrong".  Now each address has
    a bucket of attempts taken before the response is read: past it, even the right password
    is refused unread (AUTHFAILED, as for a wrong one), whichever connection it comes on."""
    from harness.local.jute_session import JuteSession
    from zabby.opcodes import OpCode
    from zabby.server.clients.throttle import ATTEMPTS_BURST
    from zabby.wire import jute

    (tmp_path / "jaas.conf").write_text(JAAS)
    server = ServerProcess(tmp_path / "server", **{"sasl.jaasConfig": str(tmp_path / "jaas.conf")})
    server.start()
    sessions = [JuteSession(server.port) for _ in range(2 * int(ATTEMPTS_BURST) + 1)]
    try:
        clients = [DigestMd5Client("bob", 'bob"s secret' if index == len(sessions) - 1 else "guess") for index in range(len(sessions))]
        challenges = []
        for session, client in zip(sessions, clients):
            session.connect()
            session.send(OpCode.SASL, jute.GetSASLRequest(client.step(b"") or b""))
            challenges.append(jute.SetSASLResponse.decode(session.receive_frame()[16:]).token)
        for session, client, challenge in zip(sessions, clients, challenges):  # every response at once
            session.send(OpCode.SASL, jute.GetSASLRequest(client.step(challenge) or b""))
        errors = [jute.ReplyHeader.decode(session.receive_frame()[:16]).err for session in sessions]
        throttled = int(server.mntr()["zk_auth_throttled_count"])
        assert throttled >= ATTEMPTS_BURST - 5 and errors.count(-115) >= throttled  # refused unread: AUTHFAILED whatever was sent
        time.sleep(0.6)  # the bucket fills again at its rate (ATTEMPTS_PER_S)
        with SyncClient(server.hosts, timeout=10, sasl_options={"mechanism": "DIGEST-MD5", "username": "bob", "password": 'bob"s secret'}) as bob:
            assert ("sasl", "bob") in bob.whoami()
    finally:
        for session in sessions:
            session.close()
        server.kill()
