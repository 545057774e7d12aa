"""Servers forked from a template process that has imported the server already.

A server started as ``python -m zabby.server.main`` spends most of its start importing: about
300 ms of CPU, against 30 ms for a fork of a process that has the modules loaded (and 0.5 s
of wall time against 60 ms).  A test run starts hundreds of servers.  ``ForkServer`` runs this
file once as a script (not as a module of ``zabby.testing``, whose package would import the
client), which imports ``zabby.server.main`` and nothing else of zabby and then, for each
launch, forks a child that becomes the server: it takes the launch's folder, log, session,
descriptor limit, environment and arguments, and runs ``zabby.server.main.main`` as the
command would, ending with its exit code.  The template reports each child's pid and, when it
has reaped it, its return code; ``ForkedProcess`` is the launcher's handle on it, with the part
of ``subprocess.Popen``'s API that the tests and the harness use (``pid``, ``returncode``,
``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``).

What a fork cannot give a server is what an interpreter takes at start: its environment as
imported modules read it (``ZABBY_DISK_FAULTS``, ``LD_PRELOAD``, ``PYTHON*``), its flags, and
its own hash seed.  So a server is forked only from a template started with the environment
of its launch (``environment_key``), one template for each environment this process has had
(a test or a library may set a variable: PySpark's session sets PYSPARK_PYTHON); a launch
with variables of its own, or another checkout's code, runs the command
(``processes.launch_server``).  The servers of a template share its hash seed (their
dicts and sets of strings iterate in the same order), which nothing in zabby may depend on.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import random
import resource
import selectors
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import IO, Any

TEMPLATE = __file__
REPLY_WAIT_S = 30.0  # for the template's pid of a launch (it forks at once; its start may take seconds on a loaded machine)
IGNORED_VARIABLES = frozenset({"PYTEST_CURRENT_TEST"})  # set by pytest per test phase; no server reads it
CODE_UNKNOWN = 255  # the return code of a server that ended after its template (whoever reaped it knows it)
ORPHAN_POLL_S = 0.01


@dataclasses.dataclass(frozen=True, slots=True)
class Launch:
    """What a child needs to become the server ``python -m zabby.server.main`` would have run."""

    arguments: list[str]  # after the module: options, then the config file
    cwd: str
    log_path: str  # its stdout and stderr, appended to
    environment: dict[str, str]
    new_session: bool
    descriptors_max: int | None


def environment_key(environment: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    """What of an environment a template stands for: a server may be forked from the template
    started with the same key (the variables an interpreter or an import may read all alike)."""
    return frozenset((name, value) for name, value in environment.items() if name not in IGNORED_VARIABLES)


class ForkServerGone(RuntimeError):
    """The template process ended: it forks no more servers."""


class ForkedProcess:
    """A server forked by the template: a child of the template, not of this process, so its
    return code comes from the template, which reaps it."""

    def __init__(self, pid: int, fork_server: ForkServer) -> None:
        self.pid = pid
        self.args = [TEMPLATE, str(pid)]
        self._fork_server = fork_server

    @property
    def returncode(self) -> int | None:
        return self._fork_server.returncode(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The return code once the server has ended; raises subprocess.TimeoutExpired."""
        code = self._fork_server.wait_ended(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:  # as Popen: never a pid the template has reaped (it may be reused)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __repr__(self) -> str:
        return f"<ForkedProcess pid={self.pid} returncode={self.returncode}>"


class ForkServer:
    """The template process and the thread that reads what it reports."""

    def __init__(self, environment: Mapping[str, str], alive: Callable[[int], bool]) -> None:
        """A template started with ``environment``.  ``alive(pid)``: whether a process runs (a
        zombie does not), for the servers left when the template has ended."""
        self.environment = dict(environment)
        self._alive = alive
        self._proc = subprocess.Popen(
            [sys.executable, TEMPLATE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=self.environment, cwd="/",
        )  # fmt: skip
        self._launching = threading.Lock()  # one launch at a time: the template answers in order
        self._changed = threading.Condition()
        self._pids: list[int] = []  # pids reported, not yet taken by their launch
        self._ended: dict[int, int] = {}  # pid -> return code, until the pid is reused
        self._gone = False
        self._reader = threading.Thread(target=self._read, name="zabby-forkserver", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        """The template's."""
        return self._proc.pid

    @property
    def ended(self) -> bool:
        """The template has ended: it forks no more."""
        return self._gone

    def launch(self, launch: Launch) -> ForkedProcess:
        """Fork a server; raises ForkServerGone if the template has ended."""
        request = json.dumps(dataclasses.asdict(launch)) + "\n"
        with self._launching:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write(request.encode())
                self._proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                raise ForkServerGone("the fork server's template has ended") from None
            with self._changed:
                if not self._changed.wait_for(lambda: self._pids or self._gone, REPLY_WAIT_S) or not self._pids:
                    raise ForkServerGone("the fork server's template did not answer")
                pid = self._pids.pop(0)
        return ForkedProcess(pid, self)

    def returncode(self, pid: int) -> int | None:
        """The server's return code once the template reaped it; ``CODE_UNKNOWN`` once it has
        ended after the template did (orphaned, it was reaped by another)."""
        with self._changed:
            if self._gone and pid not in self._ended and not self._alive(pid):
                self._ended[pid] = CODE_UNKNOWN
            return self._ended.get(pid)

    def wait_ended(self, pid: int, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            self._changed.wait_for(lambda: pid in self._ended or self._gone, timeout)
        while self.returncode(pid) is None and (deadline is None or time.monotonic() < deadline):
            time.sleep(ORPHAN_POLL_S)  # the template has ended: the server is nobody's to report
        return self.returncode(pid)

    def close(self) -> None:
        """End the template (the servers it forked go on until they are stopped)."""
        with contextlib.suppress(OSError, ValueError):
            assert self._proc.stdin is not None
            self._proc.stdin.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(10)

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            message = json.loads(line)
            with self._changed:
                if "pid" in message:
                    # a pid the kernel hands out again (pid_max is often 32,768): the return
                    # code of the server that had it before is not this one's
                    self._ended.pop(message["pid"], None)
                    self._pids.append(message["pid"])
                else:
                    self._ended[message["ended"]] = message["returncode"]
                self._changed.notify_all()
        with self._changed:
            self._gone = True
            self._changed.notify_all()


# --- the template process ------------------------------------------------------------------


def serve() -> None:
    """The template's loop: a launch per line on stdin, answered with the child's pid; each
    child reaped reported with its return code; ends when stdin closes."""
    sys.path[0] = os.getcwd()  # not this file's folder: the path of ``python -m`` run here
    import zabby.server.main  # noqa: F401  (what every child needs, loaded once, before any fork)

    reaped_r, reaped_w = os.pipe()
    os.set_blocking(reaped_w, False)
    signal.set_wakeup_fd(reaped_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # (only to wake the loop up)
    selector = selectors.DefaultSelector()
    selector.register(sys.stdin.buffer, selectors.EVENT_READ)
    selector.register(reaped_r, selectors.EVENT_READ)
    out = sys.stdout
    pending = b""
    while True:
        for key, _ in selector.select():
            if key.fileobj == reaped_r:
                os.read(reaped_r, 4096)
                _report_reaped(out)
                continue
            chunk = os.read(sys.stdin.fileno(), 65536)
            if not chunk:
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                pid = os.fork()
                if pid == 0:
                    _become_server(Launch(**json.loads(line)))
                _send(out, {"pid": pid})
        _report_reaped(out)


def _report_reaped(out: IO[str]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(out, {"ended": pid, "returncode": os.waitstatus_to_exitcode(status)})


def _send(out: IO[str], message: dict[str, Any]) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def _become_server(launch: Launch) -> None:
    """In the child: set up what ``launch_server`` gives a process, run the server, exit with
    its code (never returning into the template's loop)."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if launch.new_session:
            os.setsid()
        if launch.descriptors_max is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (launch.descriptors_max, launch.descriptors_max))
        os.chdir(launch.cwd)
        log = os.open(launch.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])  # the template's pipes among them
        os.environ.clear()
        os.environ.update(launch.environment)
        import zabby.server.main as server_main

        sys.argv = [server_main.__file__, *launch.arguments]  # as -m sets them
        sys.path[0] = launch.cwd
        random.seed()  # its own, as a new interpreter's
        code = _run(server_main.main, launch.arguments)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()  # logging's shutdown among them, as at an interpreter's exit
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _run(main: Any, arguments: list[str]) -> int:
    """``sys.exit(main(arguments))``'s exit code, as the interpreter would make it."""
    try:
        result = main(arguments)
    except SystemExit as exc:
        result = exc.code
    if result is None or isinstance(result, int):
        return result or 0
    print(result, file=sys.stderr)
    return 1


if __name__ == "__main__":
    serve()
