#!/usr/bin/env python3
"""Apache Curator's recipes (Debian's libcurator-*-java 5.4) against ZooKeeper 3.8 and zabby,
standalone and on 3 servers with a follower or the leader killed halfway through every
scenario; a table of pass/FAIL, SUSPENDED (S) and leadership losses (L) per system and layout.

    python scripts/curator_suite.py                                   # every layout, hold 60 s
    python scripts/curator_suite.py --layouts standalone,leader --scenarios mutex,curator_cache

A scenario fails on a check of its own, a SUSPENDED/LOST or a leadership loss no kill caused,
or an error Curator could not handle; the two systems must also agree on each scenario's
facts.  Exit 0 when everything passed alike, 1 otherwise, 2 when Curator or ZooKeeper
cannot run here.  See harness/differential/curator.py.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: its harness/ is not installed

from harness.differential.curator import (
    LAYOUTS,
    SCENARIOS,
    SYSTEMS,
    CuratorUnavailable,
    Outcome,
    build,
    ensure_curator,
    fact_differences,
    run_layout,
    table,
)
from harness.local.zookeeper import ZooKeeperUnavailable

LAYOUT_KEYS = dict(zip(("standalone", "follower", "leader"), LAYOUTS, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layouts", default=",".join(LAYOUT_KEYS), help=f"comma-separated, of: {', '.join(LAYOUT_KEYS)}")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated (default: all)")
    parser.add_argument("--seconds", type=int, default=3, help="each scenario's working time (default 3)")
    parser.add_argument("--hold", type=int, default=60, help="the LeaderLatch + CuratorCache hold, seconds (default 60)")
    args = parser.parse_args()
    keys = [key.strip() for key in args.layouts.split(",") if key.strip()]
    scenarios = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    unknown = [name for name in scenarios if name not in SCENARIOS] + [key for key in keys if key not in LAYOUT_KEYS]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    layouts = [LAYOUT_KEYS[key] for key in keys]
    try:
        ensure_curator()
    except (CuratorUnavailable, ZooKeeperUnavailable) as exc:
        print(f"Curator or ZooKeeper 3.8 cannot run here: {exc}", file=sys.stderr)
        return 2
    build_dir = build()
    results: dict[tuple[str, str], list[Outcome]] = {}
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="curator-suite-") as workdir:
        for layout in layouts:
            for system in SYSTEMS:
                started = time.monotonic()
                folder = Path(workdir) / f"{system}-{layouts.index(layout)}"
                outcomes = run_layout(system, layout, folder, build_dir, scenarios, seconds=args.seconds, hold_s=args.hold)
                results[(system, layout)] = outcomes
                print(f"{layout} / {system}: {sum(o.passed for o in outcomes)} of {len(outcomes)} passed "
                      f"in {time.monotonic() - started:.0f} s", flush=True)  # fmt: skip
                problems += [f"{layout} / {system} / {o.scenario}: {p}" for o in outcomes for p in o.problems()]
                if len(outcomes) < len(scenarios):
                    problems.append(f"{layout} / {system}: only {len(outcomes)} of {len(scenarios)} scenarios reported")
            problems += [f"{layout}: {text}" for text in fact_differences(results[("zabby", layout)], results[("zookeeper", layout)])]
    print(table(results, layouts))
    for outcomes in results.values():
        for outcome in outcomes:
            if outcome.scenario == "hold":
                print(f"hold: {outcome.raw.get('figures')}")
    print("\n".join(problems) if problems else "every scenario passed on both systems, with the same facts")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
