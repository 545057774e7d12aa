"""The read-only web console on the admin port: ``/console`` (one page) and its JSON API
under ``/console/api/``: ``server``, ``ensemble``, ``tree?path=&offset=&limit=``,
``sessions`` and ``watches``.

Access (``admin.console.*`` in zoo.cfg):

- ``admin.console.address`` (default 127.0.0.1): the console answers only requests that
  arrive on this local address, whatever ``admin.serverAddress`` the endpoint listens on, so
  ``/metrics`` can be scraped from elsewhere while the console stays on the host; 0.0.0.0
  opens it to every address.
- ``admin.console.auth=user:base64(sha1(user:password))`` (``zabby-admin digest`` prints
  it): HTTP Basic credentials are asked for and checked against that digest.

The ensemble view asks every member for ``mntr`` on its client port, two seconds at most
each: the members are the committed membership this server shows in ``/zookeeper/config``
(which a reconfig changes), else the configuration's ``server.N`` lines; a member's client
port is the one its line names (``server.N=host:q:e;clientPort``), else this server's.
This server's row comes from its own statistics.  Everything the
page shows comes from the same frozen statistics as the four-letter words, except the tree
browser, which reads one znode of the live tree as a client read would.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import importlib.resources
import ipaddress
import json
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from zabby.config import ServerConfig
from zabby.errors import InvariantError
from zabby.membership import Member, Membership, MembershipError
from zabby.server.adminport import fourletter
from zabby.server.adminport.console_views import BadRequest, ServerRow, ensemble_rows, node_view, row_from_mntr, sessions_view, watches_view
from zabby.server.adminport.browsers import page_policy
from zabby.server.adminport.http import CSP_HEADER, Request, Response
from zabby.server.trio_io import SystemClock
from zabby.server.adminport.statistics import Monitored, Reset, ServerStatistics, snapshot
from zabby.tree import acl
from zabby.tree.datatree import ZOOKEEPER_CONFIG

PREFIX = "/console"
PEER_TIMEOUT_S = 2.0
REPLY_BYTES_MAX = 1 << 20
ANY_ADDRESS = frozenset({"0.0.0.0", "::", "*"})
REALM = 'Basic realm="zabby console", charset="UTF-8"'
_NO_STORE = (("Cache-Control", "no-store"),)


def _json(status: str, body: Any) -> Response:
    return Response(status, "application/json", json.dumps(body, default=str).encode(), _NO_STORE)


def credentials(header: str | None) -> tuple[str, str] | None:
    """(user, password) from an HTTP Basic ``Authorization`` header, or None."""
    scheme, _, encoded = (header or "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep and user else None


def identity(request: Request) -> list[acl.AuthId]:
    """The ids a request proves: its HTTP Basic credentials as a digest id, as a client's
    ``addauth digest user:password`` proves it (none without credentials)."""
    given = credentials(request.headers.get("authorization"))
    return [] if given is None else [("digest", acl.digest(*given))]


def administrators(config: ServerConfig) -> list[str]:
    """The digest ids that may use the admin words: admin.console.auth's, and superDigest's."""
    return [ident for ident in (config.console_auth, config.super_digest) if ident]


def is_admin(config: ServerConfig, ids: list[acl.AuthId]) -> bool:
    return any(scheme == "digest" and hmac.compare_digest(ident, admin) for scheme, ident in ids for admin in administrators(config))


def authorized(expected: str, header: str | None) -> bool:
    """Do HTTP Basic credentials in ``header`` hash to the digest ``user:base64(sha1)``?"""
    given = credentials(header)
    return given is not None and hmac.compare_digest(acl.digest(*given), expected)


def _loopback(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1 on a dual-stack socket
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def arrived_on(address: str, request: Request) -> bool:
    """Did the request arrive on ``address`` (any loopback address stands for another)?"""
    if address in ANY_ADDRESS or request.local_address == address:
        return True
    return _loopback(address) and _loopback(request.local_address)


def refusal(config: ServerConfig, request: Request, *, admin: bool = True, local: bool = True) -> Response | None:
    """Why this request may not have what it asks, if it may not: the console and the snapshot
    stream answer only on ``admin.console.address`` (``local``); with ``admin.console.auth``
    set the console asks for those credentials; what reveals sessions, client addresses,
    paths, the environment or the whole tree, or changes state (``admin``), needs an
    administrator's (admin.console.auth's or superDigest's), and is refused where none is
    configured."""
    if local and not arrived_on(config.console_address, request):
        return _json("403 Forbidden", {"error": f"the console answers on {config.console_address} only (admin.console.address)"})
    if not admin and config.console_auth is None:
        return None
    if admin and not administrators(config):
        return _json("403 Forbidden", {"error": "this needs an administrator's credentials, and none is configured: set "
                                                "admin.console.auth (or superDigest) in zoo.cfg"})  # fmt: skip
    if not is_admin(config, identity(request)):
        return Response("401 Unauthorized", "application/json", b'{"error": "credentials required"}',
                        (("WWW-Authenticate", REALM), *_NO_STORE))  # fmt: skip
    return None


# ----------------------------------------------------------------------------- data
def _word(server: Monitored, word: str) -> dict[str, Any]:
    """A four-letter word's data, as ``/commands/<word>`` serves it (read-only words only)."""

    def no_reset(_: Reset) -> None:
        raise InvariantError(f"the console asked {word}, which changes state")

    return fourletter.data(word, snapshot(server, fourletter.parts(word)), no_reset)


