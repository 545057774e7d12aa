"""A 3-server ZooKeeper 3.8 ensemble replaced by zabby one server at a time, switched to zabby's
own peer protocol, and back, under load (``harness.differential.rolling``; docs/operations.md,
"Replacing ZooKeeper one server at a time"): kazoo and ZooKeeper's Java client writing, a
recursive watcher and two Curator LeaderLatches connected throughout.  Prints a line per step
(its write outage) and per round (its checks), then the outages per phase and role.

    python scripts/zookeeper_rolling.py --rounds 5
    python scripts/zookeeper_rolling.py --rounds 1 --data sync --keep /tmp/rolling

Exit status 0 when every check passed, 1 otherwise, 2 when ZooKeeper or Curator cannot run here.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: its harness/ is not installed

from harness.differential.curator import CuratorUnavailable, build, ensure_curator
from harness.differential.rolling import DATA_MODES, Rolling, summary
from harness.local.zookeeper import ZooKeeperUnavailable


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1, help="rounds there and back, on one ensemble with the same clients (default 1)")
    parser.add_argument("--data", choices=DATA_MODES, default="import",
                        help="how a replacement gets its data: import/export the old server's data dir (default), or sync from the leader")  # fmt: skip
    parser.add_argument("--keep", type=Path, help="run in this folder and keep it (default: a temporary one, removed)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    try:
        ensure_curator()
    except (CuratorUnavailable, ZooKeeperUnavailable) as exc:
        print(f"ZooKeeper 3.8 or Curator cannot run here: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the servers and clients are stopped
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="zookeeper-rolling-") as temporary:
        workdir = args.keep or Path(temporary)
        workdir.mkdir(parents=True, exist_ok=True)
        rolling = Rolling(workdir, build(), rounds=args.rounds, data=args.data, say=lambda line: print(line, flush=True))
        try:
            verdict = rolling.run()
        except Exception as exc:  # noqa: BLE001 -- a step that did not come right: said, with what came before
            print(f"FAILED at step {len(rolling.steps) + 1}: {type(exc).__name__}: {exc}", flush=True)
            return 1
    print("\n".join(summary(rolling.steps)))
    outcome = "passed" if not verdict.problems else "FAILED: " + "; ".join(verdict.problems)
    print(f"{args.rounds} rounds, {len(rolling.steps)} steps, {time.monotonic() - started:.0f} s: {outcome} {verdict.figures}")
    return 0 if not verdict.problems else 1


if __name__ == "__main__":
    sys.exit(main())
