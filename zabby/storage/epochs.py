"""The persisted Zab epochs: ``acceptedEpoch`` and ``currentEpoch`` (ZooKeeper's file names).

On-disk format::

    epoch_file := decimal_digits "\\n"?          e.g. "3\\n"

Each write goes through ``path.tmp``, fsync, rename and a directory fsync, so after a crash the
file holds either the old value or the new one.  The epochs only grow; that rule belongs to the
core, which decides what to write.
"""

from __future__ import annotations

from pathlib import Path

from zabby.storage.files import write_atomically
from zabby.storage.fs import OS_FS, FileSystem

ACCEPTED_EPOCH = "acceptedEpoch"
CURRENT_EPOCH = "currentEpoch"


class CorruptEpochError(ValueError):
    """An epoch file exists but does not hold a non-negative decimal integer."""


def read_epoch(path: Path, default: int = 0, *, fs: FileSystem = OS_FS) -> int:
    """The epoch stored in ``path``, or ``default`` if the file does not exist.

    Raises:
        CorruptEpochError: the file's content is not a non-negative decimal integer.
    """
    try:
        text = fs.read_bytes(Path(path)).decode("ascii").strip()
    except FileNotFoundError:
        return default
    except UnicodeDecodeError:
        raise CorruptEpochError(f"epoch file {path}: not ASCII text") from None
    if not text.isdigit():
        raise CorruptEpochError(f"epoch file {path}: expected a decimal number, found {text[:40]!r}")
    return int(text)


def write_epoch(path: Path, value: int, *, fs: FileSystem = OS_FS) -> None:
    """Store ``value`` in ``path`` durably and atomically."""
    if value < 0:
        raise ValueError(f"epoch must be >= 0, got {value}")
    write_atomically(Path(path), f"{value}\n".encode("ascii"), fs=fs)
