#!/usr/bin/env python3
"""The long fuzz run of the client port (``harness.jepsen.fuzz``), to replay by seed.

    python scripts/fuzz_clients.py --seed 7 --examples 5000
    python scripts/fuzz_clients.py --seed 7 --examples 5000 --servers 3     # against a follower of an ensemble

One server (or ensemble) on 127.0.0.1 in a temporary folder; hypothesis draws ``--examples``
cases from the seed (the same seed draws the same cases, so a failure replays), sends each on
a connection of its own, and after each checks that the server is up, that a well-behaved
client's read answers and its acknowledged writes are there, and that the server logged no
error of its own.  A failing case is shrunk to a small one and printed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: its harness/ is not installed

from harness.jepsen import fuzz
from zabby.testing import Ensemble, ServerProcess


def run(seed_value: int, examples: int, servers: int, workdir: Path) -> int:
    processes: list[ServerProcess]
    if servers == 1:
        processes = [ServerProcess(workdir, maxSessionTimeout=60_000)]
        processes[0].start()
    else:
        ensemble = Ensemble(workdir, servers, maxSessionTimeout=60_000)
        ensemble.start()
        processes = list(ensemble.servers.values())
    target_server = processes[-1]
    target = fuzz.Target(target_server.port, target_server.log_path)
    outcomes: Counter[str] = Counter()
    started = time.monotonic()

    @seed(seed_value)
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=fuzz.CASES)
    def one_connection(case: fuzz.Case) -> None:
        sent = target.send(case)
        outcomes[f"{case.protocol} {'closed' if sent.closed else 'answered'}"] += 1
        for server in processes:
            server.check_running()
        target.check()

    try:
        one_connection()
    except BaseException as exc:  # noqa: BLE001 - reported with the seed that replays it
        print("".join(traceback.format_exception(exc))[-6000:])
        print(f"FAILED after {target.cases} cases: {type(exc).__name__}: {exc}")
        print(f"replay: python scripts/fuzz_clients.py --seed {seed_value} --examples {examples} --servers {servers}")
        return 1
    finally:
        target.close()
        for server in processes:
            server.kill()
    print(f"seed {seed_value}: {target.cases} connections in {time.monotonic() - started:.0f} s, {dict(outcomes)}; "
          f"{target.acked} acknowledged writes read back after each; the server(s) stayed up and logged no error")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--servers", type=int, choices=[1, 3], default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="zabby-fuzz-") as folder:
        return run(args.seed, args.examples, args.servers, Path(folder))


if __name__ == "__main__":
    sys.exit(main())
