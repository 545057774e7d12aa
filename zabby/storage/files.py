"""Small durable-file helpers shared by the storage modules.

A file is durable once its bytes are fsynced *and* the directory entry that names it is
fsynced; ``write_atomically`` does both, through a ``.tmp`` sibling and ``os.replace``, so a
reader sees either the old content or the new one, never a mix.
"""

from __future__ import annotations

import os
from pathlib import Path

TMP_SUFFIX = ".tmp"


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries (created, renamed, removed files) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """``os.write`` until every byte is written (a regular file may take a short write)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: write ``path.tmp``, fsync, rename, fsync the directory."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def dir_bytes(directory: Path) -> int:
    """Total size of the regular files directly inside ``directory`` (0 if it is missing)."""
    if not directory.is_dir():
        return 0
    return sum(entry.stat().st_size for entry in os.scandir(directory) if entry.is_file())
