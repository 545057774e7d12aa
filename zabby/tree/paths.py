"""Znode path rules (ZooKeeper's ``PathUtils.validatePath``) and small path helpers."""

from __future__ import annotations

import re

from zabby.errors import Err, ZabbyError


# ZooKeeper's forbidden characters (PathUtils.validatePath); Java sees a character outside the
# BMP as a surrogate pair, which falls in the forbidden \ud800-\uf8ff range.
_FORBIDDEN = re.compile("[\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff\U00010000-\U0010ffff]")


def validate_path(path: str, *, sequential: bool = False) -> None:
    """Raise BADARGUMENTS unless ``path`` is absolute and canonical.

    A sequential create may end in ``/`` (the server appends the counter), as in ZooKeeper.
    """
    if not isinstance(path, str):
        raise ZabbyError(Err.BADARGUMENTS, f"path must be a string, not {type(path).__name__}")
    if not path:
        raise ZabbyError(Err.BADARGUMENTS, "path must not be empty")
    if path[0] != "/":
        raise ZabbyError(Err.BADARGUMENTS, f"path must start with / character: {path!r}")
    if len(path) == 1:
        return
    check = path + "1" if sequential else path
    if check[-1] == "/":
        raise ZabbyError(Err.BADARGUMENTS, f"path must not end with / character: {path!r}")
    if "//" in check:
        raise ZabbyError(Err.BADARGUMENTS, f"empty node name specified in {path!r}")
    if "/." in check:
        for segment in check[1:].split("/"):
            if segment in (".", ".."):
                raise ZabbyError(Err.BADARGUMENTS, f"relative paths not allowed: {path!r}")
    if path.isascii() and path.isprintable():  # nearly every path: no character the pattern could find
        return
    bad = _FORBIDDEN.search(path)
    if bad is not None:
        raise ZabbyError(Err.BADARGUMENTS, f"invalid character \\u{ord(bad.group()):04x} in {path!r}")


def parent_of(path: str) -> str:
    index = path.rfind("/")
    return "/" if index == 0 else path[:index]


def basename(path: str) -> str:
    return path[path.rfind("/") + 1 :]


def join(parent: str, name: str) -> str:
    return parent + name if parent == "/" else f"{parent}/{name}"


def int32(value: int) -> int:
    """``value`` wrapped as Java's int arithmetic wraps it (cversion is a Java int)."""
    return (value + 2**31) % 2**32 - 2**31


def sequential_name(path: str, counter: int) -> str:
    """ZooKeeper's ``%010d`` suffix; the counter is a signed 32-bit value that wraps."""
    return f"{path}{int32(counter):010d}"


def ancestors(path: str) -> list[str]:
    """Every proper ancestor of ``path``, nearest first, ending with ``/``."""
    out = []
    while path != "/":
        path = parent_of(path)
        out.append(path)
    return out
