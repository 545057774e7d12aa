"""Certificates made for a test: one CA, a server certificate for 127.0.0.1 and localhost, a
client certificate, and a CA nobody trusts, written as the PEM files zoo.cfg's ``ssl.*`` keys
and kazoo's arguments name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme


@dataclass(frozen=True)
class Certs:
    ca: Path  # the trust store: the CA's certificate
    server: Path  # the server's key store: key and certificate chain in one PEM
    client: Path  # a client's key and certificate chain in one PEM
    stranger: Path  # key and certificate signed by a CA the server does not trust


def _write_key_store(cert: trustme.LeafCert, path: Path) -> Path:
    path.write_bytes(cert.private_key_pem.bytes() + b"".join(pem.bytes() for pem in cert.cert_chain_pems))
    return path


def make_certs(folder: Path) -> Certs:
    folder.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    return Certs(
        ca=folder / "ca.pem",
        server=_write_key_store(ca.issue_cert("127.0.0.1", "localhost"), folder / "server.pem"),
        client=_write_key_store(ca.issue_cert("client.zabby.test"), folder / "client.pem"),
        stranger=_write_key_store(trustme.CA().issue_cert("127.0.0.1"), folder / "stranger.pem"),
    )


def secure_port_settings(certs: Certs, port: int, client_auth: str = "need") -> dict[str, object]:
    """zoo.cfg lines of a secure client port with these certificates."""
    return {
        "secureClientPort": port,
        "ssl.keyStore.location": certs.server,
        "ssl.keyStore.type": "PEM",
        "ssl.trustStore.location": certs.ca,
        "ssl.trustStore.type": "PEM",
        "ssl.clientAuth": client_auth,
    }
