"""Quotas on a running server: zabby-cli's setquota/listquota/delquota with zkCli 3.8's output
(as checked against ZooKeeper 3.8's zkCli.sh and server), kazoo seeing the same znodes and
QuotaExceededError, the warning logged when enforcement is off, and the usage in mntr and
/metrics."""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import QuotaExceededError

import zabby.testing
from zabby.cli import BufferWriter, Shell
from zabby.cli.shell import FAILED, OK
from zabby.testing import ServerProcess, wait_until


@pytest.fixture
def zabby_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """The server of the ``shell`` fixture, with zookeeper.enforceQuota on."""
    with zabby.testing.server(workdir=tmp_path, enforceQuota="true") as server:
        yield server


@contextlib.contextmanager
def kazoo_session(hosts: str) -> Iterator[KazooClient]:
    kazoo = KazooClient(hosts, timeout=5)
    kazoo.start(timeout=15)
    try:
        yield kazoo
    finally:
        kazoo.stop()
        kazoo.close()


def run(shell: Shell, line: str) -> tuple[int, str, str]:
    writer = shell.writer
    assert isinstance(writer, BufferWriter)
    status = shell.execute(line)
    out, err = writer.take()
    return status, out, err


def test_zkcli_session_as_zookeeper_38_answers(shell: Shell) -> None:
    """The transcript of the same commands against ZooKeeper 3.8 (zkCli.sh, enforceQuota=true)."""
    assert run(shell, "create /q1")[0] == OK
    assert run(shell, "create /q1/a x")[0] == OK
    assert run(shell, "setquota -n 3 /q1") == (OK, "", "")
    assert run(shell, "get /zookeeper/quota/q1/zookeeper_limits")[1] == "count=3,bytes=-1=;byteHardLimit=-1;countHardLimit=-1\n"
    assert run(shell, "get /zookeeper/quota/q1/zookeeper_stats")[1] == "count=2,bytes=1\n"
    listed = ("Output quota for /q1 count=3,bytes=-1=;byteHardLimit=-1;countHardLimit=-1\n"
              "Output stat for /q1 count=2,bytes=1\n")  # fmt: skip
    assert run(shell, "listquota /q1") == (OK, listed, "absolute path is /zookeeper/quota/q1/zookeeper_limits\n")
    run(shell, "create /q1/b yy")  # past the soft limit: created, with a warning in the log
    run(shell, "create /q1/c z")
    assert run(shell, "get /zookeeper/quota/q1/zookeeper_stats")[1] == "count=4,bytes=4\n"
    assert run(shell, "setquota -B 10 /q1") == (OK, "[Warning]: the count quota you create is less than the existing count:4\n", "")
    assert run(shell, "set /q1/a 0123456789") == (FAILED, "", "Quota has exceeded : /q1/a\n")
    assert run(shell, "setquota -N 3 /q1")[0] == OK
    assert run(shell, "create /q1/d") == (FAILED, "", "Quota has exceeded : /q1/d\n")
    assert run(shell, "ls /zookeeper/quota/q1")[1] == "[zookeeper_limits, zookeeper_stats]\n"


def test_zkcli_refusals_and_delquota(shell: Shell) -> None:
    run(shell, "create /q2")
    run(shell, "create /q2/x")
    assert run(shell, "setquota -n 5 /q2/x")[0] == OK
    assert run(shell, "setquota -b 5 /q2") == (FAILED, "", "/q2 has a child /q2/x which has a quota\n")
    assert run(shell, "setquota -n 5 /q2/x/y")[2] == "/q2/x/y does not exist.\n"
    run(shell, "create /q2/x/y")
    assert run(shell, "setquota -n 5 /q2/x/y")[2] == "/q2/x/y has a parent /q2/x which has a quota\n"
    assert run(shell, "setquota -n abc /q2")[2] == "NumberFormatException happens when parsing the option value\n"
    assert run(shell, "setquota /q2")[0] == 2
    assert run(shell, "setquota -n 1 /zookeeper")[0] == FAILED
    assert run(shell, "listquota /q2") == (FAILED, "", "absolute path is /zookeeper/quota/q2/zookeeper_limits\nquota for /q2 does not exist.\n")
    assert run(shell, "delquota -n /q2/x") == (OK, "", "")
    assert run(shell, "listquota /q2/x")[1].startswith("Output quota for /q2/x count=-1,bytes=-1=;byteHardLimit=-1;countHardLimit=-1\n")
    assert run(shell, "delquota /q2/x") == (OK, "", "")
    assert run(shell, "ls /zookeeper/quota/q2") == (FAILED, "", "Node does not exist: /zookeeper/quota/q2\n")
    assert run(shell, "delquota /q2/x") == (FAILED, "", "Quota does not exist for /q2/x\n")


def test_kazoo_sees_the_znodes_and_quotaexceeded(zabby_server: ServerProcess, shell: Shell) -> None:
    with kazoo_session(zabby_server.hosts) as kazoo:
        _kazoo_meets_a_hard_quota(kazoo, shell)


def _kazoo_meets_a_hard_quota(kazoo: KazooClient, shell: Shell) -> None:
    kazoo.create("/k", b"")
    assert run(shell, "setquota -N 2 /k")[0] == OK
    assert kazoo.get("/zookeeper/quota/k/zookeeper_stats")[0] == b"count=1,bytes=0"
    kazoo.create("/k/one", b"")
    with pytest.raises(QuotaExceededError):
        kazoo.create("/k/two", b"")
    transaction = kazoo.transaction()
    transaction.create("/k/three", b"")
    assert isinstance(transaction.commit()[0], QuotaExceededError)
    assert sorted(kazoo.get_children("/zookeeper/quota/k")) == ["zookeeper_limits", "zookeeper_stats"]


def test_usage_in_mntr_and_metrics(zabby_server: ServerProcess, shell: Shell) -> None:
    assert run(shell, "create /metered")[0] == OK
    assert run(shell, "create /metered/a 12345")[0] == OK
    assert run(shell, "setquota -b 100 /metered")[0] == OK
    mntr = zabby_server.four_letter("mntr")
    assert "zk_metered_quota_bytes_limit_per_namespace\t100\n" in mntr
    assert "zk_metered_quota_count_usage_per_namespace\t2\n" in mntr
    assert "zk_metered_quota_bytes_usage_per_namespace\t5\n" in mntr
    with urllib.request.urlopen(f"http://127.0.0.1:{zabby_server.admin_port}/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert 'zk_quota_count_usage_per_namespace{key="metered"} 2.0' in metrics


def test_without_enforcement_a_hard_quota_only_warns(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "free")
    server.start()
    try:
        with kazoo_session(server.hosts) as client:
            client.create("/free")
            client.create("/zookeeper/quota/free/zookeeper_limits", b"count=-1,bytes=-1=;countHardLimit=1", makepath=True)
            client.create("/zookeeper/quota/free/zookeeper_stats", b"count=0,bytes=0")
            client.create("/free/over")
        wait_until(lambda: "Quota exceeded: /free [current count=2, hardCountLimit=1]" in server.log_tail(), 10, "the warning")
    finally:
        server.stop()
