"""TLS contexts for the secure client port, the quorum links and the clients.

The settings come from ``zabby.config`` (zoo.cfg's ``ssl.*`` and ``ssl.quorum.*`` keys, the
client's ``-client-configuration`` file) or from kazoo's client arguments; this module only
turns them into ``ssl.SSLContext``s, reading the PEM files they name.  A file that cannot be
read or does not hold what it should is a ``TlsSetupError`` naming the setting, so a server
refuses to start, and a client to connect, with a message that says what to fix.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from zabby.config import TlsConfig

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "want": ssl.CERT_OPTIONAL, "need": ssl.CERT_REQUIRED}


class TlsSetupError(ValueError):
    """A key, certificate or CA file named in the settings cannot be used."""


def server_context(tls: TlsConfig, what: str = "ssl.") -> ssl.SSLContext:
    """The context a listener wraps its connections in; ``what`` names the keys in errors."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(context, tls.protocols)
    _load_chain(context, tls.key_store, None, tls.key_store_password, f"{what}keyStore.location")
    if tls.trust_store is not None:
        _load_trust(context, tls.trust_store, f"{what}trustStore.location")
    elif tls.client_auth != "none":
        raise TlsSetupError(f"{what}clientAuth={tls.client_auth} needs {what}trustStore.location (the CA that signs client certificates)")
    context.verify_mode = _CLIENT_AUTH[tls.client_auth]
    _ciphers(context, tls.ciphers, f"{what}ciphersuites")
    return context


def peer_client_context(tls: TlsConfig) -> ssl.SSLContext:
    """The context a server dials its peers with (mutual TLS: it shows its own certificate)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(context, tls.protocols)
    _load_chain(context, tls.key_store, None, tls.key_store_password, "ssl.quorum.keyStore.location")
    if tls.trust_store is None:
        raise TlsSetupError("sslQuorum=true needs ssl.quorum.trustStore.location (the CA that signs the servers' certificates)")
    _load_trust(context, tls.trust_store, "ssl.quorum.trustStore.location")
    context.check_hostname = tls.hostname_verification
    _ciphers(context, tls.ciphers, "ssl.quorum.ciphersuites")
    return context


def client_context(
    *,
    ca: str | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
    keyfile_password: str | None = None,
    verify_certs: bool = True,
    check_hostname: bool = False,
) -> ssl.SSLContext:
    """A client's context, with kazoo's arguments and defaults (``create_tcp_connection``):
    the system's CAs plus ``ca``, the server's name unchecked unless ``check_hostname``, and
    a client certificate when ``certfile`` is given (``keyfile`` may be in the same PEM)."""
    if check_hostname and not verify_certs:
        raise TlsSetupError("verify_certs must be True when check_hostname is True")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    context.check_hostname = check_hostname
    context.verify_mode = ssl.CERT_REQUIRED if verify_certs else ssl.CERT_NONE
    if ca:
        _load_trust(context, Path(ca), "ca")
    if certfile:
        _load_chain(context, Path(certfile), Path(keyfile) if keyfile else None, keyfile_password, "certfile/keyfile")
    return context


def _versions(context: ssl.SSLContext, protocols: tuple[str, ...]) -> None:
    versions = sorted(_VERSIONS[name] for name in protocols)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]


def _load_chain(context: ssl.SSLContext, certfile: Path, keyfile: Path | None, password: str | None, what: str) -> None:
    try:
        context.load_cert_chain(certfile, keyfile, password)
    except (OSError, ssl.SSLError) as exc:
        raise TlsSetupError(f"{what}={certfile}: cannot load a PEM private key and certificate from it ({_reason(exc)})") from None


def _load_trust(context: ssl.SSLContext, cafile: Path, what: str) -> None:
    try:
        context.load_verify_locations(cafile=cafile)
    except (OSError, ssl.SSLError) as exc:
        raise TlsSetupError(f"{what}={cafile}: cannot load PEM CA certificates from it ({_reason(exc)})") from None


def _ciphers(context: ssl.SSLContext, ciphers: str | None, what: str) -> None:
    if ciphers:
        try:
            context.set_ciphers(ciphers)
        except ssl.SSLError:
            raise TlsSetupError(f"{what}={ciphers!r}: no cipher suite in it is known to OpenSSL") from None


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
