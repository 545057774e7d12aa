"""ZooKeeper's C client (Debian's ``libzookeeper-mt-dev`` and ``zookeeper-bin``) against a
running system:

* ``run_scenario``: ``c_scenario.c``, compiled here with gcc against libzookeeper_mt (cached
  by the source's hash), a two-session scenario and a burst of requests from several threads
  on one handle; its output is compared line by line with ZooKeeper's (``first_difference``
  of ``harness.differential.node_client``).
* ``run_cli_mt``: ``cli_mt`` one-shot commands (``-c``), their answers.
* ``run_load_gen``: ``load_gen``'s cycles of asynchronous creates, sets, gets and deletes.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from harness.differential.clients import CACHE, ClientUnavailable, ensure_debian_clients

SOURCE = Path(__file__).with_name("c_scenario.c")
ZOOKEEPER_BIN = Path("/usr/lib/zookeeper/bin")
HEADER = Path("/usr/include/zookeeper/zookeeper.h")
RUN_TIMEOUT_S = 300
CLI_COMMANDS = ("create /cli-mt", "create2 /cli-mt/child", "ls /cli-mt", "ls2 /cli-mt", "get /cli-mt/child", "set /cli-mt/child data",
                "get /cli-mt/child", "delete /cli-mt", "delete /cli-mt/child", "delete /cli-mt", "ls /cli-mt")  # fmt: skip


def build() -> Path:
    """The compiled scenario (gcc, once per version of its source)."""
    if not HEADER.exists() or not (ZOOKEEPER_BIN / "cli_mt").exists():
        ensure_debian_clients()
    if not shutil.which("gcc"):
        raise ClientUnavailable("no gcc on PATH (apt-get install gcc)")
    binary = CACHE / "c" / f"c_scenario-{hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]}"
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f"{binary.name}.{os.getpid()}")  # renamed into place whole: parallel test workers may build it at once
    done = subprocess.run(["gcc", "-O1", "-Wall", "-o", str(partial), str(SOURCE), "-lzookeeper_mt", "-lpthread"], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"gcc c_scenario.c failed:\n{done.stderr[-2000:]}")
    os.replace(partial, binary)
    return binary


def run_scenario(hosts: str, root: str = "/c-scenario", threads: int = 8, requests: int = 60) -> list[str]:
    """The scenario's output lines against the system at ``hosts``, under the znode ``root``."""
    done = subprocess.run([str(build()), hosts, root, str(threads), str(requests)], capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    lines = done.stdout.splitlines()
    if done.returncode != 0:
        raise RuntimeError(f"c_scenario exited with {done.returncode}:\n" + "\n".join(lines[-10:]) + done.stderr[-2000:])
    return lines


# cli_mt prints its answers after log lines; these are what differs by nature
_CLI_MASKS = [(re.compile(r"\b(c|m|p)zxid=\w+"), r"\1zxid=*"), (re.compile(r"\b(c|m)time ?= ?.*"), r"\1time=*"),
              (re.compile(r"session id: 0x\w+"), "session id: *"),
              (re.compile(r"ephemeralOwner=\w+"), "ephemeralOwner=*"), (re.compile(r"\d+(\.\d+)?ms"), "*ms")]  # fmt: skip
SESSION_LINE = "Got a new session id"


def run_cli_mt(hosts: str) -> list[str]:
    """Each of ``CLI_COMMANDS`` through ``cli_mt -c``: the command, then its answer's lines
    (log lines and what differs by nature masked)."""
    if not (ZOOKEEPER_BIN / "cli_mt").exists():
        ensure_debian_clients()
    lines: list[str] = []
    for command in CLI_COMMANDS:
        done = subprocess.run([str(ZOOKEEPER_BIN / "cli_mt"), "-h", hosts, "-c", command], capture_output=True, text=True, timeout=20, check=False)
        lines.append(f"> {command} (exit {done.returncode})")
        answer: list[str] = []
        sessions: list[str] = []
        for line in (done.stdout + done.stderr).splitlines():  # cli_mt answers on stderr, among its log lines
            if not line.strip() or "ZOO_" in line or line.startswith(("Watcher", "time = ")):
                continue
            for pattern, replacement in _CLI_MASKS:
                line = pattern.sub(replacement, line)
            # Its watcher thread prints the session line when the session is up, before or
            # after the main thread's "Creating ...", as the threads happen to run: after the answer.
            (sessions if line.startswith(SESSION_LINE) else answer).append(line)
        lines += answer + sessions
    return lines


def run_load_gen(hosts: str, children: int = 200, seconds: float = 8.0) -> tuple[int, int]:
    """``load_gen`` for ``seconds`` (it cycles until stopped: create ``children`` znodes, set,
    get and delete each, asynchronously); how many delete cycles it finished and how many
    errors it logged."""
    if not (ZOOKEEPER_BIN / "load_gen").exists():
        ensure_debian_clients()
    with subprocess.Popen([str(ZOOKEEPER_BIN / "load_gen"), hosts, "/load-gen", str(children)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True) as proc:  # fmt: skip
        try:
            _, log = proc.communicate(timeout=seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, log = proc.communicate()
    return log.count("Starting the delete cycle"), sum(":ERROR@" in line or "Failed" in line for line in log.splitlines())
