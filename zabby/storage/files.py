"""Small durable-file helpers shared by the storage modules, and the disk's failure policy.

A file is durable once its bytes are fsynced *and* the directory entry that names it is
fsynced; ``write_atomically`` does both, through a ``.tmp`` sibling and ``os.replace``, so a
reader sees either the old content or the new one, never a mix.

Failure policy (what the server does with these errors is in ``zabby.server``):

- ``DiskFailure``: an fsync failed (whatever its errno: after a failed fsync the kernel may
  have dropped the dirty pages, so retrying it proves nothing, as PostgreSQL learned), or a
  write failed for any reason but a full disk.  The server stops (fail-stop).
- ``DiskFull``: a write or a file creation found no space (ENOSPC, EDQUOT).  Nothing was
  written; the server refuses writes until space is freed and goes on.
- ``OutOfDescriptors`` (a ``DiskFull``): a file creation found no descriptor free (EMFILE,
  ENFILE).  The disk is sound: it is handled as a full disk, never as a failed one, and the
  txn log puts a roll off rather than fail (``zabby.storage.txnlog``).  The server keeps
  descriptors for its files (``zabby.server.process.descriptors``), so this is the last line.

Every write and fsync passes ``faults.inject`` first, so tests can make them fail or slow.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

from zabby.storage.faults import inject
from zabby.storage.fs import CREATE_OR_TRUNCATE, OS_FS, FileSystem

TMP_SUFFIX = ".tmp"
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
NO_DESCRIPTOR_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})


class DiskFailure(Exception):
    """The disk failed (an fsync, or a write for another reason than space): fail-stop."""


class DiskFull(Exception):
    """No space for a write; nothing was written."""


class OutOfDescriptors(DiskFull):
    """No descriptor was free to create a file; nothing was written, and the disk is sound."""


def disk_error(exc: OSError, what: str) -> DiskFull | DiskFailure:
    """The policy's name for an ``OSError`` from a write or a file creation."""
    if exc.errno in NO_SPACE_ERRNOS:
        return DiskFull(f"{what}: {exc}")
    if exc.errno in NO_DESCRIPTOR_ERRNOS:
        return OutOfDescriptors(f"{what}: {exc}")
    return DiskFailure(f"{what}: {exc}")


def fsync(fd: int, what: str, *, data_only: bool = False, fs: FileSystem = OS_FS) -> None:
    """fsync (or fdatasync) ``fd``; any failure is a ``DiskFailure``."""
    try:
        inject("fsync")
        (fs.fdatasync if data_only else fs.fsync)(fd)
    except OSError as exc:
        raise DiskFailure(f"fsync of {what} failed: {exc}") from exc


def fsync_dir(directory: Path, *, fs: FileSystem = OS_FS) -> None:
    """Make the directory's entries (created, renamed, removed files) durable."""
    try:
        inject("fsync")
        fs.fsync_dir(directory)
    except OSError as exc:
        raise DiskFailure(f"fsync of directory {directory} failed: {exc}") from exc


def write_all(fd: int, data: bytes | bytearray | memoryview, what: str = "a file", *, offset: int | None = None,
              fs: FileSystem = OS_FS) -> None:  # fmt: skip
    """Write every byte (a regular file may take a short write): at the file's position, or
    from ``offset`` on (``os.pwrite``; the position does not move).

    Raises:
        DiskFull, DiskFailure: see the module's policy; some bytes may have been written.
    """
    view = memoryview(data)
    try:
        inject("write")
        while view:
            if offset is None:
                written = fs.write(fd, view)
            else:
                written = fs.pwrite(fd, view, offset)
                offset += written
            view = view[written:]
    except OSError as exc:
        raise disk_error(exc, f"write to {what}") from exc


def write_atomically(path: Path, data: bytes, *, fs: FileSystem = OS_FS) -> None:
    """Replace ``path`` with ``data``: write ``path.tmp``, fsync, rename, fsync the directory."""
    write_chunks_atomically(path, [data], fs=fs)


def write_chunks_atomically(path: Path, chunks: Iterable[bytes], *, fs: FileSystem = OS_FS) -> None:
    """``write_atomically`` for data that arrives in pieces (a copy, a download): nothing
    has the final name until every chunk is written and fsynced.  If ``chunks`` raises, the
    ``.tmp`` file is removed and the error propagates."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        fd = fs.open(tmp, CREATE_OR_TRUNCATE)
    except OSError as exc:
        raise disk_error(exc, f"create {tmp}") from exc
    try:
        for chunk in chunks:
            write_all(fd, chunk, str(tmp), fs=fs)
        fsync(fd, str(tmp), fs=fs)
    except BaseException:
        fs.close(fd)
        fs.unlink(tmp, missing_ok=True)
        raise
    fs.close(fd)
    fs.replace(tmp, path)
    fsync_dir(path.parent, fs=fs)


def dir_bytes(directory: Path) -> int:
    """Total size of the regular files directly inside ``directory`` (0 if it is missing)."""
    if not directory.is_dir():
        return 0
    return sum(entry.stat().st_size for entry in os.scandir(directory) if entry.is_file())