def _own_row(config: ServerConfig, stats: ServerStatistics) -> ServerRow:
    latency = stats.counters.latency
    return ServerRow(
        config.server_id, f"{config.client_port_address}:{config.client_port}", stats.state, zxid=stats.last_zxid,
        digest=f"0x{stats.digest:016x}", connections=stats.connection_count, latency_avg_ms=latency.avg_ms,
        latency_max_ms=latency.max_ms, this_server=True,
    )  # fmt: skip


async def four_letter(host: str, port: int, word: str) -> str:
    """A four-letter word asked of another server (bounded in time and size)."""
    with trio.fail_after(PEER_TIMEOUT_S):
        stream = await trio.open_tcp_stream(host, port)
        async with stream:
            await stream.send_all(word.encode("ascii"))
            chunks, size = [], 0
            while size < REPLY_BYTES_MAX and (chunk := await stream.receive_some(65536)):
                chunks.append(chunk)
                size += len(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def members(server: Monitored) -> tuple[Member, ...]:
    """The committed membership (``/zookeeper/config``), else the configuration's."""
    node = server.tree.get(ZOOKEEPER_CONFIG)
    if node is not None and node.data:
        try:
            return Membership.parse(node.data.decode()).members
        except (MembershipError, UnicodeDecodeError):
            pass
    return server.config.peers


async def _peer_row(server: Monitored, peer: Member) -> ServerRow:
    """A member's row from its ``mntr``, asked on a connection that takes one of the
    descriptors connections may hold (``zabby.server.process.descriptors``)."""
    host = peer.client_host if peer.client_host not in (None, "0.0.0.0", "::") else peer.host
    port = peer.client_port or server.config.client_port
    address = f"{host}:{port}"
    if port is None:  # neither the member nor this server's configuration names a client port
        return ServerRow(peer.sid, address, "error", note="no client port known")
    if not server.descriptors.take():
        return ServerRow(peer.sid, address, "error", note="not asked: no descriptor free for the connection")
    try:
        return row_from_mntr(peer.sid, address, await four_letter(host, port, "mntr"))
    except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
        return ServerRow(peer.sid, address, "down", note=str(exc) or type(exc).__name__)
    finally:
        server.descriptors.give_back()


async def ensemble(server: Monitored) -> dict[str, Any]:
    config = server.config
    rows: dict[int, ServerRow] = {config.server_id: _own_row(config, snapshot(server))}

    async def ask(peer: Member) -> None:
        rows[peer.sid] = await _peer_row(server, peer)

    async with trio.open_nursery() as nursery:
        for peer in members(server):
            if peer.sid != config.server_id:
                nursery.start_soon(ask, peer)
    return {"servers": [row.as_dict() for row in ensemble_rows([rows[sid] for sid in sorted(rows)])]}


def _int(query: dict[str, str], name: str, default: int) -> int:
    try:
        return int(query.get(name, default))
    except ValueError:
        raise BadRequest(f"{name} must be an integer") from None


async def _tree(server: Monitored, request: Request) -> dict[str, Any]:
    """One znode, read as the request's identity: what a client with the same credentials
    could read (NOAUTH for the rest), the ACL's digests only with ADMIN on the node."""
    query = request.query
    ids = identity(request)
    superuser = server.config.skip_acl or (server.config.super_digest is not None and ("digest", server.config.super_digest) in ids)
    return node_view(server.tree, query.get("path", "/"), _int(query, "offset", 0), _int(query, "limit", 100), ids, superuser)


async def _server(server: Monitored, request: Request) -> dict[str, Any]:
    config = server.config
    return {"sid": config.server_id, "mode": server.state, "address": f"{config.client_port_address}:{config.client_port}"}


async def _ensemble(server: Monitored, request: Request) -> dict[str, Any]:
    return await ensemble(server)


async def _sessions(server: Monitored, request: Request) -> dict[str, Any]:
    return {"sessions": sessions_view(_word(server, "dump"), _word(server, "cons"), SystemClock.monotonic_ms())}  # the tracker's clock


async def _watches(server: Monitored, request: Request) -> dict[str, Any]:
    return watches_view(_word(server, "wchs"), _word(server, "wchp"))


API: dict[str, Callable[[Monitored, Request], Awaitable[dict[str, Any]]]] = {
    "/api/server": _server, "/api/ensemble": _ensemble, "/api/tree": _tree, "/api/sessions": _sessions,
    "/api/watches": _watches,
}  # fmt: skip


@functools.cache
def page() -> tuple[bytes, str]:
    """The console's page, and its Content-Security-Policy (``browsers.page_policy``)."""
    html = importlib.resources.files("zabby.server.adminport").joinpath("console.html").read_bytes()
    return html, page_policy(html)


ADMIN_ROUTES = frozenset({"/api/sessions", "/api/watches"})  # session ids, client addresses, paths


async def respond(server: Monitored, request: Request) -> Response:
    """The answer to a request for ``/console`` or below."""
    route = request.path[len(PREFIX) :]
    denied = refusal(server.config, request, admin=route in ADMIN_ROUTES)
    if denied is not None:
        return denied
    if route in ("", "/"):
        html, policy = page()
        return Response("200 OK", "text/html; charset=utf-8", html, (*_NO_STORE, (CSP_HEADER, policy)))
    handler = API.get(route)
    if handler is None:
        return _json("404 Not Found", {"error": f"no such console page: {request.path}"})
    try:
        return _json("200 OK", await handler(server, request))
    except BadRequest as exc:
        return _json("400 Bad Request", {"error": str(exc)})
