"""The interactive shell in a pseudo-terminal (prompt_toolkit), driven by pexpect."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from tests import ROOT
from zabby import SyncClient
from zabby.testing import ServerProcess

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")


@pytest.fixture
def cli(zabby_server: ServerProcess, tmp_path: Path) -> Iterator[pexpect.spawn]:
    env = dict(os.environ, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1", ZABBY_CLI_HISTORY=str(tmp_path / "history"))
    child = pexpect.spawn(
        sys.executable, ["-m", "zabby.cli.main", "-server", zabby_server.hosts],
        cwd=str(ROOT), env=env, encoding="utf-8", timeout=15, dimensions=(50, 200),
    )  # fmt: skip
    child.logfile_read = open(tmp_path / "pty.log", "w")  # noqa: SIM115 - closed below
    try:
        yield child
    finally:
        child.logfile_read.close()
        if child.isalive():
            child.terminate(force=True)


def prompt(n: int) -> str:
    # prompt_toolkit draws the prompt's trailing space as a cursor move, so match up to "]"
    return rf"\[zk: 127\.0\.0\.1:\d+\(CONNECTED\) {n}\]"


def test_interactive_session(cli: pexpect.spawn, zabby_server: ServerProcess, tmp_path: Path) -> None:
    cli.expect("WatchedEvent state:SyncConnected type:None path:null")
    cli.expect(prompt(0))

    cli.sendline("create /x hello")
    cli.expect("Created /x")
    cli.expect(prompt(1))

    cli.sendline("create /x/child")
    cli.expect("Created /x/child")
    cli.expect(prompt(2))

    cli.sendline("ls /")
    cli.expect(re.escape("[x, zookeeper]"))
    cli.expect(prompt(3))

    cli.sendline("get -s /x")
    cli.expect("hello")
    cli.expect(r"cZxid = 0x[0-9a-f]+")
    cli.expect(r"dataVersion = 0")
    cli.expect(r"numChildren = 1")
    cli.expect(prompt(4))

    cli.sendline("set -v 7 /x other")
    cli.expect(re.escape("version No is not valid : /x"))
    cli.expect(prompt(5))

    cli.sendline("delete /x/child")
    cli.expect(prompt(6))

    # Tab completes a znode path from the server's children
    cli.send("ls /zoo")
    cli.send("\t")
    cli.expect("keeper")
    cli.sendline("")
    cli.expect(re.escape("[config, quota]"))
    cli.expect(prompt(7))

    cli.sendline("get -w /x")
    cli.expect("hello")
    cli.expect(prompt(8))
    with SyncClient(zabby_server.hosts, timeout=5.0) as other:
        other.set("/x", b"changed")
    cli.expect("WATCHER::")
    cli.expect(re.escape("WatchedEvent state:SyncConnected type:NodeDataChanged path:/x"))

    cli.sendline("delete /x")
    cli.expect(prompt(9))
    cli.sendline("ls /")
    cli.expect(re.escape("[zookeeper]"))
    cli.expect(prompt(10))

    cli.sendline("quit")
    cli.expect(pexpect.EOF)
    cli.close()
    assert cli.exitstatus == 0
    assert "get -w /x" in (tmp_path / "history").read_text()
