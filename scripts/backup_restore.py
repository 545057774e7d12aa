#!/usr/bin/env python3
"""The disaster drill with its figures: a 3-server ensemble holding N znodes is backed up
under write load (``zabby-admin snapshot save``), every data dir is deleted, and a new
ensemble is restored from the backup (``zabby-admin snapshot restore``) and checked.

    python scripts/backup_restore.py --znodes 100000 [--workdir DIR]

Prints the timings, the snapshot's size and digest, and whether the new ensemble's tree and
digest equal the backup's; exit 1 if they do not.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: its harness/ is not installed

from harness.local.backup_drill import run_drill


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--znodes", type=int, default=100_000)
    parser.add_argument("--workdir", type=Path, help="where the ensembles and the backup go (default: a temp folder)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="zabby-drill-", dir=args.workdir) as folder:
        result = run_drill(Path(folder), args.znodes, say=lambda line: print(f"[{time.monotonic() - started:6.1f}s] {line}", flush=True))
    print("\n".join(result.lines()))
    for line in result.differences[:20]:
        print("  " + line)
    return 0 if result.digests_equal and not result.differences else 1


if __name__ == "__main__":
    sys.exit(main())
