"""``zabby.testing``'s fork server: a server forked from the template is the server the command
would have run (its session, descriptor limit, folder, log and exit codes), a launch with variables of its own
runs the command, a variable this process set since gets a template of its own, launches go
on as commands once the template has ended, and a server left by a template that died can
still be stopped.  (tests/conftest.py
has every test's servers forked.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from zabby.testing import processes
from zabby.testing.forkserver import CODE_UNKNOWN, TEMPLATE, ForkedProcess, ForkServer, environment_key
from zabby.testing.processes import ServerProcess, launch_server, process_alive, use_fork_server

HOW = {"forked": {}, "command": {"ZABBY_TEST_LAUNCH": "a variable the template was not started with"}}


def _limit(pid: int) -> str:
    return next(line for line in Path(f"/proc/{pid}/limits").read_text().splitlines() if line.startswith("Max open files"))


@pytest.mark.parametrize("how", sorted(HOW))
def test_a_forked_server_is_the_server_the_command_runs(tmp_path: Path, how: str) -> None:
    use_fork_server()
    server = ServerProcess(tmp_path / "server")
    server.environment = HOW[how]
    server.new_session = True
    server.descriptors_max = 4096
    server.start()
    try:
        assert server.proc is not None
        assert isinstance(server.proc, ForkedProcess if how == "forked" else subprocess.Popen)
        assert server.mode() == "standalone" and server.four_letter("ruok") == "imok"
        pid = server.proc.pid
        assert os.getsid(pid) == pid != os.getsid(0)  # a session of its own
        assert _limit(pid).split()[3:5] == ["4096", "4096"]
        assert Path(f"/proc/{pid}/cwd").resolve() == server.config_path.parent.resolve()
        assert "serving clients on" in server.log_tail()
        server.stop()
        assert server.proc.returncode == 0
        server.start()
        server.kill()
        assert server.proc.returncode == -signal.SIGKILL
        server.settings["tickTime"] = "often"
        server.write_config()
        server.launch()
        assert server.proc.wait(20) == 2
        assert "tickTime='often' is not an integer" in server.log_tail()
    finally:
        server.kill()  # (a failed check leaves no server behind)


def test_a_launch_that_inherits_the_session_stays_in_ours(tmp_path: Path) -> None:
    use_fork_server()
    server = ServerProcess(tmp_path / "server")
    server.start()
    try:
        assert isinstance(server.proc, ForkedProcess)
        assert os.getsid(server.proc.pid) == os.getsid(0) and os.getpgid(server.proc.pid) == os.getpgid(0)
        with pytest.raises(subprocess.TimeoutExpired):
            server.proc.wait(0.1)
    finally:
        server.kill()


def _template(monkeypatch: pytest.MonkeyPatch) -> ForkServer:
    """A template of its own for this process's environment, in use for this test only."""
    environment = processes._environment(None)  # noqa: SLF001
    fork_server = ForkServer(environment, process_alive)
    monkeypatch.setitem(processes._fork_servers, environment_key(environment), fork_server)  # noqa: SLF001
    return fork_server


def test_launches_run_the_command_once_the_template_has_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_fork_server()
    _template(monkeypatch).close()
    server = ServerProcess(tmp_path / "server")
    server.start()
    try:
        assert isinstance(server.proc, subprocess.Popen)
    finally:
        server.kill()


def test_a_variable_set_in_this_process_since_has_a_template_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PySpark's session sets PYSPARK_PYTHON for good: the servers launched after it are forked
    from a template started with it (the one before would fork them without it)."""
    use_fork_server()
    monkeypatch.setenv("ZABBY_TEST_SET_SINCE", "1")
    server = ServerProcess(tmp_path / "server")
    server.start()
    try:
        assert isinstance(server.proc, ForkedProcess)
        assert b"ZABBY_TEST_SET_SINCE=1" in Path(f"/proc/{server.proc.pid}/environ").read_bytes().split(b"\0")  # its template's
    finally:
        server.kill()


def test_the_template_reports_a_server_that_ended_on_its_own(tmp_path: Path) -> None:
    use_fork_server()
    server = ServerProcess(tmp_path / "server")
    proc = launch_server(server.config_path, server.log_path, options=["--log-level", "NOSUCHLEVEL"])
    assert isinstance(proc, ForkedProcess)
    assert proc.wait(20) == 2
    assert proc.poll() == 2
    proc.kill()  # a server reaped is not signalled (its pid may be another process's by now)


def test_a_server_outliving_its_template_is_stopped_and_its_code_is_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_fork_server()
    fork_server = _template(monkeypatch)
    server = ServerProcess(tmp_path / "server")
    server.start()
    try:
        assert isinstance(server.proc, ForkedProcess)
        os.kill(fork_server.pid, signal.SIGKILL)
        fork_server.close()
        assert server.proc.poll() is None and server.mode() == "standalone"  # orphaned, it serves on
        server.stop()
        assert server.proc.returncode == CODE_UNKNOWN
    finally:
        server.kill()


def test_the_template_imports_what_a_server_imports_and_no_more_of_zabby() -> None:
    """Run as a script, not as a module of zabby.testing (whose package imports the client):
    the forked servers hold no client modules the command's servers would not."""
    done = subprocess.run([sys.executable, "-X", "importtime", TEMPLATE], input=b"", capture_output=True, timeout=60, check=True)
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.decode().splitlines() if line.startswith("import time:")}
    assert "zabby.server.main" in imported
    assert not {name for name in imported if name.startswith(("zabby.client", "zabby.testing", "anyio"))}


def test_a_reused_pid_is_a_new_server_not_the_one_that_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """pid_max is 32,768 here: after some thousands of launches a server gets the pid of one
    that ended, and its handle read the old one's return code (-9, killed), so it looked ended
    from its start and was never stopped; it held its port, and every later restart on that
    port failed (the adversary's run of seed 7200, from attack 2,245 on)."""
    import io
    import threading
    import types

    lines = ['{"pid": 4242}', '{"ended": 4242, "returncode": -9}', '{"pid": 4242}']
    fork_server = ForkServer.__new__(ForkServer)
    fork_server._proc = types.SimpleNamespace(stdout=io.StringIO("\n".join(lines) + "\n"))  # type: ignore[assignment]
    fork_server._changed = threading.Condition()
    fork_server._pids, fork_server._ended, fork_server._gone = [], {}, False
    fork_server._alive = lambda pid: True
    fork_server._read()  # every line, then the template's end
    assert fork_server._pids == [4242, 4242]
    second = ForkedProcess(4242, fork_server)
    assert second.returncode is None  # the second server runs: no stale code
    signalled: list[int] = []
    monkeypatch.setattr(os, "kill", lambda pid, signum: signalled.append(signum))
    second.kill()
    assert signalled == [signal.SIGKILL]  # and it can be stopped
