"""go-zookeeper's own tests (Debian's ``golang-github-samuel-go-zookeeper-dev``: the sources of
samuel/go-zookeeper with their ``_test.go`` files) against zabby or ZooKeeper 3.8:
``run_suite(system)``.

Its harness (``server_help.go``, ``server_java.go``) writes each server's zoo.cfg and myid,
runs ``java -jar <zookeeper-*-fatjar.jar> server zoo.cfg``, finding the jar under
``$ZOOKEEPER_PATH/contrib/fatjar/``, and waits until ``srvr`` answers in ZooKeeper 3.4's format
(a ``MM/DD/YYYY`` build date, a whole average latency, a version of ``[A-Za-z0-9.-]``) that
neither ZooKeeper 3.8 nor zabby writes.  Nothing of its code is changed; it is configured:

* ``ZOOKEEPER_PATH`` names a folder of ours whose fatjar is a placeholder, and ``PATH`` starts
  with a folder whose ``java`` is this module's launcher (``main``): for the placeholder it
  starts the system under test, for anything else it runs the real java;
* the launcher starts the server on a port of its own and listens on the harness's client
  port itself, with a ``ClientProxy`` (``harness.differential.xids``) that passes every byte
  and answers ``srvr`` in the old format (``old_srvr``).  The server is its child and dies
  with it (``PR_SET_PDEATHSIG``), so the harness's SIGKILL stops both, as it stops a JVM;
  the launcher ends when the test binary does (one that panics stops none of its servers).

``SERVER_JVMFLAGS`` (ZooKeeper's own variable) passes ``-D`` settings to either system.
"""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from harness import CHECKOUT, checkout_env
from harness.differential.clients import CACHE, SuiteCounts, ensure_debian_clients
from harness.differential.servers import SYSTEMS
from harness.differential.xids import ClientProxy
from harness.local.zookeeper import ZOOKEEPER_LOG4J, zookeeper_command
from zabby.testing import free_port

PACKAGE = "github.com/samuel/go-zookeeper/zk"
PROBE_SOURCE = Path(__file__).with_name("gozk_probe.go")
GOPATH = Path("/usr/share/gocode")
PLACEHOLDER_JAR = "zookeeper-3.8.0-fatjar.jar"
SYSTEM_ENV = "ZABBY_GOZK_SYSTEM"
REAL_JAVA_ENV = "ZABBY_GOZK_JAVA"
SUITE_TIMEOUT_S = 1500
PR_SET_PDEATHSIG = 1
# -D settings of SERVER_JVMFLAGS -> the zoo.cfg keys zabby reads for them
_ZABBY_KEYS = {"zookeeper.DigestAuthenticationProvider.superDigest": "superDigest", "zookeeper.extendedTypesEnabled": "extendedTypesEnabled"}
_SERVER_SETTINGS = {"4lw.commands.whitelist": "*", "admin.enableServer": "false", "forceSync": "no", "clientPortAddress": "127.0.0.1"}
_VERSION = re.compile(r"^(Zookeeper version: )([^,]*)(, built on )(\d{4})-(\d\d)-(\d\d) (\d\d:\d\d) (\S+)", re.M)
_LATENCY = re.compile(r"^(Latency min/avg/max: \d+)/([\d.]+)/", re.M)


def old_srvr(text: str) -> str:
    """``srvr``'s text as ZooKeeper 3.4 wrote it, which go-zookeeper's harness parses: the build
    date as ``MM/DD/YYYY HH:MM``, the average latency whole, the version without ``+$}{``."""
    text = _VERSION.sub(lambda m: f"{m[1]}{re.sub(r'[^A-Za-z0-9.-]', '-', m[2])}{m[3]}{m[5]}/{m[6]}/{m[4]} {m[7]} {m[8]}", text)
    return _LATENCY.sub(lambda m: f"{m[1]}/{round(float(m[2]))}/", text)


def launcher_folder(system: str) -> Path:
    """The folder holding ``bin/java`` (the launcher) and ``contrib/fatjar/<placeholder>``."""
    folder = CACHE / "go" / f"launcher-{system}"
    (folder / "contrib" / "fatjar").mkdir(parents=True, exist_ok=True)
    (folder / "contrib" / "fatjar" / PLACEHOLDER_JAR).write_text("a placeholder: harness/differential/gozk.py starts the server\n")
    java = folder / "bin" / "java"
    java.parent.mkdir(exist_ok=True)
    java.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m harness.differential.gozk "$@"\n')
    java.chmod(0o755)
    return folder


