"""Client-only exceptions that are not server error codes.

``KazooTimeoutError`` is what a blocking call raises when its timeout expires (kazoo's
threading handler has a class of that name).  It is both an ``OperationTimeoutError`` (so
``KazooRetry`` retries it and ``except KazooException`` catches it) and a builtin
``TimeoutError``.
"""

from __future__ import annotations

from zabby.errors import OperationTimeoutError


class KazooTimeoutError(OperationTimeoutError, TimeoutError):
    """A client call or ``start()`` did not complete within its timeout."""
