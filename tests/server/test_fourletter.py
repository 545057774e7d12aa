"""Four-letter words in ZooKeeper's formats, the whitelist, and the admin HTTP endpoint."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from harness.local.admin import admin_json, admin_settings
from tests.server.wire import raw_session
from zabby.server.adminport import fourletter
from zabby.testing import ServerProcess


def test_ruok_srvr_mntr_have_true_values(zabby_server: ServerProcess) -> None:
    assert zabby_server.four_letter("ruok") == "imok"
    before = zabby_server.mntr()
    session = raw_session(zabby_server.port)
    session.create("/a", b"12345")
    session.create("/a/e", b"", mode=1)
    session.call(4, "/a", True)
    after = zabby_server.mntr()
    assert after["zk_server_state"] == "standalone"
    assert int(after["zk_znode_count"]) == int(before["zk_znode_count"]) + 2
    assert int(after["zk_ephemerals_count"]) == 1
    assert int(after["zk_watch_count"]) == 1
    assert int(after["zk_num_alive_connections"]) >= 2
    assert int(after["zk_approximate_data_size"]) > int(before["zk_approximate_data_size"])
    assert int(after["zk_last_zxid"], 16) == session.call(3, "/a", False)[1]
    assert float(after["zk_max_latency"]) >= float(after["zk_min_latency"]) >= 0
    assert int(after["zk_cnt_fsynctime"]) >= 2
    for key in ("zk_version", "zk_avg_latency", "zk_outstanding_requests", "zk_packets_received", "zk_open_file_descriptor_count"):
        assert key in after
    srvr = zabby_server.four_letter("srvr")
    assert "Mode: standalone" in srvr and "Node count:" in srvr and "Zxid: 0x" in srvr
    assert srvr.startswith("Zookeeper version: ")


def test_other_words(zabby_server: ServerProcess) -> None:
    session = raw_session(zabby_server.port)
    session.create("/w")
    session.call(4, "/w", True)
    assert zabby_server.four_letter("isro") == "rw"
    assert "clientPort=" in zabby_server.four_letter("conf")
    assert zabby_server.four_letter("envi").startswith("Environment:\nzookeeper.version=")
    assert "Total watches:1" in zabby_server.four_letter("wchs")
    assert "/w" in zabby_server.four_letter("wchc")
    assert zabby_server.four_letter("wchp").startswith("/w\n\t0x")
    assert f"sid=0x{session.session_id:x}" in zabby_server.four_letter("cons")
    assert "SessionTracker dump:" in zabby_server.four_letter("dump")
    assert "datadir_size: " in zabby_server.four_letter("dirs")
    assert "Clients:" in zabby_server.four_letter("stat")
    assert zabby_server.four_letter("crst") == "Connection stats reset.\n"
    assert zabby_server.four_letter("srst") == "Server stats reset.\n"


def test_the_default_whitelist_is_zookeepers_srvr_alone(tmp_path: Path) -> None:
    """stat (client addresses), envi (host, user, folders) and conf (data paths) answered by
    default; ZooKeeper's default is srvr alone."""
    server = ServerProcess(tmp_path)
    server.config_path.write_text("".join(line + "\n" for line in server.config_path.read_text().splitlines()
                                          if not line.startswith("4lw.commands.whitelist")))  # fmt: skip
    server.start()
    try:
        for word in ("stat", "envi", "conf", "cons", "dump", "ruok", "mntr"):
            assert server.four_letter(word) == f"{word} is not executed because it is not in the whitelist.\n"
        assert "Mode: standalone" in server.four_letter("srvr")
    finally:
        server.kill()


def test_admin_endpoint_and_metrics(zabby_server: ServerProcess) -> None:
    raw_session(zabby_server.port).create("/m")
    base = f"http://127.0.0.1:{zabby_server.admin_port}"
    mntr = json.load(urllib.request.urlopen(f"{base}/commands/mntr", timeout=5))
    assert mntr["command"] == "mntr" and mntr["server_state"] == "standalone" and mntr["znode_count"] >= 5
    assert json.load(urllib.request.urlopen(f"{base}/commands/monitor", timeout=5))["znode_count"] == mntr["znode_count"]
    assert "mntr" in json.load(urllib.request.urlopen(f"{base}/commands", timeout=5))["commands"]
    metrics = urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode()
    assert "zk_znode_count " in metrics
    assert "zabby_fsync_latency_seconds_bucket" in metrics
    assert 'zabby_request_latency_seconds_count{kind="write"}' in metrics
    # the AdminServer's configuration commands; a standalone server has no voting view
    assert json.load(urllib.request.urlopen(f"{base}/commands/voting_view", timeout=5))["current_config"] == {}
    with pytest.raises(urllib.error.HTTPError, match="403"):  # it names the data folders: an administrator's
        urllib.request.urlopen(f"{base}/commands/initial_configuration", timeout=5)


def test_the_admin_words_need_an_administrator_and_the_resets_a_post(tmp_path: Path) -> None:
    """dump, connections, watches_by_path, environment, initial_configuration, hash and the
    counter resets (by GET) answered without credentials, even with admin.console.auth set."""
    server = ServerProcess(tmp_path, **admin_settings())
    server.start()
    try:
        base = f"http://127.0.0.1:{server.admin_port}/commands"
        for name in ("dump", "connections", "watches_by_path", "environment", "initial_configuration", "hash", "stats"):
            with pytest.raises(urllib.error.HTTPError, match="401"):
                urllib.request.urlopen(f"{base}/{name}", timeout=5)
            assert admin_json(server.admin_port, name)["command"] == name
        initial = admin_json(server.admin_port, "initial_configuration")
        assert initial["initial_configuration"] == fourletter._masked(server.config_path.read_text())  # admin.console.auth hidden
        with pytest.raises(urllib.error.HTTPError, match="405"):
            admin_json(server.admin_port, "stat_reset")  # a GET changes nothing
        assert admin_json(server.admin_port, "stat_reset", method="POST")["command"] == "stat_reset"
        assert json.load(urllib.request.urlopen(f"{base}/mntr", timeout=5))["command"] == "mntr"  # monitoring stays open
    finally:
        server.kill()


def test_passwords_are_masked_in_the_configuration() -> None:
    assert fourletter._masked("clientPort=1\nssl.keyStore.password=secret\n") == "clientPort=1\nssl.keyStore.password=********\n"
    assert fourletter._masked("superDigest = super:abc=\nadmin.console.auth=admin:def=\n") == "superDigest =********\nadmin.console.auth=********\n"


def test_busy_admin_port_is_logged_and_server_serves(tmp_path: Path, zabby_server: ServerProcess) -> None:
    other = ServerProcess(tmp_path / "second", **{"admin.serverPort": zabby_server.admin_port})
    other.start()
    try:
        assert other.four_letter("ruok") == "imok"
        assert "admin server not started" in other.log_path.read_text()
    finally:
        other.kill()
