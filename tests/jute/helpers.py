"""Helpers for the jute tests: a raw blocking jute session (``harness.local.jute_session``, for
byte-level checks and the ops kazoo has no method for) and bounded waiting.  The adapter that
lets kazoo's own connection carry any jute op is ``harness.differential.kazoo_ops``."""

from __future__ import annotations

from harness.local.jute_session import OPEN_ACL, JuteSession, jute_session, read_all  # noqa: F401  (this folder's tests use them)
from zabby.testing import wait_until  # noqa: F401  (re-exported for this folder's tests)
