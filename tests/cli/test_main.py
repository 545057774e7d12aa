"""``zabby-cli`` as a process: one-shot exit codes, piped (non-tty) sessions, the status table."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from tests import ROOT
from zabby import SyncClient
from zabby.testing import ServerProcess, free_port


def cli(*args: str, stdin: str | None = None, timeout_s: float = 20.0) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ZABBY_CLI_HISTORY="")
    return subprocess.run(
        [sys.executable, "-m", "zabby.cli.main", *args],
        input=stdin if stdin is not None else "", capture_output=True, text=True, timeout=timeout_s, cwd=ROOT, env=env,
    )  # fmt: skip


def test_one_shot_success_and_errors(zabby_server: ServerProcess) -> None:
    with SyncClient(zabby_server.hosts) as client:
        client.create("/cfg", b"value=1")
    result = cli("-server", zabby_server.hosts, "get", "/cfg")
    assert (result.returncode, result.stdout, result.stderr) == (0, "value=1\n", "")
    result = cli("-server", zabby_server.hosts, "get", "-s", "/cfg")
    assert result.returncode == 0 and result.stdout.startswith("value=1\ncZxid = 0x")
    result = cli("-server", zabby_server.hosts, "create", "/made", "two words")
    assert (result.returncode, result.stdout) == (0, "Created /made\n")
    result = cli("-server", zabby_server.hosts, "ls", "/")
    assert (result.returncode, result.stdout) == (0, "[cfg, made, zookeeper]\n")

    result = cli("-server", zabby_server.hosts, "get", "/nope")
    assert (result.returncode, result.stdout, result.stderr) == (1, "", "Node does not exist: /nope\n")
    result = cli("-server", zabby_server.hosts, "set", "-v", "9", "/cfg", "x")
    assert (result.returncode, result.stderr) == (1, "version No is not valid : /cfg\n")


def test_one_shot_bad_arguments_fail_fast() -> None:
    dead = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = cli("-server", dead, "get")
    assert (result.returncode, result.stderr) == (2, "get [-s] [-w] path\n")
    result = cli("-server", dead, "frobnicate")
    assert result.returncode == 2 and result.stderr.startswith("Command not found: frobnicate\n")
    result = cli("-server", dead, "ls", "-q", "/")
    assert (result.returncode, result.stderr) == (2, "Unrecognized option: -q\n")
    result = cli("-nosuchflag")
    assert result.returncode == 2 and "unrecognized arguments" in result.stderr
    assert time.monotonic() - started < 10  # no connection attempt for bad syntax


def test_one_shot_unreachable_server_is_bounded() -> None:
    dead = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = cli("-server", dead, "-connect-timeout", "2", "get", "/x")
    elapsed = time.monotonic() - started
    assert result.returncode == 3
    assert result.stderr == f"Unable to connect to {dead}: Connection time-out: {dead}: all attempts to connect to {dead} failed\n"
    assert elapsed < 8


def test_piped_session_without_a_tty(zabby_server: ServerProcess) -> None:
    script = "create /p data\nls /\nget /p\nset -v 4 /p x\nget /missing\nquit\n"
    result = cli("-server", zabby_server.hosts, stdin=script)
    assert result.returncode == 0
    prompt = f"[zk: {zabby_server.hosts}(CONNECTED) "
    assert result.stdout.startswith(f"{prompt}0] ") or result.stdout.startswith("\nWATCHER::")
    assert "WatchedEvent state:SyncConnected type:None path:null" in result.stdout
    assert f"{prompt}0] Created /p\n{prompt}1] [p, zookeeper]\n{prompt}2] data\n{prompt}3] {prompt}4] {prompt}5] " in result.stdout
    assert result.stderr == "version No is not valid : /p\nNode does not exist: /missing\n"
    # end of input also ends the shell
    result = cli("-server", zabby_server.hosts, stdin="ls /\n")
    assert result.returncode == 0 and "[p, zookeeper]" in result.stdout


def test_servers_status_table(zabby_server: ServerProcess) -> None:
    dead = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = cli("-server", f"{zabby_server.hosts},{dead}", "-servers-status", "-status-timeout", "2")
    assert time.monotonic() - started < 10
    assert result.returncode == 1  # one server is down
    header, up, down = result.stdout.splitlines()
    assert header.split() == ["HOST", "MODE", "ZXID", "DIGEST", "CONNECTIONS", "OUTSTANDING", "LATENCY", "min/avg/max", "NODES"]
    cells = up.split()
    assert cells[0] == zabby_server.hosts and cells[1] == "standalone"
    assert cells[2].startswith("0x") and re.fullmatch(r"0x[0-9a-f]{16}", cells[3])
    assert cells[4].isdigit() and cells[5].isdigit()
    assert cells[6].count("/") == 2 and cells[7].isdigit()
    assert down.split() == [dead, "unreachable", "-", "-", "-", "-", "-", "-"]
    # columns line up
    assert up.index("standalone") == header.index("MODE") == down.index("unreachable")

    result = cli("-server", zabby_server.hosts, "-servers-status")
    assert result.returncode == 0 and len(result.stdout.splitlines()) == 2
    result = cli("-server", f"{dead}", "srvr-all")  # the shell command needs no session
    assert result.returncode == 1 and "unreachable" in result.stdout
