"""The admin port against hostile pages in its users' browsers (ZooKeeper's AdminServer
checks neither).

- **DNS rebinding**: a page of the attacker's domain, once that name resolves to this
  server, may send requests to the admin port from the victim's browser, as its own origin.
  Its requests carry the attacker's name in ``Host``: every request whose ``Host`` is not one
  of this server's names is refused (403).  The names: any IP address, ``localhost`` (and
  ``*.localhost``), this machine's host name, the hosts of the ``server.N`` lines and the
  admin and console addresses, and what ``admin.allowedHosts`` adds (``*``: any).  A request
  without ``Host`` (no browser sends one) passes.
- **Cross-site requests**: a page elsewhere may make the browser POST a form here (the
  counter resets), with the administrator's HTTP Basic credentials that the browser keeps.
  A request that changes state or costs the server (a POST, the snapshot stream) must come
  from this origin: an ``Origin`` other than ``http(s)://<its Host>``, ``Origin: null``, or a
  ``Sec-Fetch-Site`` other than ``same-origin`` or ``none`` is refused (403).  Scripts that
  send neither pass.
- **Framing and sniffing**: every answer says ``X-Frame-Options: DENY``,
  ``X-Content-Type-Options: nosniff`` and a ``Content-Security-Policy`` that allows nothing
  (``zabby.server.adminport.http.SECURITY_HEADERS``), and the console page's allows what it needs:
  its own script and style, by their hashes, and requests to this origin (``page_policy``).
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import re
import socket
from dataclasses import dataclass

from zabby.config import ServerConfig
from zabby.server.adminport.http import Request, Response

ANY_HOST = "*"
SAFE_FETCH_SITES = frozenset({"same-origin", "none"})


def host_name(authority: str) -> str:
    """The host of a ``Host`` header or an origin's authority, without its port, brackets
    or final dot, lower-cased."""
    authority = authority.strip().lower()
    if authority.startswith("["):  # [v6]:port
        return authority[1 : authority.find("]")] if "]" in authority else authority
    if authority.count(":") == 1:
        authority = authority.split(":", 1)[0]
    return authority.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class HostNames:
    """The names a request may give this server by (see the module's docstring)."""

    names: frozenset[str]
    any_name: bool = False

    @classmethod
    def of(cls, config: ServerConfig) -> HostNames:
        extra = {host_name(name) for name in config.admin_allowed_hosts}
        configured = {peer.host for peer in config.peers} | {config.admin_address, config.console_address, config.client_port_address}
        names = {"localhost", host_name(socket.gethostname())} | {host_name(name) for name in configured if name} | extra
        return cls(frozenset(names - {ANY_HOST}), ANY_HOST in extra)

    def allows(self, host: str) -> bool:
        name = host_name(host)
        return self.any_name or _is_ip(name) or name in self.names or name.endswith(".localhost")


def refusal(request: Request, hosts: HostNames, *, changes_state: bool) -> Response | None:
    """Why a request may not be answered, if it may not (403, with the reason)."""
    host = request.headers.get("host")
    if host is not None and not hosts.allows(host):
        return _forbidden(f"Host {host_name(host)!r} is not a name of this server: add it to admin.allowedHosts if it is one")
    if changes_state and not _same_origin(request):
        return _forbidden("this request changes state or costs the server, and came from another site")
    return None


def _same_origin(request: Request) -> bool:
    site = request.headers.get("sec-fetch-site")
    if site is not None and site.lower() not in SAFE_FETCH_SITES:
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    scheme, _, authority = origin.strip().lower().partition("://")
    host = request.headers.get("host")
    return scheme in ("http", "https") and host is not None and authority.rstrip("/") == host.strip().lower()


def _forbidden(reason: str) -> Response:
    return Response("403 Forbidden", "application/json", json.dumps({"error": reason}).encode())


_INLINE = re.compile(rb"<(script|style)>(.*?)</\1>", re.DOTALL)


def page_policy(page: bytes) -> str:
    """The Content-Security-Policy of an HTML page whose script and style are inline: those,
    by their hashes, and requests to this origin; nothing else."""
    hashes: dict[bytes, list[str]] = {b"script": [], b"style": []}
    for kind, body in _INLINE.findall(page):
        hashes[kind].append(f"'sha256-{base64.b64encode(hashlib.sha256(body).digest()).decode()}'")
    return (f"default-src 'none'; script-src {' '.join(hashes[b'script'])}; style-src {' '.join(hashes[b'style'])}; "
            f"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")  # fmt: skip
