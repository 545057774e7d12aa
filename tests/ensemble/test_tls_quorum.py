"""sslQuorum=true: a 3-server ensemble whose peer links are mutual TLS elects a leader,
replicates writes (quota usage included, identical on every server), and a server with a
certificate from another CA cannot join."""

from __future__ import annotations

from pathlib import Path

from tests.certs import Certs, make_certs
from zabby import SyncClient
from zabby.testing import Ensemble, wait_until
from zabby.tree import quota


def quorum_settings(certs: Certs, key_store: Path) -> dict[str, object]:
    return {
        "sslQuorum": "true",
        "ssl.quorum.keyStore.location": key_store,
        "ssl.quorum.keyStore.type": "PEM",
        "ssl.quorum.trustStore.location": certs.ca,
        "ssl.quorum.trustStore.type": "PEM",
    }


def _digests(group: Ensemble) -> set[str]:
    return {next(line for line in s.four_letter("mntr").splitlines() if line.startswith("zk_digest\t")) for s in group.servers.values()}


def test_an_ensemble_over_tls_replicates_quota_usage_alike(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    group = Ensemble(tmp_path, 3, tickTime=200, **quorum_settings(certs, certs.server))
    group.start()
    try:
        group.wait_leader()
        with SyncClient(group.hosts) as client:
            client.create("/app", b"a")
            client.create(quota.limits_path("/app"), b"count=10,bytes=-1", makepath=True)
            client.create(quota.stats_path("/app"), b"count=0,bytes=0")
            client.create("/app/x", b"12345")
        for server in group.servers.values():
            with SyncClient(server.hosts) as reader:
                reader.sync("/")
                assert reader.get(quota.stats_path("/app"))[0] == b"count=2,bytes=6"
        wait_until(lambda: len(_digests(group)) == 1, 10, "the same tree digest on every server")
        assert "TLS handshake" not in "".join(s.log_tail(400) for s in group.servers.values())
    finally:
        group.kill_all()


def test_a_server_with_an_untrusted_certificate_cannot_join(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    group = Ensemble(tmp_path, 3, tickTime=200, **quorum_settings(certs, certs.server))
    group.servers[3].config_path.write_text(group.servers[3].config_path.read_text().replace(str(certs.server), str(certs.stranger)))
    for server in (group.servers[1], group.servers[2]):
        server.launch()
    group.servers[3].launch()
    try:
        for server in (group.servers[1], group.servers[2]):
            server.wait_serving(30)
        wait_until(lambda: "TLS handshake" in group.servers[3].log_tail(400) + group.servers[1].log_tail(400), 20, "a refused handshake")
        assert group.servers[3].mode() not in ("leader", "follower")
    finally:
        group.kill_all()
