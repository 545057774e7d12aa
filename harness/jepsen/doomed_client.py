"""A client that dies without closing its session: ``python -m harness.jepsen.doomed_client
KIND HOSTS PATH SESSION_TIMEOUT_S LIFETIME_S``.

It connects, creates the ephemeral ``PATH``, prints ``created <session id>`` and waits to be
SIGKILLed (the session churner does that); it exits by itself after ``LIFETIME_S`` all the
same, so nothing outlives a harness that crashed.
"""

from __future__ import annotations

import os
import sys
import time

from harness.jepsen import clients


def main(argv: list[str]) -> int:
    kind, hosts, path, session_timeout_s, lifetime_s = argv[0], argv[1], argv[2], float(argv[3]), float(argv[4])
    try:
        client = clients.open_client(kind, hosts, session_timeout_s, 10.0)
        clients.call(client.create_async, path, b"", ephemeral=True, timeout_s=10.0)
    except Exception as exc:  # noqa: BLE001 - the parent records the outcome as unknown
        print(f"failed {type(exc).__name__}", flush=True)
    else:
        print(f"created {clients.session_id(client):#x}", flush=True)
    time.sleep(lifetime_s)
    os._exit(0)  # never a clean close of the session


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
