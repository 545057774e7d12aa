"""The log's fdatasync done by the kernel while the loop runs on: Linux AIO (io_submit of
IOCB_CMD_FDSYNC), its end signalled on an eventfd that trio waits on.

Under pipelined writes the loop hands each batch's fdatasync off and reads the next batch
meanwhile.  Through the disk thread that hand-off costs a queue, a futex and the GIL going
to the thread and back, twice per fsync (~10% of a standalone server's CPU per setData); the
kernel runs this one in a worker of its own, and the loop never lets go of the GIL.

Linux only (x86-64 and arm64 syscall numbers), through ctypes: ``KernelSync.open()`` is None
where it is missing, refused (``fs.aio-max-nr``) or the filesystem has no fsync for AIO, and
the server keeps the disk thread.  One sync at a time: the server awaits each before the next.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import platform
from typing import Any

import trio

from zabby.storage.files import DiskFailure

LOGGER = logging.getLogger("zabby.server")

# io_setup, io_destroy, io_getevents, io_submit (asm-generic/unistd.h; arch/x86/entry/syscalls)
_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2), "arm64": (0, 1, 4, 2)}
IOCB_CMD_FDSYNC = 3
IOCB_FLAG_RESFD = 1  # signal the end on aio_resfd
_EVENTS = 4  # the context's capacity (one sync at a time needs one)


class _Iocb(ctypes.Structure):
    """struct iocb (linux/aio_abi.h), little-endian field order: 64 bytes."""

    _fields_ = [
        ("aio_data", ctypes.c_uint64), ("aio_key", ctypes.c_uint32), ("aio_rw_flags", ctypes.c_int32),
        ("aio_lio_opcode", ctypes.c_uint16), ("aio_reqprio", ctypes.c_int16), ("aio_fildes", ctypes.c_uint32),
        ("aio_buf", ctypes.c_uint64), ("aio_nbytes", ctypes.c_uint64), ("aio_offset", ctypes.c_int64),
        ("aio_reserved2", ctypes.c_uint64), ("aio_flags", ctypes.c_uint32), ("aio_resfd", ctypes.c_uint32),
    ]  # fmt: skip


class _IoEvent(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64), ("res", ctypes.c_int64), ("res2", ctypes.c_int64)]


class SubmitRefused(Exception):
    """The kernel would not take the sync (no AIO fsync on this file, no resources): the
    caller syncs another way.  Nothing was started."""


class KernelSync:
    def __init__(self, syscall: Any, numbers: tuple[int, int, int, int], context: int, eventfd: int) -> None:
        self._syscall = syscall
        self._destroy_nr, self._getevents_nr, self._submit_nr = numbers[1:]
        self._context = ctypes.c_ulong(context)
        self._eventfd = eventfd
        self._iocb = _Iocb(aio_lio_opcode=IOCB_CMD_FDSYNC, aio_flags=IOCB_FLAG_RESFD, aio_resfd=eventfd)
        self._iocbs = (ctypes.POINTER(_Iocb) * 1)(ctypes.pointer(self._iocb))
        self._events = (_IoEvent * _EVENTS)()
        self._busy = False

    @classmethod
    def open(cls) -> KernelSync | None:
        """A context for this process's syncs, or None where Linux AIO cannot be had."""
        numbers = _SYSCALLS.get(platform.machine())
        if numbers is None or not hasattr(os, "eventfd"):
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            syscall = libc.syscall
        except (OSError, AttributeError):
            return None
        syscall.restype = ctypes.c_long
        context = ctypes.c_ulong(0)
        if syscall(numbers[0], ctypes.c_long(_EVENTS), ctypes.byref(context)) != 0:
            LOGGER.info("no kernel AIO context (%s): the log's fsyncs go through the disk thread",
                        os.strerror(ctypes.get_errno()))  # fmt: skip
            return None
        return cls(syscall, numbers, context.value, os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC))

    async def fdatasync(self, fd: int, what: str) -> None:
        """fdatasync ``fd`` in the kernel; return once it is done.

        Raises:
            SubmitRefused: the kernel did not start it (the file's filesystem has no AIO fsync).
            DiskFailure: it failed.
        """
        assert not self._busy, "one sync at a time"
        self._iocb.aio_fildes = fd
        self._submit(what)
        self._busy = True
        try:
            with trio.CancelScope(shield=True):  # the kernel runs it anyway: wait for its end
                await trio.lowlevel.wait_readable(self._eventfd)
            os.eventfd_read(self._eventfd)
            result = self._reap()
        finally:
            self._busy = False
        if result < 0:
            raise DiskFailure(f"fsync of {what} failed: [Errno {-result}] {os.strerror(-result)}")

    def _submit(self, what: str) -> None:
        while True:
            if self._syscall(self._submit_nr, self._context, ctypes.c_long(1), self._iocbs) == 1:
                return
            code = ctypes.get_errno()
            if code == errno.EINTR:
                continue
            if code in (errno.EINVAL, errno.EAGAIN, errno.ENOSYS, errno.EOPNOTSUPP):
                raise SubmitRefused(os.strerror(code))
            raise DiskFailure(f"fsync of {what} failed: io_submit: [Errno {code}] {os.strerror(code)}")

    def _reap(self) -> int:
        """The finished sync's result: 0, or minus its errno."""
        while True:
            got = self._syscall(self._getevents_nr, self._context, ctypes.c_long(1), ctypes.c_long(_EVENTS), self._events, None)
            if got == 1:
                return int(self._events[0].res)
            code = ctypes.get_errno()
            if got < 0 and code == errno.EINTR:
                continue
            raise DiskFailure(f"io_getevents returned {got}: [Errno {code}] {os.strerror(code)}")

    def close(self) -> None:
        """Free the context (the kernel first finishes a sync still running) and the eventfd."""
        if self._eventfd < 0:
            return
        self._syscall(self._destroy_nr, self._context)
        os.close(self._eventfd)
        self._eventfd = -1
