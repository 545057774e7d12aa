"""The file-system calls the storage makes, behind one narrow interface.

``zabby.storage`` reaches files only through a ``FileSystem``: ``OS_FS`` is the real one
(``os`` calls, nothing added), and the simulator passes its own (``zabby.sim.fs.SimFS``),
which keeps every write in memory and decides at a crash which unsynced writes survive.  So
the log, the snapshots, the epochs and recovery that run in the simulator are the code that
ships, not a model of it.

The calls are POSIX's, with their meaning: a write is durable once its file is fsynced, a
created, renamed or removed name once its directory is.  Errors are ``OSError`` with an
errno, as ``os`` raises them.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import BinaryIO, Protocol

READ_ONLY = os.O_RDONLY | os.O_CLOEXEC
WRITE_ONLY = os.O_WRONLY | os.O_CLOEXEC
CREATE_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
CREATE_OR_TRUNCATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC


class FileSystem(Protocol):
    """What the storage needs of a file system; ``flags`` are ``os.O_*`` (the four above)."""

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int: ...

    def close(self, fd: int) -> None: ...

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int: ...

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> int: ...

    def fsync(self, fd: int) -> None: ...

    def fdatasync(self, fd: int) -> None: ...

    def ftruncate(self, fd: int, size: int) -> None: ...

    def fallocate(self, fd: int, offset: int, length: int) -> None: ...

    def fsize(self, fd: int) -> int: ...

    def fsync_dir(self, directory: Path) -> None: ...

    def truncate(self, path: Path, size: int) -> None: ...

    def size(self, path: Path) -> int: ...

    def reader(self, path: Path) -> BinaryIO: ...

    def read_bytes(self, path: Path) -> bytes: ...

    def unlink(self, path: Path, *, missing_ok: bool = False) -> None: ...

    def replace(self, source: Path, target: Path) -> None: ...

    def files(self, directory: Path) -> list[str]: ...

    def makedirs(self, directory: Path) -> None: ...


class OsFileSystem:
    """The real file system: each call is the ``os`` call of the same name (the log's hot two
    are those calls themselves: no Python frame per write)."""

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags, mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        return os.write(fd, data)

    pwrite = staticmethod(os.pwrite)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    fdatasync = staticmethod(os.fdatasync)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        """Allocate blocks for ``[offset, offset+length)``, the file's size growing to cover them."""
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.fallocate(fd, 0, ctypes.c_long(offset), ctypes.c_long(length)) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    def fsize(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def fsync_dir(self, directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def truncate(self, path: Path, size: int) -> None:
        os.truncate(path, size)

    def size(self, path: Path) -> int:
        return os.stat(path).st_size

    def reader(self, path: Path) -> BinaryIO:
        return open(path, "rb")  # noqa: SIM115 -- the caller closes it

    def read_bytes(self, path: Path) -> bytes:
        return Path(path).read_bytes()

    def unlink(self, path: Path, *, missing_ok: bool = False) -> None:
        Path(path).unlink(missing_ok=missing_ok)

    def replace(self, source: Path, target: Path) -> None:
        os.replace(source, target)

    def files(self, directory: Path) -> list[str]:
        """The names of the regular files directly in ``directory``."""
        return [entry.name for entry in os.scandir(directory) if entry.is_file()]

    def makedirs(self, directory: Path) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)


OS_FS: FileSystem = OsFileSystem()
