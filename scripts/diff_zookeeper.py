"""Differential run: the same seeded random operations through kazoo (or ZooKeeper's own Java
client, ``--client java``) against Apache ZooKeeper 3.8 (Debian's jars) and zabby, both
standalone on 127.0.0.1; prints each seed's first divergence and a summary by kind.

    python scripts/diff_zookeeper.py --seeds 0..199 --ops 500
    python scripts/diff_zookeeper.py --client java --seeds 0..99 --ops 500
    python scripts/diff_zookeeper.py --mixed zk,zk,zabby --seeds 0..19 --ops 500

With ``--mixed``, zabby's side is the zabby member (the lowest id) of a mixed ensemble of
ZooKeeper 3.8 servers and zabby servers on ZooKeeper's peer protocol, by server id; the Java
client's workload then leaves out getConfig and reconfig, whose answers are the membership
(the standalone reference has none).

Exit status 0 when every seed ran identical, 1 otherwise, 2 when ZooKeeper cannot run
here.  Known differences are listed, with their reasons, in docs/zookeeper-compat.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: its harness/ is not installed

from harness.differential.runner import CLIENT_KINDS, Pair, SeedResult, run_seeds, seed_range, summary
from harness.differential.servers import running_mixed_pair, running_pair
from harness.local.mixed import ZABBY, ZOOKEEPER
from harness.local.zookeeper import zookeeper_unavailable


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=seed_range, default=seed_range("0..9"), help="A..B, both included (default 0..9)")
    parser.add_argument("--ops", type=int, default=500, help="operations per seed (default 500)")
    parser.add_argument("--client", choices=CLIENT_KINDS, default="kazoo", help="the sessions' client (default kazoo)")
    parser.add_argument("--verbose", action="store_true", help="print the full report of each divergence")
    parser.add_argument("--mixed", type=mixed_kinds, help="zabby's side: the zabby member of a mixed ensemble of these kinds "
                        "by server id, zookeeper (zk) or zabby (zk,zk,zabby)")  # fmt: skip
    args = parser.parse_args()
    why = zookeeper_unavailable()
    if why is not None:
        print(f"ZooKeeper 3.8 cannot run here: {why}", file=sys.stderr)
        return 2
    results: list[SeedResult] = []
    with tempfile.TemporaryDirectory(prefix="diff-zookeeper-") as workdir, ExitStack() as stack:
        if args.mixed:
            reference, zabby, member = stack.enter_context(running_mixed_pair(Path(workdir), args.mixed))
            print(f"zabby's side: {member} ({', '.join(f'{sid}: {kind}' for sid, kind in args.mixed.items())})", flush=True)
        else:
            reference, zabby = stack.enter_context(running_pair(Path(workdir)))
        started = time.monotonic()
        for result in run_seeds(Pair(reference.hosts, zabby.hosts), args.seeds, args.ops, args.client, membership_ops=not args.mixed):
            results.append(result)
            print(_line(result, args.verbose), flush=True)
        elapsed_s = time.monotonic() - started
    print(summary(results))
    print(f"{len(results)} seeds × {args.ops} ops through {args.client} in {elapsed_s:.0f} s")
    return 0 if all(result.divergence is None for result in results) else 1


def mixed_kinds(text: str) -> dict[int, str]:
    """``zk,zk,zabby`` -> {1: "zookeeper", 2: "zookeeper", 3: "zabby"}."""
    names = {"zk": ZOOKEEPER, ZOOKEEPER: ZOOKEEPER, ZABBY: ZABBY}
    kinds = [names.get(part.strip()) for part in text.split(",")]
    if None in kinds or len(kinds) < 3 or ZABBY not in kinds:
        raise argparse.ArgumentTypeError(f"{text!r}: 3 or more kinds, each zookeeper (zk) or zabby, a zabby among them")
    return {sid: str(kind) for sid, kind in enumerate(kinds, 1)}


def _line(result: SeedResult, verbose: bool) -> str:
    if result.divergence is None:
        return f"seed {result.seed}: identical ({result.ops_run} ops)"
    if verbose:
        return str(result.divergence)
    divergence = result.divergence
    return (f"seed {result.seed}: op {divergence.index} {divergence.op}\n"
            f"    {divergence.where}: ZooKeeper {divergence.reference!r}, zabby {divergence.zabby!r}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
