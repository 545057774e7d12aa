"""Four-letter words asked of a server: one fresh connection per word, blocking, bounded by a
timeout (kazoo's ``KazooClient.command`` without a session).  The answers are parsed by
``zabby.wire.fourletter``.
"""

from __future__ import annotations

import socket

from zabby.wire.fourletter import parse_mntr, parse_srvr

REPLY_BYTES_MAX = 4 * 1024 * 1024


def four_letter(port: int, word: str, timeout_s: float = 5.0, host: str = "127.0.0.1") -> str:
    """Send ``word`` on a fresh connection and read the reply until the server closes it.

    Raises:
        OSError: the server is not there, or did not answer within ``timeout_s``.
    """
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.settimeout(timeout_s)
        sock.sendall(word.encode("ascii"))
        chunks: list[bytes] = []
        size = 0
        while size < REPLY_BYTES_MAX:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def srvr(port: int, timeout_s: float = 5.0, host: str = "127.0.0.1") -> dict[str, str]:
    """The server's ``srvr`` fields (``parse_srvr``).

    Raises:
        OSError: the server is not there, or did not answer within ``timeout_s``.
    """
    return parse_srvr(four_letter(port, "srvr", timeout_s, host))


def mntr(port: int, timeout_s: float = 5.0, host: str = "127.0.0.1") -> dict[str, str]:
    """The server's ``mntr`` figures (``parse_mntr``: ``zk_server_state``, ``zk_znode_count``...).

    Raises:
        OSError: the server is not there, or did not answer within ``timeout_s``.
    """
    return parse_mntr(four_letter(port, "mntr", timeout_s, host))


def srvr_zxid(port: int, timeout_s: float = 5.0, host: str = "127.0.0.1") -> int | None:
    """srvr's Zxid, None while the server does not serve or does not answer."""
    try:
        text = srvr(port, timeout_s, host).get("Zxid", "")
    except OSError:
        return None
    return int(text, 16) if text else None


def server_mode(port: int, timeout_s: float = 5.0, host: str = "127.0.0.1") -> str:
    """srvr's Mode (leader, follower, observer, standalone, read-only), "not serving" while it
    answers without one, or "down" while it does not answer."""
    try:
        return srvr(port, timeout_s, host).get("Mode", "not serving")
    except OSError:
        return "down"
