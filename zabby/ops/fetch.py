"""``snapshot save FILE --server HOST:PORT``: a consistent snapshot of a live server, streamed
from its admin endpoint and checked before it gets its name.

The endpoint (``GET <commandURL>/snapshot?streaming=true``, as ZooKeeper 3.9's) answers with
the bytes of a snapshot file written by a forked child of the server (a copy-on-write image
of the tree at one zxid), and two headers fixed at the fork: ``last_zxid`` (ZooKeeper's name)
and ``X-Zabby-Digest``, the tree digest at that zxid.  The download goes to
``FILE.download``; only when its CRC, record count, zxid and recomputed digest all match is
it renamed to ``FILE``.  A stream cut short (the child died, the connection dropped) fails
the CRC check and leaves nothing behind.
"""

from __future__ import annotations

import base64
import dataclasses
import http.client
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from zabby.ops.errors import DataError, ServerError, UsageError, parse_zxid
from zabby.ops.snapfile import SnapshotInfo, load_tree, summarize
from zabby.server.adminport.http import SNAPSHOT_DIGEST_HEADER, SNAPSHOT_ZXID_HEADER
from zabby.storage.files import fsync_dir, write_chunks_atomically
from zabby.storage.snapshot import CHUNK_BYTES

ZXID_HEADER = SNAPSHOT_ZXID_HEADER
DIGEST_HEADER = SNAPSHOT_DIGEST_HEADER
SNAPSHOT_COMMAND = "snapshot"


@dataclass(frozen=True, slots=True)
class SaveResult:
    snapshot: SnapshotInfo
    seconds: float


def parse_server(text: str) -> tuple[str, int]:
    """``HOST:PORT`` of an admin endpoint.

    Raises:
        UsageError: not of that form.
    """
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--server {text!r}: expected HOST:PORT of the server's admin endpoint (admin.serverPort)")
    return host.strip("[]"), int(port)


def basic_auth(credentials: str | None) -> dict[str, str]:
    """The Authorization header for ``user:password`` (HTTP Basic), if any."""
    if credentials is None:
        return {}
    if ":" not in credentials:
        raise UsageError("--auth: expected user:password")
    return {"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode("ascii")}


def _open_stream(server: str, url: str, headers: dict[str, str], timeout_s: float) -> http.client.HTTPResponse:
    host, port = parse_server(server)
    connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        connection.request("GET", url, headers=headers)
        response = connection.getresponse()
    except (OSError, http.client.HTTPException) as exc:
        connection.close()
        raise ServerError(f"cannot reach the admin endpoint at http://{server}{url}: {exc}") from None
    if response.status == 401:
        raise ServerError(f"http://{server}{url} asks for credentials (admin.console.auth): pass --auth user:password")
    if response.status != 200:
        body = response.read(400).decode("utf-8", "replace").strip()
        raise ServerError(f"http://{server}{url} answered {response.status} {response.reason}: {body}")
    return response


def _expected(response: http.client.HTTPResponse, where: str) -> tuple[int, int]:
    zxid_text, digest_text = response.getheader(ZXID_HEADER), response.getheader(DIGEST_HEADER)
    if zxid_text is None or digest_text is None:
        raise ServerError(f"{where} is not a zabby admin endpoint: no {ZXID_HEADER} / {DIGEST_HEADER} headers")
    try:
        return parse_zxid(zxid_text), parse_zxid(digest_text)
    except UsageError as exc:
        raise ServerError(f"{where} sent a bad header: {exc}") from None


def _chunks(response: http.client.HTTPResponse, where: str) -> Iterator[bytes]:
    try:
        while chunk := response.read(CHUNK_BYTES):
            yield chunk
    except (OSError, http.client.HTTPException) as exc:
        raise ServerError(f"the snapshot stream from {where} broke off: {exc}") from None


def _check(download: Path, zxid: int, digest: int, where: str) -> SnapshotInfo:
    tree = load_tree(download)  # DataError: a cut or damaged stream
    if tree.last_zxid != zxid:
        raise DataError(f"the snapshot from {where} is at zxid 0x{tree.last_zxid:x}, the server announced 0x{zxid:x}")
    if tree.compute_digest() != digest:
        raise DataError(f"the snapshot from {where} has digest 0x{tree.compute_digest():016x}, "
                        f"the server's tree had 0x{digest:016x} at 0x{zxid:x}")  # fmt: skip
    return summarize(download, tree)


def save(server: str, target: Path, *, auth: str | None = None, command_url: str = "/commands",
         timeout_s: float = 120.0, force: bool = False) -> SaveResult:  # fmt: skip
    """Stream a fresh snapshot from ``server``'s admin endpoint into ``target``, checked.

    Raises:
        UsageError: ``target`` exists (without ``force``) or its folder does not.
        ServerError: unreachable, refused, or not a zabby admin endpoint.
        DataError: what arrived is not the snapshot the server announced.
    """
    if target.exists() and not force:
        raise UsageError(f"{target} exists (--force overwrites it)")
    if not target.parent.is_dir():
        raise UsageError(f"{target.parent}: no such directory")
    started = time.monotonic()
    url = f"{command_url.rstrip('/')}/{SNAPSHOT_COMMAND}?streaming=true"
    response = _open_stream(server, url, basic_auth(auth), timeout_s)
    where = f"http://{server}"
    zxid, digest = _expected(response, where)
    download = target.with_name(target.name + ".download")
    try:
        write_chunks_atomically(download, _chunks(response, where))
        info = _check(download, zxid, digest, where)
    except BaseException:
        download.unlink(missing_ok=True)
        raise
    finally:
        response.close()
    os.replace(download, target)
    fsync_dir(target.parent)
    return SaveResult(dataclasses.replace(info, path=target), time.monotonic() - started)
