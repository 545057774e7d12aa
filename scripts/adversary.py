#!/usr/bin/env python3
"""The generative adversary's long run (issue 56; harness.jepsen.adversary): hypothesis draws
attacks of every kind the harness knows, their sizes up to the findings' own, and each is run
against real servers restarted after it, with a well-behaved client beside them.

    python scripts/adversary.py --attacks 200                 # 200 attacks on a standalone server
    python scripts/adversary.py --attacks 50 --servers 3      # on a 3-server ensemble (a follower attacked)
    python scripts/adversary.py --attacks 50 --servers 3 --at-leader
    python scripts/adversary.py --kinds auth-expansion,acl-bytes --attacks 20 --scale 1.0
    python scripts/adversary.py --attacks 200 --seed 7        # replays that run's draws
    python scripts/adversary.py --attacks 10000 --minutes 60  # as many as an hour takes, in rounds of 100

Each attack is one line: what was sent, how long it took, the servers' peak memory growth,
the bystander's slowest read, the restart's time, and any broken promise (PROBLEMS).  The run
ends with a table by kind (the largest sizes drawn, the worst memory growth, bystander read and
restart) and the attacks with problems; it exits 1 if any had one.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from hypothesis import Phase, given, seed, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: its harness/ is not installed

from harness.jepsen.adversary import SIZES, Arena, Attack, Verdict, attacks
from zabby.testing import use_fork_server


ROUND = 100  # attacks drawn per seed when a run is bounded in time
RENEW_EVERY = 200  # attacks on the same data dirs: their restarts slow down as the log grows


def run(count: int, servers: int, kinds: list[str] | None, scale: float, random_seed: int, at_leader: bool = False,
        minutes: float | None = None, renew_every: int = RENEW_EVERY) -> list[Verdict]:  # fmt: skip
    """``count`` attacks drawn from ``random_seed``; with ``minutes``, in rounds of ``ROUND``
    (seeds ``random_seed``, +1, ...) until either bound is reached.  The servers start afresh
    every ``renew_every`` attacks (0: never)."""
    verdicts: list[Verdict] = []
    deadline = time.monotonic() + minutes * 60 if minutes is not None else None
    use_fork_server()  # a restart after every attack: forked from an interpreter that imported the server (0.06 s, not 0.5)
    with tempfile.TemporaryDirectory(prefix="zabby-adversary-") as folder:
        arena = Arena(Path(folder), servers, at_leader=at_leader)
        arena.start()
        try:
            round_seed = random_seed
            while len(verdicts) < count and (deadline is None or time.monotonic() < deadline):
                examples = count - len(verdicts) if deadline is None else min(ROUND, count - len(verdicts))

                @seed(round_seed)
                @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate])
                @given(attack=attacks(kinds, scale))
                def one(attack: Attack) -> None:
                    if deadline is not None and time.monotonic() >= deadline:
                        return  # the rest of the round is drawn and passed over
                    if renew_every and verdicts and len(verdicts) % renew_every == 0:
                        arena.renew()
                    verdict = arena.attack(attack)
                    verdicts.append(verdict)
                    print(f"{len(verdicts):5d} {verdict.line()}", flush=True)

                one()
                round_seed += 1
        finally:
            arena.stop()
    return verdicts


def table_by_kind(verdicts: list[Verdict]) -> str:
    """A markdown row per kind: how many, the largest sizes drawn, the worst of each figure."""
    rows = ["| kind | attacks | largest sizes drawn | longest attack | memory growth, max | bystander's slowest read | restart, max | with problems |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for kind in sorted({v.attack.kind for v in verdicts}):
        mine = [v for v in verdicts if v.attack.kind == kind]
        largest = {name: max(v.attack.sizes[name] for v in mine) for name in mine[0].attack.sizes}
        rows.append(f"| {kind} | {len(mine)} | {', '.join(f'{k} {n:,}' for k, n in largest.items())} "
                    f"| {max(v.outcome.elapsed_s for v in mine):.2f} s | +{max(v.rss_growth_mb for v in mine):.0f} MB "
                    f"| {max(v.bystander.max_ms for v in mine):.0f} ms | {max(v.restart_s for v in mine):.1f} s "
                    f"| {sum(1 for v in mine if v.problems)} |")  # fmt: skip
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attacks", type=int, default=100, help="how many attacks (default 100)")
    parser.add_argument("--servers", type=int, choices=[1, 3], default=1)
    parser.add_argument("--kinds", help=f"a comma-separated list of: {', '.join(sorted(SIZES))} (default: all)")
    parser.add_argument("--scale", type=float, default=1.0, help="the largest sizes drawn, as a fraction of the findings' (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--at-leader", action="store_true", help="on 3 servers, attack the leader (default: a follower)")
    parser.add_argument("--minutes", type=float, help="stop after this long (rounds of 100 attacks, a seed each)")
    parser.add_argument("--renew-every", type=int, default=RENEW_EVERY,
                        help=f"start the servers afresh (empty data dirs) every this many attacks; 0: never (default {RENEW_EVERY})")
    args = parser.parse_args(argv)
    kinds = args.kinds.split(",") if args.kinds else None
    unknown = sorted(set(kinds or ()) - set(SIZES))
    if unknown:
        parser.error(f"unknown attack kinds: {', '.join(unknown)}")
    if args.attacks < 1 or not 0 < args.scale <= 1 or (args.minutes is not None and args.minutes <= 0) or args.renew_every < 0:
        parser.error("--attacks must be at least 1, --scale in (0, 1], --minutes more than 0 and --renew-every 0 or more")
    started = time.monotonic()
    verdicts = run(args.attacks, args.servers, kinds, args.scale, args.seed, args.at_leader, args.minutes, args.renew_every)
    broken = [verdict for verdict in verdicts if verdict.problems]
    print(f"\n{len(verdicts)} attacks in {time.monotonic() - started:.0f} s on {args.servers} server(s), seed {args.seed}: "
          f"{dict(sorted(Counter(v.attack.kind for v in verdicts).items()))}")  # fmt: skip
    print(f"{len(broken)} with problems; largest memory growth {max((v.rss_growth_mb for v in verdicts), default=0):.0f} MB, "
          f"slowest bystander read {max((v.bystander.max_ms for v in verdicts), default=0):.0f} ms")  # fmt: skip
    print(table_by_kind(verdicts))
    for verdict in broken:
        print(f"  {verdict.line()}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
