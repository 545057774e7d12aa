"""A ZooKeeper 3.8 deployment moved onto zabby and back, seed by seed
(``harness.differential.migration``): a seeded workload on Debian's ZooKeeper, its data dir
imported, a zabby server answering every read as ZooKeeper did, exported, ZooKeeper answering
the same again, every session re-attached to each; prints one line per seed and a summary.

    python scripts/zookeeper_migration.py --seeds 0..19 --ops 5000

Exit status 0 when every seed passed, 1 otherwise, 2 when ZooKeeper cannot run here.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: its harness/ is not installed

from harness.differential.migration import SeedRun, run_seed
from harness.differential.runner import seed_range
from harness.local.zookeeper import zookeeper_unavailable


def line(run: SeedRun) -> str:
    imported = run.imported
    replay = "" if imported is None else (f", snapshot 0x{imported.snapshot_zxid:x} + {imported.txns} txns replayed, "
                                          f"last zxid 0x{imported.last_zxid:x}, digest matched {imported.digests_matched}x")  # fmt: skip
    verdict = "identical on all three" if run.passed else "FAILED: " + "; ".join(run.problems)
    return f"seed {run.seed}: {run.ops} ops, {run.znodes} znodes, {run.sessions} sessions{replay}: {verdict} ({run.seconds:.0f} s)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=seed_range, default=seed_range("0..1"), help="A..B, both included (default 0..1)")
    parser.add_argument("--ops", type=int, default=500, help="operations per seed (default 500)")
    args = parser.parse_args()
    why = zookeeper_unavailable()
    if why is not None:
        print(f"ZooKeeper 3.8 cannot run here: {why}", file=sys.stderr)
        return 2
    runs: list[SeedRun] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="zookeeper-migration-") as workdir:
        for seed in args.seeds:
            runs.append(run_seed(Path(workdir) / f"seed-{seed}", seed, args.ops))
            print(line(runs[-1]), flush=True)
    passed = sum(run.passed for run in runs)
    print(f"{passed} of {len(runs)} seeds identical on ZooKeeper, zabby and ZooKeeper again ({len(runs)} x {args.ops} ops, "
          f"{sum(run.znodes for run in runs)} znodes compared 3 times, {time.monotonic() - started:.0f} s)")  # fmt: skip
    return 0 if passed == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
