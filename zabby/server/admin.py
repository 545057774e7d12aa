"""The admin HTTP endpoint: ``/commands/<name>`` answers each four-letter word as JSON and
``/metrics`` serves Prometheus text (prometheus_client), mntr's figures and zabby's own
(``zabby.server.metrics``).  Both read a frozen snapshot of the server
(``zabby.server.statistics``).  ``/commands/snapshot`` streams a snapshot file made by a
forked child (ZooKeeper 3.9's ``snapshot?streaming=true``), and ``/console`` is the read-only
web console (``zabby.server.console``); both are guarded by ``admin.console.address`` and
``admin.console.auth``.

A deliberately small HTTP/1.0-style server on trio: one request per connection, GET (HEAD, and
POST for the counter resets), bounded request size.  What reveals more than figures needs an
administrator's credentials (``ADMIN_WORDS``, ``console.refusal``).  A busy port is logged and the server goes on without the endpoint.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Iterator

import trio
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from zabby.server import console, fourletter, http
from zabby.server.forks import download_image
from zabby.server.guard import contained
from zabby.server.metrics import ZabbyCollector
from zabby.server.statistics import Monitored, reset, snapshot
from zabby.server.transport import relay_forked
from zabby.storage.snapshot import snapshot_name

LOGGER = logging.getLogger("zabby.server.admin")
SNAPSHOT_COMMAND = "snapshot"
SNAPSHOT_STATES = frozenset({"leader", "follower", "observer", "standalone"})  # serving: the tree is current

ALIASES = {
    "configuration": "conf", "config": "conf", "connections": "cons", "connection_stat_reset": "crst",
    "environment": "envi", "env": "envi", "initial_configuration": "icfg", "is_read_only": "isro", "monitor": "mntr",
    "server_stats": "srvr", "stats": "stat", "stat_reset": "srst", "watches": "wchc",
    "watches_by_path": "wchp", "watch_summary": "wchs",
}  # fmt: skip


class MntrCollector(Collector):
    def __init__(self, server: Monitored) -> None:
        self.server = server

    def collect(self) -> Iterator[GaugeMetricFamily]:
        figures = snapshot(self.server, fourletter.parts("mntr"))
        quotas = fourletter.quota_metrics(figures)
        per_namespace = {f"{namespace}_{name}" for name, values in quotas.items() for namespace in values}
        for key, value in fourletter.mntr_data(figures).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in per_namespace:
                yield GaugeMetricFamily(f"zk_{key}", f"mntr {key}", value=value)
        for name, values in quotas.items():  # a namespace is a label: it need not be a metric name
            family = GaugeMetricFamily(f"zk_{name}", f"mntr {name}", labels=["key"])
            for namespace, value in values.items():
                family.add_metric([namespace], value)
            yield family


# What needs an administrator's credentials (console.refusal): client addresses (stat, cons),
# session ids and their watches' paths (dump, wchc, wchp), the host and its folders (envi,
# conf, icfg, dirs), the tree's digests (hash), and the counter resets, which change state
# and take a POST.  srvr, mntr, ruok, isro, wchs and /metrics stay open, for monitoring.
ADMIN_WORDS = frozenset({"stat", "cons", "dump", "wchc", "wchp", "envi", "conf", "icfg", "dirs", "hash", "crst", "srst"})
STATE_WORDS = frozenset({"crst", "srst"})


def render(server: Monitored, target: str) -> tuple[str, str, bytes]:
    """(status, content type, body) for a GET of ``target`` (the caller checked who may)."""
    path = target.split("?", 1)[0].rstrip("/")
    prefix = server.config.admin_command_url.rstrip("/")
    if path == "/metrics":
        return "200 OK", "text/plain; version=0.0.4", generate_latest(server.stats.registry)
    if path == prefix:
        names = sorted(set(fourletter.DATA) | set(ALIASES) | {SNAPSHOT_COMMAND})
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


async def _read_head(stream: trio.SocketStream) -> bytes:
    data = b""
    with trio.move_on_after(10):
        while not http.head_complete(data):
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            data += chunk
    return data


async def _stream_snapshot(server: Monitored, request: http.Request, stream: trio.SocketStream, busy: trio.Lock) -> None:
    """``GET <commandURL>/snapshot``: a snapshot file of the tree at one zxid, written by a
    forked child and relayed as it is written (see ``zabby.ops.fetch`` for the client)."""
    denied = console.refusal(server.config, request)
    if denied is not None:
        await stream.send_all(denied.encode())
        return
    if server.state not in SNAPSHOT_STATES:
        refused = http.Response("503 Service Unavailable", "application/json", b'{"error": "this server is not serving: take the snapshot from one that is"}')
        await stream.send_all(refused.encode())
        return
    if busy.locked():
        await stream.send_all(http.Response("429 Too Many Requests", "application/json", b'{"error": "a snapshot is already streaming"}').encode())
        return
    async with busy:
        forked, zxid, digest = download_image(server.tree)
        headers = ((http.SNAPSHOT_ZXID_HEADER, f"0x{zxid:x}"), (http.SNAPSHOT_DIGEST_HEADER, f"0x{digest:016x}"),
                   ("Content-Disposition", f'attachment; filename="{snapshot_name(zxid)}"'))  # fmt: skip
        try:
            await stream.send_all(http.Response("200 OK", "application/octet-stream", headers=headers).head(None))
        except BaseException:  # the caller went away before the first byte: stop the child
            forked.abandon()
            raise
        started = time.perf_counter()
        sent, failure = await relay_forked(forked, stream)
    if failure is not None:
        LOGGER.error("snapshot download at 0x%x cut short after %d bytes: %s", zxid, sent, failure)
        return
    LOGGER.info("streamed a snapshot at 0x%x: %d bytes in %.2f s", zxid, sent, time.perf_counter() - started)


def word_of(server: Monitored, request: http.Request) -> str | None:
    """The four-letter word a ``/commands/<name>`` request asks for (None: another path)."""
    prefix = server.config.admin_command_url.rstrip("/") + "/"
    if not request.path.startswith(prefix):
        return None
    name = request.path[len(prefix) :]
    return ALIASES.get(name, name)


def _command_refusal(server: Monitored, request: http.Request) -> http.Response | None:
    """Why a ``/commands`` request may not have its answer, if it may not."""
    word = word_of(server, request)
    if word in STATE_WORDS and request.method != "POST":
        return http.Response("405 Method Not Allowed", "application/json", json.dumps({"error": f"{word} changes state: POST it"}).encode(),
                             (("Allow", "POST"),))  # fmt: skip
    if word not in STATE_WORDS and request.method == "POST":
        return http.Response("405 Method Not Allowed", "application/json", b'{"error": "only the counter resets take a POST"}', (("Allow", "GET"),))
    if word in ADMIN_WORDS:
        return console.refusal(server.config, request, local=False)
    return None


async def _handle(server: Monitored, busy: trio.Lock, stream: trio.SocketStream) -> None:
    async with stream:
        request = http.parse_request(await _read_head(stream), stream.socket.getsockname()[0])
        if request is None:
            response = http.Response("400 Bad Request", "text/plain", b"only GET, HEAD and POST are supported\n")
        elif request.path == f"{server.config.admin_command_url.rstrip('/')}/{SNAPSHOT_COMMAND}":
            await _stream_snapshot(server, request, stream, busy)
            return
        elif server.config.console_enabled and (request.path == console.PREFIX or request.path.startswith(console.PREFIX + "/")):
            response = await console.respond(server, request)
        else:
            response = _command_refusal(server, request) or http.Response(*render(server, request.target))
        await stream.send_all(response.encode(send_body=request is None or request.method != "HEAD"))


async def serve_admin(server: Monitored, *, task_status: trio.TaskStatus[int | None] = trio.TASK_STATUS_IGNORED) -> None:
    config = server.config
    try:
        listeners = await trio.open_tcp_listeners(config.admin_port, host=config.admin_address)
    except OSError as exc:
        LOGGER.warning("admin server not started: port %s:%d is unavailable (%s)", config.admin_address, config.admin_port, exc)
        task_status.started(None)
        return
    server.stats.registry.register(MntrCollector(server))
    server.stats.registry.register(ZabbyCollector(server))
    port = listeners[0].socket.getsockname()[1]
    LOGGER.info("admin server on http://%s:%d%s", config.admin_address, port, config.admin_command_url)
    task_status.started(port)
    busy = trio.Lock()  # one snapshot stream at a time: each holds a forked child
    await trio.serve_listeners(lambda stream: contained("an admin request", LOGGER, _handle, server, busy, stream), listeners)
