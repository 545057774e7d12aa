"""zoo.cfg parsing: ZooKeeper's keys, defaults derived from tickTime, and clear errors."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from zabby import config as zoo_config


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "zoo.cfg"
    path.write_text(text)
    return path


def test_defaults_follow_tick_time(tmp_path: Path) -> None:
    cfg = zoo_config.load(_write(tmp_path, "dataDir=data\ntickTime=1000\n# a comment\n\n"))
    assert cfg.data_dir == (tmp_path / "data").resolve() and cfg.data_log_dir == cfg.data_dir
    assert (cfg.session_timeout_ms_min, cfg.session_timeout_ms_max) == (2000, 20000)
    assert cfg.client_port == 2181 and cfg.snap_count == 100_000 and cfg.commit_log_count == 500
    assert cfg.four_letter_words == zoo_config.DEFAULT_4LW_WHITELIST
    assert cfg.standalone and cfg.purge_interval_hours == 1.0 and cfg.snap_retain_count == 3


def test_ensemble_lines_and_myid(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "myid").write_text("2\n")
    cfg = zoo_config.load(_write(tmp_path, "\n".join([
        "dataDir=data", "dataLogDir=logs", "4lw.commands.whitelist=*",
        "server.1=127.0.0.1:2888:3888", "server.2=127.0.0.1:2889:3889:participant",
        "server.3=127.0.0.1:2890:3890:observer;2183",
    ])))  # fmt: skip
    assert cfg.server_id == 2 and not cfg.standalone
    assert [(p.sid, p.quorum_port, p.election_port, p.observer) for p in cfg.peers] == [
        (1, 2888, 3888, False), (2, 2889, 3889, False), (3, 2890, 3890, True),
    ]  # fmt: skip
    assert cfg.peers[2].client_port == 2183
    assert cfg.four_letter_words == zoo_config.ALL_4LW
    assert cfg.data_log_dir == (tmp_path / "logs").resolve()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tickTime=2000\n", "dataDir is required"),
        ("dataDir=d\ntickTime=fast\n", "tickTime='fast' is not an integer"),
        ("dataDir=d\ntickTime=0\n", "tickTime=0 must be at least 1"),
        ("dataDir=d\nadmin.enableServer=maybe\n", "is not a boolean"),
        ("dataDir=d\nminSessionTimeout=9000\nmaxSessionTimeout=100\n", "minSessionTimeout must not exceed"),
        ("dataDir=d\nserver.1=127.0.0.1:2888\n", "expected host:quorumPort:electionPort"),
        ("dataDir=d\nserver.1=127.0.0.1:2888:3888:witness\n", "unknown role"),
        ("dataDir=d\nelectionAlg=1\n", "only 3 (fast leader election)"),
        ("dataDir=d\nserver.1=127.0.0.1:2888:3888\n", "myid must hold this server's id"),
        ("dataDir=d\nnot a key value line\n", "expected key=value"),
    ],
)
def test_bad_values_are_clear_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(zoo_config.ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        zoo_config.load(_write(tmp_path, text))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(zoo_config.ConfigError, match="cannot read config"):
        zoo_config.load(tmp_path / "nope.cfg")


@pytest.fixture
def root_logger_kept(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The server's ``main`` sets the root logger up (level INFO, a handler on this test's
    captured stderr); it goes back after the test.  Left behind, a later record (py4j's, from
    a Spark gateway closed at interpreter exit) met the closed stream: a "Logging error"."""
    root = logging.getLogger()
    level = root.level
    monkeypatch.setattr(root, "handlers", [])  # main's handler goes into this list, dropped after
    yield
    root.setLevel(level)


def test_server_main_reports_config_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], root_logger_kept: None) -> None:
    from zabby.server.main import main

    assert main([str(_write(tmp_path, "tickTime=x\n"))]) == 2
    assert "zabby-server:" in capsys.readouterr().err


