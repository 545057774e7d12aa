"""A simulated file system for one server: the storage's own code runs on it, and a crash
decides which of its unsynced writes survive.

Theory of operation: every file is an inode with the bytes reads see (the page cache), the
bytes a crash is sure to keep (``durable``: as of its last fsync), and the writes and size
changes made since, in order.  Names work the same way: creations, renames and removals
are pending until their directory is fsynced.  At ``crash``:

- the directory keeps its durable names plus a prefix of its pending changes (a journal
  commits metadata in order: a rename is whole or absent);
- each file keeps its durable bytes plus a prefix of its pending writes, the next one maybe
  torn at any byte (``torn``), and maybe one later write that overtook those before it
  (``reorder``: the disk wrote its blocks out of order).

What was fsynced is never lost; what was not may be, whole or in part.  The server must
only acknowledge what it synced, and recover from whatever else it finds.

Faults at chosen calls: ``fail_next(operation, errno)`` makes the next ``write``/``pwrite``
(``"write"``), ``fsync``/``fdatasync``/``fsync_dir`` (``"fsync"``) or ``fallocate``
(``"allocate"``) raise that ``OSError``; ``full`` makes every call that needs new blocks fail
with ENOSPC (writes into blocks already allocated still succeed, as on a real disk).
``flip_bit`` damages a durable byte of a chosen file (a disk's silent corruption).
"""

from __future__ import annotations

import errno
import io
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

_WRITE_ACCESS = os.O_WRONLY | os.O_RDWR


@dataclass(slots=True)
class _Inode:
    data: bytearray = field(default_factory=bytearray)  # what reads see
    durable: bytes = b""  # what a crash keeps
    pending: list[tuple[int, bytes | None]] = field(default_factory=list)  # (offset, bytes) or (new size, None)


@dataclass(slots=True)
class _Open:
    inode: _Inode
    position: int = 0


def _write_into(content: bytearray, offset: int, data: bytes) -> None:
    if len(content) < offset:
        content.extend(bytes(offset - len(content)))
    content[offset:offset + len(data)] = data


def _resize(content: bytearray, size: int) -> None:
    if size < len(content):
        del content[size:]
    else:
        content.extend(bytes(size - len(content)))


def _apply(content: bytearray, change: tuple[int, bytes | None]) -> None:
    where, data = change
    if data is None:
        _resize(content, where)
    else:
        _write_into(content, where, data)