def harness_environment(system: str) -> dict[str, str]:
    """The environment under which go-zookeeper's harness starts ``system`` through the launcher."""
    if system not in SYSTEMS:
        raise ValueError(f"unknown system {system!r}: one of {', '.join(SYSTEMS)}")
    folder = launcher_folder(system)
    real_java = shutil.which("java") or "java"
    return {
        **checkout_env(), "ZOOKEEPER_PATH": str(folder), "PATH": f"{folder / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        SYSTEM_ENV: system, REAL_JAVA_ENV: real_java,
    }  # fmt: skip


def run_suite(system: str, run: str = "", *, log: Path | None = None, timeout_s: float = SUITE_TIMEOUT_S) -> SuiteCounts:
    """``go test -v`` of Debian's go-zookeeper (``run``: go test's ``-run`` pattern, default
    every test) with its harness starting ``system``; counted from the ``--- PASS/FAIL/SKIP``
    lines, its output appended to ``log``.  A test that panics ends go's test binary: it is
    counted failed and the tests after it run in a new one."""
    if not shutil.which("go") or not (GOPATH / "src" / PACKAGE / "zk_test.go").exists():
        ensure_debian_clients()
    with tempfile.TemporaryDirectory(prefix="gozk-suite-") as scratch:  # the harness's servers' folders, gone with it even after a panic
        env = {**harness_environment(system), "GOPATH": str(GOPATH), "GO111MODULE": "off", "GOCACHE": str(CACHE / "go" / "build-cache"), "TMPDIR": scratch}
        return _run_tests(env, run, log, timeout_s)


def _run_tests(env: dict[str, str], run: str, log: Path | None, timeout_s: float) -> SuiteCounts:
    listed = _go_test(["-list", run or "."], env, log, timeout_s)
    remaining = [name for name in listed.splitlines() if name.startswith("Test")]
    counts = SuiteCounts()
    while remaining:
        output = _go_test(["-v", f"-timeout={int(timeout_s)}s", "-run", "^(" + "|".join(remaining) + ")$"], env, log, timeout_s)
        done = go_test_counts(output)
        counts.passed, counts.skipped, counts.failed = counts.passed + done.passed, counts.skipped + done.skipped, counts.failed + done.failed
        counts.failures += done.failures
        reported = set(re.findall(r"^--- (?:PASS|FAIL|SKIP): (\S+)", output, re.M))
        crashed = _panicked(output)
        if crashed is None:
            break
        if crashed not in reported:
            counts.failed += 1
            counts.failures.append(crashed)
        counts.failures = [f"{name} (panicked)" if name == crashed else name for name in counts.failures]
        reported.add(crashed)
        remaining = [name for name in remaining if name not in reported]
    return counts


def still_failing(system: str, names: list[str], attempts: int = 2, *, log: Path | None = None) -> list[str]:
    """Those of ``names`` (failed tests, "(panicked)" allowed) that fail each of ``attempts``
    runs on their own: the suite's reconnect tests race the client's notice of a killed
    server, and fail now and then on both systems."""
    failing = []
    for name in (failure.split(" ")[0] for failure in names):
        if not any(run_suite(system, f"^{name}$", log=log).passed for _ in range(attempts)):
            failing.append(name)
    return failing


def run_probe(hosts: str, root: str = "/gozk-probe", goroutines: int = 8, requests: int = 60) -> str:
    """``gozk_probe.go`` (built once with Debian's go-zookeeper): ``goroutines`` goroutines each
    sending ``requests`` creates, sets and gets on one connection; its ``ok N errors M`` line.

    Raises:
        RuntimeError: it failed to build, or a request failed (its output in the message).
    """
    if not shutil.which("go") or not (GOPATH / "src" / PACKAGE).exists():
        ensure_debian_clients()
    binary = CACHE / "go" / f"gozk_probe-{hashlib.sha256(PROBE_SOURCE.read_bytes()).hexdigest()[:12]}"
    if not binary.exists():
        source = CACHE / "go" / "probe" / "main.go"
        source.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PROBE_SOURCE, source)
        env = {**os.environ, "GOPATH": str(GOPATH), "GO111MODULE": "off", "GOCACHE": str(CACHE / "go" / "build-cache")}
        partial = binary.with_name(f"{binary.name}.{os.getpid()}")  # renamed into place whole: parallel test workers may build it at once
        built = subprocess.run(["go", "build", "-o", str(partial), str(source)], env=env, capture_output=True, text=True, timeout=600, check=False)
        if built.returncode != 0:
            raise RuntimeError(f"go build gozk_probe.go failed:\n{built.stderr[-2000:]}")
        os.replace(partial, binary)
    done = subprocess.run([str(binary), hosts, root, str(goroutines), str(requests)], capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"gozk_probe exited with {done.returncode}: {done.stdout[-500:]}{done.stderr[-1500:]}")
    return done.stdout.strip()


