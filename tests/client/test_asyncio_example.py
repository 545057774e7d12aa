"""examples/asyncio_service.py against a real server: two instances, one leads; the watched
configuration is served and follows its changes; the other leads once the first stops."""

from __future__ import annotations

import http.client
import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from zabby import SyncClient
from zabby.testing import ServerProcess, wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "asyncio_service.py"
START_S = 20.0
STOP_S = 15.0


def get(port: int, target: str) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", target)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


class Instance:
    """One process of the example; ``port`` once it serves."""

    def __init__(self, hosts: str, name: str) -> None:
        command = [sys.executable, str(EXAMPLE), "--hosts", hosts, "--port", "0", "--name", name,
                   "--config-path", "/svc/config", "--lock-path", "/svc/leader"]  # fmt: skip
        environment = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment)
        self.port = self._wait_serving()

    def _wait_serving(self) -> int:
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            if not selector.select(START_S):
                self.proc.kill()
                raise AssertionError(f"the example did not start within {START_S}s")
        line = self.proc.stdout.readline().decode()
        if not line.startswith("serving on http://127.0.0.1:"):
            self.proc.kill()
            raise AssertionError(f"the example said {line!r}; stderr: {self.proc.stderr.read().decode() if self.proc.stderr else ''}")
        return int(line.rsplit(":", 1)[1])

    def stop(self) -> int:
        """SIGTERM (the example's clean stop); its exit status."""
        self.proc.terminate()
        try:
            return self.proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_S)
            raise AssertionError(f"the example did not stop within {STOP_S}s") from None


@pytest.fixture
def instances(zabby_server: ServerProcess) -> Iterator[list[Instance]]:
    started: list[Instance] = []
    try:
        yield started
    finally:
        for instance in started:
            if instance.proc.poll() is None:
                instance.proc.kill()
                instance.proc.wait(STOP_S)


def test_the_example_serves_the_watched_config_and_hands_leadership_over(zabby_server: ServerProcess, instances: list[Instance]) -> None:
    with SyncClient(zabby_server.hosts) as admin:
        admin.create("/svc/config", b"v1", makepath=True)
        instances.append(Instance(zabby_server.hosts, "first"))
        first = instances[0]
        wait_until(lambda: get(first.port, "/leader")[1]["leader"], 10, "the first instance leads")
        instances.append(Instance(zabby_server.hosts, "second"))
        second = instances[1]
        assert get(first.port, "/config") == (200, {"value": "v1", "version": 0})
        assert get(second.port, "/leader") == (200, {"name": "second", "leader": False})
        assert get(second.port, "/znode/svc/config")[1]["value"] == "v1"
        assert get(second.port, "/nowhere")[0] == 404 and get(second.port, "/znode/svc/none")[0] == 404
        admin.set("/svc/config", b"v2")
        for instance in (first, second):
            wait_until(lambda: get(instance.port, "/config") == (200, {"value": "v2", "version": 1}), 10, "the new value served")
        started = time.monotonic()
        assert first.stop() == 0
        wait_until(lambda: get(second.port, "/leader")[1]["leader"], 10, "the second instance leads")
        assert time.monotonic() - started < 10
        admin.delete("/svc/config")
        wait_until(lambda: get(second.port, "/config")[0] == 404, 10, "the deletion seen")
        assert second.stop() == 0