class SimFS:
    """One server's disk (``zabby.storage.fs.FileSystem``)."""

    def __init__(self) -> None:
        self._names: dict[Path, _Inode] = {}
        self._durable_names: dict[Path, _Inode] = {}
        self._name_changes: list[tuple[Path, Path | None, _Inode | None]] = []  # (path, renamed to, linked inode)
        self._dirs: set[Path] = set()
        self._fds: dict[int, _Open] = {}
        self._next_fd = 3
        self._fail: dict[str, int] = {}
        self.full = False

    # ----------------------------------------------------------------- faults
    def fail_next(self, operation: str, code: int) -> None:
        self._fail[operation] = code

    def _maybe_fail(self, operation: str) -> None:
        code = self._fail.pop(operation, None)
        if code is not None:
            raise OSError(code, f"{os.strerror(code)} (simulated)")

    def _no_space(self) -> OSError:
        return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (simulated)")

    def crash(self, rng: random.Random, *, torn: bool, reorder: bool) -> int:
        """The machine stops: returns how many pending writes were lost (whole or torn)."""
        names = dict(self._durable_names)
        kept_changes = rng.randint(0, len(self._name_changes))
        for change in self._name_changes[:kept_changes]:
            self._change_name(names, change)
        lost = 0
        for inode in {id(inode): inode for inode in names.values()}.values():
            lost += self._crash_inode(inode, rng, torn=torn, reorder=reorder)
        self._names = names
        self._durable_names = dict(names)
        self._name_changes = []
        self._fds.clear()
        self._fail.clear()
        self.full = False
        return lost

    @staticmethod
    def _crash_inode(inode: _Inode, rng: random.Random, *, torn: bool, reorder: bool) -> int:
        pending = inode.pending
        content = bytearray(inode.durable)
        kept = rng.randint(0, len(pending))
        for change in pending[:kept]:
            _apply(content, change)
        rest = pending[kept:]
        if rest and torn and rng.random() < 0.5:
            where, data = rest[0]
            if data is not None and len(data) > 1:
                _write_into(content, where, data[:rng.randint(1, len(data) - 1)])
        if len(rest) > 1 and reorder and rng.random() < 0.5:
            _apply(content, rest[rng.randint(1, len(rest) - 1)])
        inode.data = content
        inode.durable = bytes(content)
        inode.pending = []
        return len(rest)

    def durable_size(self, path: Path) -> int:
        return len(self._inode(path).durable)

    def durable_byte(self, path: Path, offset: int) -> int:
        return self._inode(path).durable[offset]

    def holds_flip(self, path: Path, offset: int, damaged: int) -> bool:
        """Whether the byte a flip left as ``damaged`` is still on disk as it left it: not cut
        off, written over or deleted since (then a later read may still find it)."""
        inode = self._names.get(path)
        return inode is not None and offset < len(inode.durable) and inode.durable[offset] == damaged

    def flip_bit(self, rng: random.Random, path: Path) -> int:
        """Flip one durable bit of ``path`` (read back as damaged from now on); its offset."""
        inode = self._names[path]
        offset = rng.randrange(len(inode.durable))
        damaged = bytearray(inode.durable)
        damaged[offset] ^= 1 << rng.randrange(8)
        inode.durable = bytes(damaged)
        if offset < len(inode.data):  # a read goes to the disk again (the page cache was dropped)
            inode.data[offset] = damaged[offset]
        return offset

    # ----------------------------------------------------------------- names
    @staticmethod
    def _change_name(names: dict[Path, _Inode], change: tuple[Path, Path | None, _Inode | None]) -> None:
        path, target, inode = change
        if inode is not None:
            names[path] = inode
        elif target is not None:
            moved = names.pop(path, None)
            if moved is not None:
                names[target] = moved
        else:
            names.pop(path, None)

    def _inode(self, path: Path) -> _Inode:
        inode = self._names.get(Path(path))
        if inode is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
        return inode

    def _check_dir(self, directory: Path) -> None:
        if Path(directory) not in self._dirs:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(directory))

    def files(self, directory: Path) -> list[str]:
        directory = Path(directory)
        self._check_dir(directory)
        return sorted(path.name for path in self._names if path.parent == directory)

    def makedirs(self, directory: Path) -> None:
        directory = Path(directory)
        self._dirs.update([directory, *directory.parents])

    def unlink(self, path: Path, *, missing_ok: bool = False) -> None:
        path = Path(path)
        if path not in self._names:
            if missing_ok:
                return
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
        del self._names[path]
        self._name_changes.append((path, None, None))

    def replace(self, source: Path, target: Path) -> None:
        source, target = Path(source), Path(target)
        self._names[target] = self._inode(source)
        del self._names[source]
        self._name_changes.append((source, target, None))

    def fsync_dir(self, directory: Path) -> None:
        directory = Path(directory)
        self._check_dir(directory)
        self._maybe_fail("fsync")
        kept = []
        for change in self._name_changes:
            path, target, _ = change
            if path.parent == directory or (target is not None and target.parent == directory):
                self._change_name(self._durable_names, change)
            else:
                kept.append(change)
        self._name_changes = kept

    # ----------------------------------------------------------------- files
    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        path = Path(path)
        inode = self._names.get(path)
        if inode is None:
            if not flags & os.O_CREAT:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
            self._check_dir(path.parent)
            if self.full:
                raise self._no_space()
            inode = self._names[path] = _Inode()
            self._name_changes.append((path, None, inode))
        elif flags & os.O_CREAT and flags & os.O_EXCL:
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))
        elif flags & os.O_TRUNC and flags & _WRITE_ACCESS:
            self._set_size(inode, 0)
        fd = self._next_fd
        self._next_fd += 1
        self._fds[fd] = _Open(inode)
        return fd

    def _open(self, fd: int) -> _Open:
        found = self._fds.get(fd)
        if found is None:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        return found

    def close(self, fd: int) -> None:
        self._open(fd)
        del self._fds[fd]

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        opened = self._open(fd)
        written = self.pwrite(fd, data, opened.position)
        opened.position += written
        return written

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> int:
        inode = self._open(fd).inode
        self._maybe_fail("write")
        if self.full and offset + len(data) > len(inode.data):
            raise self._no_space()
        change = (offset, bytes(data))
        _apply(inode.data, change)
        inode.pending.append(change)
        return len(data)

    def fsync(self, fd: int) -> None:
        inode = self._open(fd).inode
        self._maybe_fail("fsync")
        inode.durable = bytes(inode.data)
        inode.pending = []

    fdatasync = fsync

    def _set_size(self, inode: _Inode, size: int) -> None:
        change = (size, None)
        _apply(inode.data, change)
        inode.pending.append(change)

    def ftruncate(self, fd: int, size: int) -> None:
        self._set_size(self._open(fd).inode, size)

    def truncate(self, path: Path, size: int) -> None:
        self._set_size(self._inode(path), size)

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        inode = self._open(fd).inode
        self._maybe_fail("allocate")
        if offset + length > len(inode.data):
            if self.full:
                raise self._no_space()
            self._set_size(inode, offset + length)

    def fsize(self, fd: int) -> int:
        return len(self._open(fd).inode.data)

    def size(self, path: Path) -> int:
        return len(self._inode(path).data)

    def reader(self, path: Path) -> BinaryIO:
        return io.BytesIO(bytes(self._inode(path).data))

    def read_bytes(self, path: Path) -> bytes:
        return bytes(self._inode(path).data)

    # ----------------------------------------------------------------- for the checkers and traces
    def paths(self) -> list[Path]:
        return sorted(self._names)