def _panicked(output: str) -> str | None:
    """The test whose panic ended go's test binary: the one reported failed just before the
    panic, else the last one started (None: no panic)."""
    head, found, _ = output.partition("\npanic: ")
    if not found:
        return None
    failed = re.findall(r"^--- FAIL: (\S+)", head.rsplit("\n", 1)[-1], re.M)
    started = re.findall(r"^=== RUN\s+(\S+)", head, re.M)
    return failed[-1] if failed else (started[-1] if started else None)


def _go_test(arguments: list[str], env: dict[str, str], log: Path | None, timeout_s: float) -> str:
    command = ["go", "test", "-count=1", *arguments, PACKAGE]
    CACHE.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(command, env=env, cwd=CACHE, capture_output=True, text=True, timeout=timeout_s + 120, check=False)
    output = done.stdout + done.stderr
    if log is not None:
        with open(log, "a") as out:
            out.write(output)
    return output


def go_test_counts(output: str) -> SuiteCounts:
    """The counts of ``go test -v`` output (top-level tests only; subtests are not counted)."""
    counts = SuiteCounts()
    for match in re.finditer(r"^--- (PASS|FAIL|SKIP): (\S+)", output, re.M):
        outcome, name = match.groups()
        if outcome == "PASS":
            counts.passed += 1
        elif outcome == "SKIP":
            counts.skipped += 1
        else:
            counts.failed += 1
            counts.failures.append(name)
    return counts


# --- the launcher: ``java -jar <placeholder> server zoo.cfg`` --------------------------------


def _read_config(path: Path) -> dict[str, str]:
    settings: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith("#"):
            settings[key.strip()] = value.strip()
    return settings


def _jvm_flags() -> dict[str, str]:
    """The ``-Dkey=value`` settings of ``SERVER_JVMFLAGS``."""
    flags = {}
    for word in os.environ.get("SERVER_JVMFLAGS", "").split():
        key, _, value = word[2:].partition("=") if word.startswith("-D") else ("", "", "")
        if key:
            flags[key] = value
    return flags


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def server_command(system: str, config: Path, inner_port: int) -> list[str]:
    """Write the server's own config beside the harness's (its client port ``inner_port``) and
    return the command that runs it."""
    settings = {**_read_config(config), **_SERVER_SETTINGS, "clientPort": str(inner_port)}
    folder = config.parent
    flags = _jvm_flags()
    if system == "zabby":
        settings.update({_ZABBY_KEYS[key]: value for key, value in flags.items() if key in _ZABBY_KEYS})
        target = folder / "zabby.cfg"
        target.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        return [sys.executable, "-m", "zabby.server.main", str(target)]
    target = folder / "zookeeper.cfg"
    target.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    (folder / "log4j.properties").write_text(ZOOKEEPER_LOG4J)
    command = zookeeper_command(folder, target, jvm_options=("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"), properties=flags)
    command[0] = os.environ.get(REAL_JAVA_ENV, "java")
    return command


def _inner_port(config: Path) -> int:
    """The server's own client port: the same across the harness's restarts of one server."""
    remembered = config.parent / "inner-port"
    if remembered.exists():
        return int(remembered.read_text())
    port = free_port()
    remembered.write_text(str(port))
    return port


def launch(system: str, config: Path) -> int:
    """Run the server of ``config`` behind a proxy on the harness's client port, until killed."""
    client_port = int(_read_config(config)["clientPort"])
    inner = _inner_port(config)
    with open(config.parent / "server.log", "ab") as log:
        server = subprocess.Popen(server_command(system, config, inner), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  cwd=CHECKOUT, preexec_fn=_die_with_parent)  # fmt: skip
    proxy = ClientProxy(inner, client_port, srvr_rewrite=old_srvr)

    parent = os.getppid()

    async def serve() -> None:
        """Until the server ends, or the harness that started us does (a Go test binary that
        panics runs no deferred Stop: its servers would live on, and a later test's cluster
        would find their ports taken)."""
        serving = asyncio.create_task(proxy.serve())
        while server.poll() is None and os.getppid() == parent:
            await asyncio.sleep(0.2)
        serving.cancel()

    try:
        asyncio.run(serve())
    finally:
        if server.poll() is None:
            server.kill()
    return server.returncode or 0


def main(argv: Sequence[str] | None = None) -> int:
    """``java ARGS``: the harness's launch of the placeholder jar starts the system under test;
    any other java command runs the real java."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 4 and args[0] == "-jar" and Path(args[1]).name == PLACEHOLDER_JAR and args[2] == "server":
        return launch(os.environ.get(SYSTEM_ENV, "zabby"), Path(args[3]))
    os.execv(os.environ.get(REAL_JAVA_ENV, "/usr/bin/java"), ["java", *args])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
