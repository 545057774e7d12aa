"""The differential's Java leg: the same seeded ops through ZooKeeper's own Java client.

``JavaClientDriver.java`` (beside this file) is compiled at run time against Debian's
``libzookeeper-java`` and runs as one process per executor; it holds the sessions and answers
one JSON command per line:

* ``open`` (label, digest credentials) → the session id; ``close`` (label);
* ``op`` (label, kind, args) → the op's result, the same plain tuple ``execute`` makes from
  kazoo, with ZooKeeper error codes (mapped here to kazoo's names, which the workload learns
  from) and the client's own refusals by Java exception name;
* ``read_all``: an ``exists("/")`` on every session; ``drain``: what each session's event
  thread logged since the last drain: watch events and a marker per reply, in wire order.

The harness itself (the seed's root, reaping, clean-up) stays on the kazoo admin session of
``Executor``: only the sessions under test change client.
"""

from __future__ import annotations

import base64
import json
import select
import subprocess
from pathlib import Path
from typing import Any

from harness.differential.execute import Executor, LoggedSession, error_name
from harness.differential.model import CREDENTIALS, Event, Op, Stat
from harness.differential.workload import Workload
from harness.local.javac import JAVA_DIR, classpath, compile_java
from harness.local.zookeeper import ZK_JAR
from zabby.opcodes import EventType

SOURCE = Path(__file__).with_name("JavaClientDriver.java")
ANSWER_TIMEOUT_S = 90.0  # the driver's own waits end after 30 s; a silent driver is broken
JAVA_ONLY_WEIGHTS = {"get_config": 2, "reconfig": 2}
WATCH_REMOVED_TYPES = frozenset({EventType.DATA_WATCH_REMOVED, EventType.CHILD_WATCH_REMOVED, EventType.PERSISTENT_WATCH_REMOVED})


def build_driver() -> Path:
    return compile_java("zk-java-driver", [SOURCE], [ZK_JAR])


class JavaDriver:
    """One JavaClientDriver process: send a command, read its answer."""

    def __init__(self, hosts: str) -> None:
        argv = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dzookeeper.sasl.client=false",
                "-cp", classpath(build_driver(), ZK_JAR, JAVA_DIR / "slf4j-nop.jar"), "JavaClientDriver", hosts]  # fmt: skip
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, encoding="utf-8", bufsize=1)  # fmt: skip
        self._read_line()  # {"ready": true}

    def call(self, cmd: str, **fields: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, **fields}) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self._read_line())
        if "fail" in answer:
            raise RuntimeError(f"Java client driver: {cmd} failed: {answer['fail']}")
        return answer["ok"]

    def _read_line(self) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], ANSWER_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.stop()
            raise RuntimeError(f"Java client driver gave no answer in {ANSWER_TIMEOUT_S} s (exit {self.proc.poll()})")
        return line

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # the driver closes its sessions at end of input
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class JavaSession:
    """A session of the Java client, under a label; ``log`` is filled by the executor's drains."""

    def __init__(self, driver: JavaDriver, label: str) -> None:
        self.driver = driver
        self.label = label
        self.log: list[Event] = []

    def start(self, user: str | None) -> int:
        auth = None if user is None else f"{user}:{CREDENTIALS[user]}"
        return int(self.driver.call("open", label=self.label, auth=auth))

    def stop(self) -> None:
        self.driver.call("close", label=self.label)


class JavaExecutor(Executor):
    """``Executor`` with the sessions under test on ZooKeeper's Java client."""

    def __init__(self, hosts: str, root: str) -> None:
        super().__init__(hosts, root)
        self.driver = JavaDriver(hosts)

    def _new_session(self, label: str) -> LoggedSession:
        return JavaSession(self.driver, label)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.driver.stop()

    def _gather_logs(self) -> None:
        for label, entries in self.driver.call("drain").items():
            if label in self.sessions:
                self.sessions[label].log += _removals_sorted([tuple(entry) for entry in entries])

    def _read_on_every_session(self) -> None:
        self.driver.call("read_all")

    def _perform(self, op: Op) -> tuple[Any, ...]:
        if op.kind == "reopen":
            self._gather_logs()
            self.sessions.pop(op.client).stop()
            self._open_session(op.client)
            return ("reopened",)
        args = op.args
        if op.kind == "add_auth":
            args = (f"{args[0]}:{CREDENTIALS[args[0]]}",)
        return _decoded(self.driver.call("op", label=op.client, kind=op.kind, args=_encoded(args)))


class JavaWorkload(Workload):
    """The kazoo leg's workload and the ops only the Java client has a method for: getConfig
    (with a watch) and reconfig (a standalone server refuses it; see the ensemble leg)."""

    def __init__(self, seed: int, root: str) -> None:
        super().__init__(seed, root)
        self._kinds += list(JAVA_ONLY_WEIGHTS)
        self._kind_weights += list(JAVA_ONLY_WEIGHTS.values())

    def _args_get_config(self) -> tuple[Any, ...]:
        return (self._watch(),)

    def _args_reconfig(self) -> tuple[Any, ...]:
        member = "server.9=127.0.0.1:1:2;3"
        return self.rng.choice(((member, None, None, -1), (None, "1", None, -1), (None, None, member, 7)))


def _removals_sorted(log: list[Event]) -> list[Event]:
    """``log`` with each run of watch-removed events sorted.  The Java client makes those events
    itself, one per watch type removed, in the order of a HashMap keyed by EventType (identity
    hash codes: another order in each JVM), so only which ones came is the server's doing."""
    out: list[Event] = []
    run: list[Event] = []
    for entry in log:
        if entry[0] == "event" and entry[1] in WATCH_REMOVED_TYPES:
            run.append(entry)
            continue
        out += sorted(run)
        out.append(entry)
        run = []
    return out + sorted(run)


def _encoded(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode()}
    if isinstance(value, (tuple, list)):
        return [_encoded(item) for item in value]
    return value


def _decoded(value: Any) -> Any:
    """A driver's answer as the executor's plain values: tuples, bytes, Stat, kazoo's error names."""
    if isinstance(value, dict):
        return Stat(*value["stat"]) if "stat" in value else base64.b64decode(value["b64"])
    if isinstance(value, list):
        if len(value) == 2 and value[0] == "error" and isinstance(value[1], int):
            return ("error", error_name(value[1]))
        return tuple(_decoded(item) for item in value)
    return value

