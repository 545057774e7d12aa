"""``python -m zabby.sim --seed N [-v]`` or ``--seeds A..B``: run simulator seeds.

A failing seed prints its error and ``reproduce: python -m zabby.sim --seed N``; ``-v``
prints the trace of one seed (every role change, crash, partition, truncation, snapshot).
"""

from __future__ import annotations

import argparse
import sys
import time

from zabby.sim.runner import run


def _seed_range(text: str) -> range:
    first, _, last = text.partition("..")
    return range(int(first), int(last or first) + 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zabby.sim", description=__doc__)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--seed", type=int, help="run one seed")
    group.add_argument("--seeds", type=_seed_range, help="run seeds A..B (inclusive)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the trace")
    parser.add_argument("--stats", action="store_true", help="print each seed's options and counters")
    parser.add_argument("--reconfig", type=float, default=0.0, metavar="SHARE",
                        help="the share of seeds whose clients reconfigure (default 0: see docs/reliability.md)")
    parser.add_argument("--forge", type=float, default=0.0, metavar="SHARE",
                        help="the share of seeds with the forging nemesis (forged votes, memberships and packets)")
    args = parser.parse_args(argv)
    seeds = range(args.seed, args.seed + 1) if args.seed is not None else args.seeds
    trace = print if args.verbose else None
    failed = []
    totals: dict[str, int] = {}
    started = time.perf_counter()
    for seed in seeds:
        result = run(seed, trace=trace, reconfig_share=args.reconfig, forge_share=args.forge)
        for key, value in result.stats.items():
            totals[key] = totals.get(key, 0) + value
        if args.stats or args.seed is not None:
            print(f"seed {seed}: {'ok' if result.ok else 'FAILED'} after {result.ticks} ticks; {result.options}")
            print(f"  {result.stats}")
        if not result.ok:
            failed.append(seed)
            print(f"seed {seed} FAILED at tick {result.ticks}: {result.error}")
            print(result.reproduce())
    elapsed = time.perf_counter() - started
    print(f"{len(seeds)} seeds, {len(failed)} failed, {elapsed:.1f} s ({len(seeds) / elapsed:.1f} seeds/s)")
    if len(seeds) > 1:
        print("totals:", ", ".join(f"{k}={v}" for k, v in totals.items()))
    if failed:
        print("failed seeds:", " ".join(map(str, failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
