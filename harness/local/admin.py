"""The administrator of the servers the tests and harnesses start on this host: its zoo.cfg
setting (``admin_settings``) and its calls to a server's admin port (``admin_json``,
``digest_at``)."""

from __future__ import annotations

import base64
import json
import urllib.request
from typing import Any

from zabby.tree.acl import digest

LOCAL_ADMIN = ("admin", "zabby-local")  # the administrator of the servers these tools start on this host


def admin_settings() -> dict[str, Any]:
    """zoo.cfg settings that make ``LOCAL_ADMIN`` the administrator (admin.console.auth): the
    admin words, the snapshot stream and the console's session pages ask for it."""
    return {"admin.console.auth": digest(*LOCAL_ADMIN)}


def admin_json(admin_port: int, command: str, credentials: tuple[str, str] = LOCAL_ADMIN, method: str = "GET") -> Any:
    """``/commands/<command>`` of a server on this host, as the administrator."""
    token = base64.b64encode(":".join(credentials).encode()).decode("ascii")
    request = urllib.request.Request(f"http://127.0.0.1:{admin_port}/commands/{command}", method=method,
                                     headers={"Authorization": f"Basic {token}"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


def digest_at(admin_port: int, zxid: int) -> int | None:
    """The server's tree digest right after ``zxid`` (``/commands/hash``), if still listed."""
    digests = admin_json(admin_port, "hash")["digests"]
    return next((entry["digest"] for entry in digests if entry["zxid"] == zxid), None)
