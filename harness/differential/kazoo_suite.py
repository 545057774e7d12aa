"""kazoo's own test suite against zabby: a pytest plugin (``-p harness.differential.kazoo_suite``)
that lets kazoo's harness (``kazoo.testing``) start zabby servers where it would start
ZooKeeper's JVMs.  ``scripts/kazoo_suite.py`` runs the suite on either system.

The harness writes each server's zoo.cfg and launches ``java ... QuorumPeerMain zoo.cfg``; the
plugin turns that into ``python -m zabby.server.main`` on the same ports with the same
settings: the zoo.cfg keys as they are (zabby reads ZooKeeper's names), the harness's Java
system properties as the zoo.cfg keys they stand for (``readonlymode.enabled``, the super
digest, the JAAS file as ``sasl.jaasConfig``), and its TLS material as PEM files (zabby reads
no Java key stores).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from harness import CHECKOUT

QUORUM_PEER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
_PROPERTIES = {  # a Java system property of the harness -> the zoo.cfg key zabby reads
    "readonlymode.enabled": "readonlymode.enabled",
    "zookeeper.DigestAuthenticationProvider.superDigest": "superDigest",
}
_DROPPED_PREFIXES = ("ssl.keyStore.", "ssl.trustStore.")  # replaced by PEM files below


def zabby_config(java_args: list[str], server: Any) -> tuple[Path, list[str]]:
    """The zabby config for one of the harness's ``java`` command lines, and its command."""
    config_path = Path(java_args[-1])
    work = config_path.parent
    lines = [line for line in config_path.read_text().splitlines() if line.strip() and not line.startswith(_DROPPED_PREFIXES)]
    for arg in java_args:
        key, _, value = arg[2:].partition("=") if arg.startswith("-D") else ("", "", "")
        if key in _PROPERTIES:
            lines.append(f"{_PROPERTIES[key]}={value}")
        elif key == "java.security.auth.login.config" and Path(value).exists() and Path(value).read_text().strip():
            lines.append(f"sasl.jaasConfig={value}")
    lines += _pem_tls(work, getattr(server, "ssl_configuration", None) or {})
    target = work / "zabby.cfg"
    target.write_text("\n".join(lines) + "\n")
    return target, [sys.executable, "-m", "zabby.server.main", str(target)]


def _pem_tls(work: Path, ssl: dict[str, Any]) -> list[str]:
    """The harness's server key, certificate and CA as PEM files, for the secure client port."""
    if not ssl.get("server_key") or not ssl.get("server_cert"):
        return []
    from OpenSSL import crypto  # the harness's own dependency

    keystore, truststore = work / "server.pem", work / "ca.pem"
    keystore.write_bytes(crypto.dump_privatekey(crypto.FILETYPE_PEM, ssl["server_key"]) + crypto.dump_certificate(crypto.FILETYPE_PEM, ssl["server_cert"]))
    truststore.write_bytes(ssl["ca_cert_pem"])
    return [f"ssl.keyStore.location={keystore}", f"ssl.trustStore.location={truststore}"]


class _Subprocess:
    """``subprocess`` as kazoo.testing.common sees it: a ZooKeeper launch starts zabby."""

    PIPE, STDOUT, DEVNULL = subprocess.PIPE, subprocess.STDOUT, subprocess.DEVNULL
    server: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    def Popen(self, args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:  # noqa: N802 -- subprocess's name
        if args and args[0] == "java" and QUORUM_PEER_MAIN in args:
            config, args = zabby_config(list(args), self.server)
            log = (config.parent / "zabby.log").open("ab")
            kwargs = {**kwargs, "stdout": log, "stderr": subprocess.STDOUT, "cwd": CHECKOUT}
        return subprocess.Popen(args, **kwargs)


def pytest_configure(config: Any) -> None:
    from kazoo.testing import common

    shim = _Subprocess()
    common.subprocess = shim
    original_run = common.ManagedZooKeeper.run

    def run(self: Any) -> None:
        shim.server = self
        original_run(self)

    common.ManagedZooKeeper.run = run
