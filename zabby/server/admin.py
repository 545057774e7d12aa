"""The admin HTTP endpoint: ``/commands/<name>`` answers each four-letter word as JSON and
``/metrics`` serves Prometheus text (prometheus_client), mntr's figures included.  Both read a
frozen snapshot of the server (``zabby.server.statistics``).

A deliberately small HTTP/1.0-style server on trio: one request per connection, GET only,
bounded request size.  A busy port is logged and the server goes on without the endpoint.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterator

import trio
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from zabby.server import fourletter
from zabby.server.guard import contained
from zabby.server.statistics import Monitored, reset, snapshot

LOGGER = logging.getLogger("zabby.server.admin")
REQUEST_BYTES_MAX = 8192

ALIASES = {
    "configuration": "conf", "config": "conf", "connections": "cons", "connection_stat_reset": "crst",
    "environment": "envi", "env": "envi", "is_read_only": "isro", "monitor": "mntr",
    "server_stats": "srvr", "stats": "stat", "stat_reset": "srst", "watches": "wchc",
    "watches_by_path": "wchp", "watch_summary": "wchs",
}  # fmt: skip


class MntrCollector(Collector):
    def __init__(self, server: Monitored) -> None:
        self.server = server

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for key, value in fourletter.mntr_data(snapshot(self.server, fourletter.parts("mntr"))).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                yield GaugeMetricFamily(f"zk_{key}", f"mntr {key}", value=value)


def render(server: Monitored, target: str) -> tuple[str, str, bytes]:
    """(status, content type, body) for a GET of ``target``."""
    path = target.split("?", 1)[0].rstrip("/")
    prefix = server.config.admin_command_url.rstrip("/")
    if path == "/metrics":
        return "200 OK", "text/plain; version=0.0.4", generate_latest(server.stats.registry)
    if path == prefix:
        names = sorted(set(fourletter.DATA) | set(ALIASES))
        return "200 OK", "application/json", json.dumps({"commands": names}).encode()
    if path.startswith(prefix + "/"):
        name = path[len(prefix) + 1 :]
        word = ALIASES.get(name, name)
        if word in fourletter.DATA:
            figures = fourletter.data(word, snapshot(server, fourletter.parts(word)), functools.partial(reset, server))
            body = {"command": name, **figures, "error": None}
            return "200 OK", "application/json", json.dumps(body, default=str, indent=2).encode()
        return "404 Not Found", "application/json", json.dumps({"command": name, "error": "Unknown command: " + name}).encode()
    return "404 Not Found", "text/plain", b"not found\n"


async def _handle(server: Monitored, stream: trio.SocketStream) -> None:
    async with stream:
        data = b""
        with trio.move_on_after(10):
            while b"\r\n\r\n" not in data and b"\n\n" not in data and len(data) < REQUEST_BYTES_MAX:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                data += chunk
        parts = data.split(b"\r\n", 1)[0].split()
        if len(parts) < 2 or parts[0] not in (b"GET", b"HEAD"):
            status, ctype, body = "400 Bad Request", "text/plain", b"only GET is supported\n"
        else:
            status, ctype, body = render(server, parts[1].decode("latin-1"))
        head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        await stream.send_all(head.encode() + (body if parts[:1] != [b"HEAD"] else b""))


async def serve_admin(server: Monitored, *, task_status: trio.TaskStatus[int | None] = trio.TASK_STATUS_IGNORED) -> None:
    config = server.config
    try:
        listeners = await trio.open_tcp_listeners(config.admin_port, host=config.admin_address)
    except OSError as exc:
        LOGGER.warning("admin server not started: port %s:%d is unavailable (%s)", config.admin_address, config.admin_port, exc)
        task_status.started(None)
        return
    server.stats.registry.register(MntrCollector(server))
    port = listeners[0].socket.getsockname()[1]
    LOGGER.info("admin server on http://%s:%d%s", config.admin_address, port, config.admin_command_url)
    task_status.started(port)
    await trio.serve_listeners(lambda stream: contained("an admin request", LOGGER, _handle, server, stream), listeners)
