"""The admin HTTP endpoint: ``/commands/<name>`` answers each four-letter word as JSON and
``/metrics`` serves Prometheus text: mntr's figures, the latency histograms and zabby's own
(``zabby.server.adminport.metrics``).  Both read a frozen snapshot of the server
(``zabby.server.adminport.statistics``).  ``/commands/snapshot`` streams a snapshot file made by a
forked child (ZooKeeper 3.9's ``snapshot?streaming=true``), and ``/console`` is the read-only
web console (``zabby.server.adminport.console``); both are guarded by ``admin.console.address`` and
``admin.console.auth``.

A deliberately small HTTP/1.0-style server on trio: one request per connection, GET (HEAD, and
POST for the counter resets), bounded request size.  What reveals more than figures needs an
administrator's credentials (``ADMIN_WORDS``, ``console.refusal``).  A busy port is logged and the server goes on without the endpoint.
"""

from __future__ import annotations

import functools
import json
from functools import partial
import logging
import time

import trio

from zabby.server.adminport import browsers, console, fourletter, http
from zabby.server.process.forks import download_image
from zabby.server.process.guard import contained
from zabby.server.process.listeners import serve_listeners
from zabby.server.process.sources import SourceCounts, source_of
from zabby.server.adminport.statistics import Monitored, reset, snapshot
from zabby.server.peering.transport import peer_host, relay_forked
from zabby.storage.snapshot import snapshot_name

LOGGER = logging.getLogger("zabby.server.admin")
SEND_CHUNK_BYTES = 64 * 1024
REFUSAL_S = 0.05  # what a refused connection may take of the server's time
SNAPSHOT_COMMAND = "snapshot"
SNAPSHOT_STATES = frozenset({"leader", "follower", "observer", "standalone"})  # serving: the tree is current

ALIASES = {
    "configuration": "conf", "config": "conf", "connections": "cons", "connection_stat_reset": "crst",
    "environment": "envi", "env": "envi", "initial_configuration": "icfg", "is_read_only": "isro", "monitor": "mntr",
    "server_stats": "srvr", "stats": "stat", "stat_reset": "srst", "watches": "wchc",
    "watches_by_path": "wchp", "watch_summary": "wchs",
}  # fmt: skip


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
        from zabby.server.adminport import metrics  # with prometheus_client: at the first scrape, not at every start

        return "200 OK", "text/plain; version=0.0.4", metrics.exposition(server)
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


async def _read_head(stream: trio.SocketStream, deadline_s: float) -> bytes:
    """The request's head, as much of it as came within ``deadline_s`` (all of it, however
    slowly it trickles, must come by then)."""
    data = b""
    with trio.move_on_after(deadline_s):
        while not http.head_complete(data):
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            data += chunk
    return data


async def send_within(stream: trio.abc.SendStream, data: bytes | bytearray | memoryview, idle_s: float) -> None:
    """Send ``data``, each ``SEND_CHUNK_BYTES`` of it within ``idle_s`` (admin.idleTimeout).

    Raises: trio.TooSlowError for a caller that stopped reading; the network's errors."""
    view = memoryview(data)
    for start in range(0, len(view), SEND_CHUNK_BYTES):
        with trio.fail_after(idle_s):
            await stream.send_all(view[start : start + SEND_CHUNK_BYTES])


async def _stream_snapshot(port: AdminPort, request: http.Request, stream: trio.SocketStream) -> None:
    """``GET <commandURL>/snapshot``: a snapshot file of the tree at one zxid, written by a
    forked child and relayed as it is written (see ``zabby.ops.fetch`` for the client)."""
    server, busy = port.server, port.busy
    refused = _snapshot_refusal(server, request, busy)
    if refused is not None:
        await send_within(stream, refused.encode(), port.idle_s)
        return
    async with busy:
        forked, zxid, digest = download_image(server.tree)
        headers = ((http.SNAPSHOT_ZXID_HEADER, f"0x{zxid:x}"), (http.SNAPSHOT_DIGEST_HEADER, f"0x{digest:016x}"),
                   ("Content-Disposition", f'attachment; filename="{snapshot_name(zxid)}"'))  # fmt: skip
        try:
            await send_within(stream, http.Response("200 OK", "application/octet-stream", headers=headers).head(None), port.idle_s)
        except BaseException:  # the caller went away before the first byte: stop the child
            forked.abandon()
            raise
        started = time.perf_counter()
        sent, failure = await relay_forked(forked, _IdleBound(stream, port.idle_s))
    if failure is not None:
        LOGGER.error("snapshot download at 0x%x cut short after %d bytes: %s", zxid, sent, failure)
        return
    LOGGER.info("streamed a snapshot at 0x%x: %d bytes in %.2f s", zxid, sent, time.perf_counter() - started)


class _IdleBound(trio.abc.SendStream):
    """A stream each part of whose sends must leave within ``idle_s`` (``send_within``): a
    snapshot download that stops reading is cut, and its child stopped, after that long."""

    def __init__(self, stream: trio.abc.SendStream, idle_s: float) -> None:
        self.stream, self.idle_s = stream, idle_s

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await send_within(self.stream, data, self.idle_s)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.stream.aclose()


