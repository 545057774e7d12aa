#!/usr/bin/env python3
"""The reconnect soak of the watch feed (``harness.jepsen.reconnects``): a 3-server zabby
ensemble, a steady write load, and one watching client whose connection is reset N times
(each reconnect to the next server); its events are then checked against the servers' txn
logs.  Prints the figures as one JSON object; exit code 1 if anything was missed, duplicated,
reordered or mismatched.

    python scripts/watch_reconnects.py --reconnects 10000
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: its harness/ is not installed

from harness.jepsen.reconnects import SoakSpec, soak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reconnects", type=int, default=10_000)
    parser.add_argument("--servers", type=int, choices=[3, 5], default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gap-ms", type=float, default=20.0, help="the longest wait between a reconnect and the next cut")
    parser.add_argument("--workdir", type=Path, help="where the servers run (default: a temporary folder, removed after)")
    args = parser.parse_args(argv)
    if args.reconnects < 1:
        parser.error("--reconnects must be 1 or more")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the servers are stopped
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="zabby-watch-soak-") as scratch:
        workdir = args.workdir or Path(scratch)
        result = soak(SoakSpec(reconnects=args.reconnects, workdir=workdir, seed=args.seed, servers=args.servers, gap_ms=args.gap_ms))
    print(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
