"""``scripts/ensemble.py add N`` and ``remove N``: a server started with the current members
and itself and reconfigured in; a server reconfigured out and stopped.  The ensemble runs in
its own folder and on its own ports (ZABBY_ENSEMBLE_DIR, ZABBY_ENSEMBLE_BASE_PORT)."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests import ROOT
from zabby.membership import Membership
from zabby.testing.processes import PORT_LOW, process_alive

SIDS = range(1, 5)
OFFSETS = (0, 707, 1707, 5899)  # scripts/ensemble.py's client, quorum, election and admin ports from its base


def free_base() -> int:
    """A base port whose every derived port (client, quorum, election, admin of servers 1..4)
    is free, all below the range ``zabby.testing.free_port`` draws from (so a test on a parallel
    worker cannot pick one of them)."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(10_000, PORT_LOW - max(OFFSETS) - max(SIDS))
        ports = [base + offset + sid for offset in OFFSETS for sid in SIDS]
        try:
            for port in ports:
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free base port")


def test_add_and_remove_reconfigure_a_running_ensemble(tmp_path: Path) -> None:
    run_dir = tmp_path / "ensemble"
    base = free_base()
    env = dict(os.environ, ZABBY_ENSEMBLE_DIR=str(run_dir), ZABBY_ENSEMBLE_BASE_PORT=str(base))

    def script(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "scripts/ensemble.py", *args], capture_output=True, text=True,
                              timeout=120, cwd=ROOT, env=env)  # fmt: skip

    try:
        started = script("start", "3")
        assert started.returncode == 0, started.stdout + started.stderr

        added = script("add", "4")
        assert added.returncode == 0, added.stdout + added.stderr
        head, _, text = added.stdout.partition("\n")
        assert head == "server 4 added; committed new configuration:"
        grown = Membership.parse(text)
        assert grown.voters == {1, 2, 3, 4} and grown.version > 0
        assert script("hosts").stdout.strip() == ",".join(f"127.0.0.1:{base + sid}" for sid in SIDS)
        status = script("status").stdout
        assert status.count("server ") == 4 and "leader" in status, status

        removed = script("remove", "2")
        assert removed.returncode == 0, removed.stdout + removed.stderr
        shrunk = Membership.parse(removed.stdout.partition("\n")[2])
        assert shrunk.voters == {1, 3, 4} and shrunk.version > grown.version
        assert "2" not in json.loads((run_dir / "servers.json").read_text())

        # a restart keeps the zoo.cfg the reconfig rewrote: the server comes back a member
        assert script("restart", "4").returncode == 0
        config = (run_dir / "server4" / "zoo.cfg").read_text()
        assert f"dynamicConfigFile=zoo.cfg.dynamic.{shrunk.version:x}" in config and "server." not in config
        status = script("status").stdout
        assert status.count("server ") == 3, status
        assert script("add", "4").returncode == 2  # running already
    finally:
        state_file = run_dir / "servers.json"
        pids = [entry["pid"] for entry in json.loads(state_file.read_text()).values()] if state_file.exists() else []
        stopped = script("stop")
        for pid in pids:  # never leave a server behind, whatever failed above
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert stopped.returncode == 0