def _snapshot_refusal(server: Monitored, request: http.Request, busy: trio.Lock) -> http.Response | None:
    denied = console.refusal(server.config, request)
    if denied is not None:
        return denied
    if server.state not in SNAPSHOT_STATES:
        return http.Response("503 Service Unavailable", "application/json", b'{"error": "this server is not serving: take the snapshot from one that is"}')
    if busy.locked():
        return http.Response("429 Too Many Requests", "application/json", b'{"error": "a snapshot is already streaming"}')
    return None


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


class AdminPort:
    """The admin port's connections: at most ``admin.maxConnections`` at once, and
    ``admin.maxConnectionsPerHost`` from one source (``zabby.server.process.sources``); each must send
    its request's head within ``admin.idleTimeout`` and take each part of its answer within it
    too.  A connection over a bound is answered 503 at once and closed.

    A request that carries HTTP Basic credentials takes a token of its source's guesses first,
    from the bucket SASL responses take from too (``zabby.server.clients.throttle``): over the rate it
    is answered 429 unchecked, right or wrong alike, so neither the answer nor its timing tells
    anything of the password."""

    def __init__(self, server: Monitored) -> None:
        config = server.config
        self.server = server
        self.connections = SourceCounts(config.admin_connections_max, config.admin_connections_per_host_max)
        self.idle_s = config.admin_idle_timeout_ms / 1000
        self.host_names = browsers.HostNames.of(config)
        self.busy = trio.Lock()  # one snapshot stream at a time: each holds a forked child

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            source = source_of(peer_host(stream))
            full = self.connections.take(source)
            if full is not None:
                self.server.warn_rate_limited("admin-connections", f"refusing an admin connection from {source}: {full} "
                                                                   f"(admin.maxConnections, admin.maxConnectionsPerHost)")  # fmt: skip
                busy = http.Response("503 Service Unavailable", "text/plain", f"too many admin connections: {full}\n".encode(), (("Retry-After", "1"),))
                await _refuse(stream, busy)
                return
            try:
                await self._answer(stream, source)
            finally:
                self.connections.give_back(source)

    async def _answer(self, stream: trio.SocketStream, source: str) -> None:
        request = http.parse_request(await _read_head(stream, self.idle_s), stream.socket.getsockname()[0])
        if request is None:
            response = http.Response("400 Bad Request", "text/plain", b"only GET, HEAD and POST are supported\n")
        else:
            gated = await self._gate(request, source)
            if gated is None and request.path == self.snapshot_path:
                await _stream_snapshot(self, request, stream)
                return
            response = gated or await self._respond(request)
        await send_within(stream, response.encode(send_body=request is None or request.method != "HEAD"), self.idle_s)

    @property
    def snapshot_path(self) -> str:
        return f"{self.server.config.admin_command_url.rstrip('/')}/{SNAPSHOT_COMMAND}"

    async def _gate(self, request: http.Request, source: str) -> http.Response | None:
        """What answers a request before what it asks is looked at: a refusal of its Host or
        its origin (``zabby.server.adminport.browsers``; a POST or the snapshot stream must come from
        this origin), or 429 for credentials over their pace; None: it may go on."""
        changes_state = request.method == "POST" or request.path == self.snapshot_path
        refused = browsers.refusal(request, self.host_names, changes_state=changes_state)
        if refused is not None:
            return refused
        if "authorization" in request.headers and not self.server.secret_attempt(source):
            self.server.warn_rate_limited("admin-guesses", f"refusing credentials from {source} unchecked: more were tried than its rate")
            return http.Response("429 Too Many Requests", "application/json", b'{"error": "too many credentials tried: wait"}', (("Retry-After", "1"),))
        return None

    async def _respond(self, request: http.Request) -> http.Response:
        server = self.server
        if server.config.console_enabled and (request.path == console.PREFIX or request.path.startswith(console.PREFIX + "/")):
            return await console.respond(server, request)
        return _command_refusal(server, request) or http.Response(*render(server, request.target))


async def _refuse(stream: trio.SocketStream, response: http.Response) -> None:
    """Answer ``response`` without reading the request, in a moment: what the caller sent
    already is read first, so that the close is no reset that would lose the answer."""
    with trio.move_on_after(REFUSAL_S):
        await stream.receive_some(http.REQUEST_BYTES_MAX)
    with trio.move_on_after(REFUSAL_S):
        await stream.send_all(response.encode())


async def serve_admin(server: Monitored, *, task_status: trio.TaskStatus[int | None] = trio.TASK_STATUS_IGNORED) -> None:
    config = server.config
    try:
        listeners = await trio.open_tcp_listeners(config.admin_port, host=config.admin_address)
    except OSError as exc:
        LOGGER.warning("admin server not started: port %s:%d is unavailable (%s)", config.admin_address, config.admin_port, exc)
        task_status.started(None)
        return
    port = listeners[0].socket.getsockname()[1]
    LOGGER.info("admin server on http://%s:%d%s", config.admin_address, port, config.admin_command_url)
    task_status.started(port)
    admin = AdminPort(server)

    def refused() -> None:
        server.warn_rate_limited("descriptors", f"refusing an admin connection: the {server.descriptors.capacity} descriptors "
                                                f"connections may hold are held (RLIMIT_NOFILE less descriptorReserve)")  # fmt: skip

    await serve_listeners(partial(contained, "an admin request", LOGGER, admin.handle), listeners, descriptors=server.descriptors, refused=refused)
