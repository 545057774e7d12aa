#!/usr/bin/env python3
"""The generative adversary's long run (issue 56; zabby.jepsen.adversary): hypothesis draws
attacks of every kind the harness knows, their sizes up to the findings' own, and each is run
against real servers restarted after it, with a well-behaved client beside them.

    python scripts/adversary.py --attacks 200                 # 200 attacks on a standalone server
    python scripts/adversary.py --attacks 50 --servers 3      # on a 3-server ensemble (a follower attacked)
    python scripts/adversary.py --attacks 50 --servers 3 --at-leader
    python scripts/adversary.py --kinds auth-expansion,acl-bytes --attacks 20 --scale 1.0
    python scripts/adversary.py --attacks 200 --seed 7        # replays that run's draws

Each attack is one line: what was sent, how long it took, the servers' peak memory growth,
the bystander's slowest read, the restart's time, and any broken promise (PROBLEMS).  The run
ends with the count of attacks by kind and of those with problems; it exits 1 if any had one.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from hypothesis import Phase, given, seed, settings

from zabby.jepsen.adversary import SIZES, Arena, Attack, Verdict, attacks


def run(count: int, servers: int, kinds: list[str] | None, scale: float, random_seed: int, at_leader: bool = False) -> list[Verdict]:
    verdicts: list[Verdict] = []
    with tempfile.TemporaryDirectory(prefix="zabby-adversary-") as folder:
        arena = Arena(Path(folder), servers, at_leader=at_leader)
        arena.start()
        try:

            @seed(random_seed)
            @settings(max_examples=count, deadline=None, database=None, phases=[Phase.generate])
            @given(attack=attacks(kinds, scale))
            def one(attack: Attack) -> None:
                verdict = arena.attack(attack)
                verdicts.append(verdict)
                print(f"{len(verdicts):5d} {verdict.line()}", flush=True)

            one()
        finally:
            arena.stop()
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attacks", type=int, default=100, help="how many attacks (default 100)")
    parser.add_argument("--servers", type=int, choices=[1, 3], default=1)
    parser.add_argument("--kinds", help=f"a comma-separated list of: {', '.join(sorted(SIZES))} (default: all)")
    parser.add_argument("--scale", type=float, default=1.0, help="the largest sizes drawn, as a fraction of the findings' (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--at-leader", action="store_true", help="on 3 servers, attack the leader (default: a follower)")
    args = parser.parse_args(argv)
    kinds = args.kinds.split(",") if args.kinds else None
    unknown = sorted(set(kinds or ()) - set(SIZES))
    if unknown:
        parser.error(f"unknown attack kinds: {', '.join(unknown)}")
    if args.attacks < 1 or not 0 < args.scale <= 1:
        parser.error("--attacks must be at least 1 and --scale in (0, 1]")
    started = time.monotonic()
    verdicts = run(args.attacks, args.servers, kinds, args.scale, args.seed, args.at_leader)
    broken = [verdict for verdict in verdicts if verdict.problems]
    print(f"\n{len(verdicts)} attacks in {time.monotonic() - started:.0f} s on {args.servers} server(s), seed {args.seed}: "
          f"{dict(sorted(Counter(v.attack.kind for v in verdicts).items()))}")  # fmt: skip
    print(f"{len(broken)} with problems; largest memory growth {max((v.rss_growth_mb for v in verdicts), default=0):.0f} MB, "
          f"slowest bystander read {max((v.bystander.max_ms for v in verdicts), default=0):.0f} ms")  # fmt: skip
    for verdict in broken:
        print(f"  {verdict.line()}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
