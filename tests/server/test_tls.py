"""TLS on the secure client port: kazoo, zabby's clients and zabby-cli over it, mutual TLS,
plaintext clients told so while the server goes on, and a bad key store stopping the start."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError as KazooLibTimeout

from tests import ROOT
from tests.certs import Certs, make_certs, secure_port_settings
from zabby import SyncClient
from zabby.client.exceptions import KazooTimeoutError
from zabby.errors import AuthFailedError
from zabby.testing import ServerProcess, free_port


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _server(folder: Path, certs: Certs, client_auth: str) -> Iterator[ServerProcess]:
    secure_port = free_port()
    server = ServerProcess(folder, **secure_port_settings(certs, secure_port, client_auth))
    server.secure_hosts = f"127.0.0.1:{secure_port}"  # type: ignore[attr-defined]
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mutual(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[ServerProcess]:
    """A server whose secure port needs a client certificate (ssl.clientAuth=need)."""
    yield from _server(tmp_path_factory.mktemp("mutual"), certs, "need")


def secure(server: ServerProcess) -> str:
    return server.secure_hosts  # type: ignore[attr-defined,no-any-return]


def test_kazoo_over_tls_with_a_client_certificate(mutual: ServerProcess, certs: Certs) -> None:
    client = KazooClient(secure(mutual), use_ssl=True, ca=str(certs.ca), certfile=str(certs.client), keyfile=str(certs.client), timeout=5)
    client.start(timeout=15)
    try:
        client.create("/kazoo-tls", b"secret")
        assert client.get("/kazoo-tls")[0] == b"secret"
    finally:
        client.stop()
        client.close()
    with SyncClient(mutual.hosts) as plain:  # the same tree on the plaintext port
        assert plain.get("/kazoo-tls")[0] == b"secret"


def test_zabby_client_over_mutual_tls_and_refused_without_a_certificate(mutual: ServerProcess, certs: Certs) -> None:
    with SyncClient(secure(mutual), use_ssl=True, ca=str(certs.ca), certfile=str(certs.client), check_hostname=True) as client:
        client.create("/zabby-tls", b"1")
        assert client.exists("/zabby-tls") is not None
    for certfile in (None, str(certs.stranger)):  # no certificate, one the server does not trust
        client = SyncClient(secure(mutual), use_ssl=True, ca=str(certs.ca), certfile=certfile, timeout=2)
        with pytest.raises(KazooTimeoutError, match="Connection time-out: 127.0.0.1"):
            client.start(timeout=3)
    assert "TLS handshake with 127.0.0.1" in mutual.log_tail(200)


def test_the_client_checks_the_servers_certificate(mutual: ServerProcess, certs: Certs) -> None:
    client = SyncClient(secure(mutual), use_ssl=True, certfile=str(certs.client), timeout=2)  # the system CAs only
    with pytest.raises(KazooTimeoutError, match="CERTIFICATE_VERIFY_FAILED"):
        client.start(timeout=3)
    with SyncClient(secure(mutual), use_ssl=True, certfile=str(certs.client), verify_certs=False) as unchecked:
        assert unchecked.exists("/") is not None


def test_plaintext_clients_on_the_secure_port_are_told_and_the_server_goes_on(mutual: ServerProcess) -> None:
    client = SyncClient(secure(mutual), timeout=2)
    with pytest.raises(AuthFailedError, match="is a secure client port .*connect with TLS, or in plaintext to clientPort"):
        client.start(timeout=10)
    with socket.create_connection(("127.0.0.1", int(secure(mutual).rsplit(":", 1)[1])), timeout=5) as sock:
        sock.sendall(b"ruok")
        assert b"secure client port" in sock.recv(4096)
    kazoo = KazooClient(secure(mutual), timeout=1)  # jute has no way to carry a reason: closed
    with pytest.raises(KazooLibTimeout):
        kazoo.start(timeout=2)
    kazoo.stop()
    kazoo.close()
    assert mutual.proc is not None and mutual.proc.poll() is None
    assert mutual.four_letter("ruok") == "imok"
    assert "spoke plaintext on the secure client port" in mutual.log_tail(200)


def test_want_takes_clients_with_or_without_a_certificate(tmp_path: Path, certs: Certs) -> None:
    for server in _server(tmp_path, certs, "want"):
        with SyncClient(secure(server), use_ssl=True, ca=str(certs.ca)) as anonymous:
            anonymous.create("/anonymous")
        with SyncClient(secure(server), use_ssl=True, ca=str(certs.ca), certfile=str(certs.client)) as known:
            assert known.exists("/anonymous") is not None


def test_zabby_cli_with_a_client_configuration(mutual: ServerProcess, certs: Certs, tmp_path: Path) -> None:
    properties = tmp_path / "client.properties"
    properties.write_text(
        "zookeeper.client.secure=true\n"
        "zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty\n"
        f"zookeeper.ssl.keyStore.location={certs.client}\nzookeeper.ssl.keyStore.type=PEM\n"
        f"zookeeper.ssl.trustStore.location={certs.ca}\nzookeeper.ssl.trustStore.type=PEM\n"
    )
    run = [sys.executable, "-m", "zabby.cli.main", "-server", secure(mutual), "-client-configuration", str(properties)]
    env = dict(os.environ, ZABBY_CLI_HISTORY="")
    created = subprocess.run([*run, "create", "/cli-tls", "hello"], check=False, capture_output=True, text=True, timeout=30, cwd=ROOT, env=env)
    assert (created.returncode, created.stdout) == (0, "Created /cli-tls\n"), created.stderr
    got = subprocess.run([*run, "get", "/cli-tls"], check=False, capture_output=True, text=True, timeout=30, cwd=ROOT, env=env)
    assert (got.returncode, got.stdout) == (0, "hello\n"), got.stderr


def test_a_key_store_that_cannot_be_read_stops_the_start(tmp_path: Path, certs: Certs) -> None:
    settings = secure_port_settings(certs, free_port()) | {"ssl.keyStore.location": certs.ca}  # a certificate, no key
    server = ServerProcess(tmp_path, **settings)
    result = subprocess.run([sys.executable, "-m", "zabby.server.main", str(server.config_path)],
                            check=False, capture_output=True, text=True, timeout=30, cwd=ROOT)  # fmt: skip
    assert result.returncode == 2
    assert f"ssl.keyStore.location={certs.ca}: cannot load a PEM private key and certificate" in result.stderr
