"""The answers of ``srvr``/``stat`` and ``mntr`` parsed: the one parser of each, for the shell's
``-servers-status``, the web console, ``zabby.testing`` and the harness.

Sans-I/O: text in, fields out (``zabby.client.fourletter`` asks a server over a socket).
"""

from __future__ import annotations


def parse_srvr(text: str) -> dict[str, str]:
    """``Key: value`` lines of ``srvr``/``stat`` (the ``Clients:`` block is skipped): Mode, Zxid,
    Connections, Node count...  A server not serving answers without them."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith((" ", "\t")) and value.strip():
            out.setdefault(key.strip(), value.strip())
    return out


def parse_mntr(text: str) -> dict[str, str]:
    """``mntr``'s ``zk_key<TAB>value`` lines, keyed as the server names them (``zk_server_state``,
    ``zk_znode_count``...); any other line (a refusal, "not currently serving") is left out."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("\t")
        if sep and key.startswith("zk_"):
            out[key] = value.strip()
    return out