def test_tls_and_quota_keys(tmp_path: Path) -> None:
    (tmp_path / "zoo.cfg").write_text(
        "dataDir=data\nsecureClientPort=2281\nssl.keyStore.location=keys/server.pem\nssl.keyStore.type=PEM\n"
        "ssl.trustStore.location=keys/ca.pem\nssl.clientAuth=want\nssl.enabledProtocols=TLSv1.3\n"
        "sslQuorum=true\nssl.quorum.keyStore.location=keys/peer.pem\nssl.quorum.trustStore.location=keys/ca.pem\n"
        "zookeeper.enforceQuota=true\nserverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n"
    )
    config = zoo_config.load(tmp_path / "zoo.cfg")
    assert config.client_port is None  # only the secure port, as ZooKeeper without clientPort
    assert config.secure_client_port == 2281 and config.enforce_quota
    assert config.client_tls == zoo_config.TlsConfig(key_store=tmp_path / "keys/server.pem", trust_store=tmp_path / "keys/ca.pem",
                                                     client_auth="want", protocols=("TLSv1.3",))  # fmt: skip
    assert config.quorum_tls is not None and config.quorum_tls.key_store == tmp_path / "keys/peer.pem"
    assert config.quorum_tls.client_auth == "need" and config.extra == {}


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ("secureClientPort=2281\n", "ssl.keyStore.location is required"),
        ("secureClientPort=2281\nssl.keyStore.location=k.jks\n", "zabby reads PEM files only"),
        ("secureClientPort=2281\nssl.keyStore.location=k.pem\nssl.keyStore.type=PKCS12\n", "zabby reads PEM files only"),
        ("secureClientPort=2281\nssl.keyStore.location=k.pem\nssl.clientAuth=maybe\n", "ssl.clientAuth='maybe'"),
        ("secureClientPort=2281\nssl.keyStore.location=k.pem\nssl.protocol=SSLv3\n", "ssl.enabledProtocols: SSLv3"),
        ("sslQuorum=true\n", "ssl.quorum.keyStore.location is required"),
    ],
)
def test_bad_tls_settings_are_clear_errors(tmp_path: Path, lines: str, message: str) -> None:
    (tmp_path / "zoo.cfg").write_text("dataDir=data\n" + lines)
    with pytest.raises(zoo_config.ConfigError, match=message.replace("(", r"\(")):
        zoo_config.load(tmp_path / "zoo.cfg")


def test_client_configuration_is_zookeepers_properties(tmp_path: Path) -> None:
    (tmp_path / "client.properties").write_text(
        "# zkCli -client-configuration\nzookeeper.client.secure=true\nzookeeper.ssl.keyStore.location=client.pem\n"
        "zookeeper.ssl.keyStore.password: secret\n! a comment\nzookeeper.ssl.trustStore.location=ca.pem\n"
    )
    config = zoo_config.load_client_configuration(tmp_path / "client.properties")
    assert config.client_options() == {"use_ssl": True, "certfile": str(tmp_path / "client.pem"), "keyfile_password": "secret",
                                       "ca": str(tmp_path / "ca.pem"), "check_hostname": True}  # fmt: skip
    (tmp_path / "plain.properties").write_text("zookeeper.client.secure=false\n")
    assert zoo_config.load_client_configuration(tmp_path / "plain.properties").client_options() == {}
    (tmp_path / "jks.properties").write_text("zookeeper.ssl.trustStore.type=JKS\n")
    with pytest.raises(zoo_config.ConfigError, match="PEM files only"):
        zoo_config.load_client_configuration(tmp_path / "jks.properties")
def test_console_keys(tmp_path: Path) -> None:
    cfg = zoo_config.load(_write(tmp_path, "dataDir=data\n"))
    assert cfg.console_enabled and cfg.console_address == "127.0.0.1" and cfg.console_auth is None
    digest = "admin:fvr2cB/fjGeAiX8g1aGhUm3ZICk="  # zabby-admin digest admin:secret
    cfg = zoo_config.load(_write(tmp_path, f"dataDir=data\nadmin.console.auth={digest}\nadmin.console.address=0.0.0.0\n"))
    assert cfg.console_auth == digest and cfg.console_address == "0.0.0.0"
    for bad in ("admin:secret", "admin", ":fvr2cB/fjGeAiX8g1aGhUm3ZICk=", "admin:bm90IDIwIGJ5dGVz"):
        with pytest.raises(zoo_config.ConfigError, match="admin.console.auth=.*zabby-admin digest"):
            zoo_config.load(_write(tmp_path, f"dataDir=data\nadmin.console.auth={bad}\n"))


def test_the_peer_protocol_bridge_is_off_by_default_and_plain_text_without_reconfig(tmp_path: Path) -> None:
    servers = "dataDir=data\nserver.1=127.0.0.1:2888:3888\nserver.2=127.0.0.1:2889:3889\n"
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "myid").write_text("1\n")
    plain = zoo_config.load(_write(tmp_path, servers))
    assert not plain.quorum_bridge and not plain.zookeeper_peers
    bridged = zoo_config.load(_write(tmp_path, servers + "quorum.protocol.bridge=true\n"))
    assert bridged.quorum_bridge and bridged.zookeeper_peers and bridged.quorum_protocol == zoo_config.ZABBY_PROTOCOL
    with pytest.raises(zoo_config.ConfigError, match="quorum.protocol.bridge=true does not go with reconfigEnabled=true"):
        zoo_config.load(_write(tmp_path, servers + "quorum.protocol.bridge=true\nreconfigEnabled=true\n"))
    with pytest.raises(zoo_config.ConfigError, match="quorum.protocol.bridge"):
        zoo_config.load(_write(tmp_path, servers + "quorum.protocol.bridge=maybe\n"))
