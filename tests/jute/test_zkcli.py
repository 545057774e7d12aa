"""ZooKeeper's own Java client, Debian's zkCli.sh, against zabby: one JVM, one session, driven
line by line (create, ls, get -s, set, delete and watches fired by another client)."""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from tests.debian import installed
from zabby.testing import ServerProcess


@pytest.fixture(scope="module")
def zkcli() -> str:
    """The path of zkCli.sh, installing Debian's zookeeper package when it is missing."""
    return installed("install_zookeeper.sh")


class ZkCli:
    """One zkCli.sh process fed commands on stdin; ``expect`` reads its output up to a text."""

    def __init__(self, script: str, hosts: str) -> None:
        env = dict(os.environ, ZOO_LOG4J_PROP="ERROR,CONSOLE", CLIENT_JVMFLAGS="-Xshare:auto -XX:TieredStopAtLevel=1")
        self.proc = subprocess.Popen([script, "-server", hosts], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=env)  # fmt: skip
        self.output = ""
        self.seen = 0

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def expect(self, text: str, timeout_s: float = 20.0) -> str:
        """Wait until ``text`` appears after what earlier expects consumed; return the output between."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while text not in self.output[self.seen :]:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None and not select.select([self.proc.stdout], [], [], 0)[0]:
                raise AssertionError(f"zkCli.sh never printed {text!r}; its output:\n{self.output}")
            if select.select([self.proc.stdout], [], [], min(left, 0.2))[0]:
                chunk = self.proc.stdout.read1(65536)  # type: ignore[attr-defined]
                self.output += chunk.decode(errors="replace")
        end = self.output.index(text, self.seen) + len(text)
        between = self.output[self.seen : end]
        self.seen = end
        return between

    def close(self) -> int:
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(20)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)
        assert self.proc.stdout is not None
        self.output += self.proc.stdout.read().decode(errors="replace")
        return self.proc.returncode


@pytest.fixture
def cli(zkcli: str, shared_server: ServerProcess) -> Iterator[ZkCli]:
    process = ZkCli(zkcli, shared_server.hosts)
    try:
        yield process
    finally:
        process.close()


def test_zkcli_create_ls_get_set_delete_and_watches(cli: ZkCli, kz: KazooClient) -> None:
    cli.expect("type:None path:null")  # SyncConnected: the session is up
    cli.send("create /zkcli hello")
    cli.expect("Created /zkcli")
    cli.send("create /zkcli/child c")
    cli.expect("Created /zkcli/child")
    assert kz.get("/zkcli")[0] == b"hello"  # a jute client on another session sees it
    cli.send("ls /zkcli")
    cli.expect("[child]")
    cli.send("get -s /zkcli")
    stat = cli.expect("numChildren = 1")
    assert "hello" in stat and "dataVersion = 0" in stat and "cZxid = 0x" in stat
    assert "ephemeralOwner = 0x0" in stat

    cli.send("get -w /zkcli")
    cli.expect("hello")
    kz.set("/zkcli", b"from-kazoo")  # another client's write fires zkCli's watch
    cli.expect("WatchedEvent state:SyncConnected type:NodeDataChanged path:/zkcli")
    cli.send("ls -w /zkcli")
    cli.expect("[child]")
    kz.create("/zkcli/other", b"")
    cli.expect("WatchedEvent state:SyncConnected type:NodeChildrenChanged path:/zkcli")

    cli.send("set /zkcli world")
    cli.send("get /zkcli")
    cli.expect("world")
    assert kz.get("/zkcli")[0] == b"world"
    cli.send("create -e /zkcli/eph e")
    cli.expect("Created /zkcli/eph")
    cli.send("delete /zkcli")
    cli.expect("Node not empty: /zkcli")  # NOTEMPTY, reported the Java client's way
    cli.send("delete /zkcli/child")
    cli.send("delete /zkcli/other")
    cli.send("ls /zkcli")
    cli.expect("[eph]")
    cli.send("get /zkcli/missing")
    cli.expect("Node does not exist: /zkcli/missing")
    cli.send("stat /zkcli")  # zkCli exits with the last command's status: end on a success
    cli.expect("numChildren = 1")
    assert cli.close() == 0  # quit: closeSession, the JVM exits
    assert kz.exists("/zkcli/eph") is None  # its ephemeral went with its session
    assert kz.get_children("/zkcli") == []
    kz.delete("/zkcli")
