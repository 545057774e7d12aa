"""The errors of the operator tools, each with the exit code ``zabby-admin`` returns for it.

    0  success
    1  the data is bad: a corrupt or mismatching file, a log that fails verification,
       snapshots that differ
    2  bad input: bad arguments, a missing file or folder, a folder that is not what the
       command needs (e.g. a data dir that is not empty)
    3  the server: unreachable, not a zabby admin endpoint, or an error answer
"""

from __future__ import annotations


class AdminError(Exception):
    """A tool could not do what it was asked; the message says why, for an operator."""

    exit_code = 1


class DataError(AdminError):
    """A file is damaged or does not match what it claims (its CRC, digest or zxid)."""

    exit_code = 1


class UsageError(AdminError):
    """A missing file or folder, or one that is not what the command expects."""

    exit_code = 2


class ServerError(AdminError):
    """The server could not be reached or did not answer as a zabby admin endpoint does."""

    exit_code = 3


def parse_zxid(text: str) -> int:
    """A zxid as operators write it: ``0x100000005`` (hex, as the logs print it) or decimal.

    Raises:
        UsageError: not a non-negative 64-bit number.
    """
    try:
        value = int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        raise UsageError(f"{text!r} is not a zxid (write it as 0x<hex> or a decimal number)") from None
    if not 0 <= value < 2**64:
        raise UsageError(f"zxid {text} is out of range (0 .. 2^64-1)")
    return value
