#!/usr/bin/env python3
"""Run the other ZooKeeper clients against zabby and against ZooKeeper 3.8 (Debian's), standalone
and on 3 servers, and print the counts table of docs/zookeeper-compat.md:

* aiozk's own suite (85 tests; ``harness.differential.aiozk_suite``), on each layout;
* go-zookeeper's own suite (Debian's samuel/go-zookeeper; its harness starts 1 and 3 servers
  itself, so it has one count per system; ``harness.differential.gozk``);
* node-zookeeper-client's and the C client's scenarios (+ cli_mt), compared line by line
  with ZooKeeper's on the same layout, and load_gen's cycles;
* on 3 servers, 3 aiozk clients x 10 bursts of 100 null-data creates and setData (with
  ZooKeeper's forceSync=yes), and the core restarts in zabby's logs.

    python scripts/client_suites.py                         # everything (about 15 minutes)
    python scripts/client_suites.py --only aiozk,node --sizes 1

Installs what it needs (scripts/install_zookeeper.sh, scripts/install_clients.sh; npm and
PyPI packages into .cache/clients); its servers' and suites' logs stay in --workdir.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.differential import aiozk_suite, c_client, gozk, node_client  # noqa: E402
from harness.differential.servers import SYSTEMS, running_system  # noqa: E402
from harness.local.zookeeper import ensure_zookeeper  # noqa: E402

PARTS = ("aiozk", "go", "node", "c", "bursts")
LAYOUTS = {1: "standalone", 3: "3 servers"}


def run_layout(system: str, size: int, parts: set[str], workdir: Path) -> dict[str, Any]:
    """The results of ``parts`` on ``size`` servers of ``system``."""
    results: dict[str, Any] = {}
    with running_system(system, size, workdir / "servers") as running:
        one_server = running.hosts.split(",")[-1]  # the scenarios' sessions on one server: none reads behind another's write
        if "aiozk" in parts:
            results["aiozk"] = aiozk_suite.run_suite(running.hosts, log=workdir / "aiozk.log").cell()
        if "node" in parts:
            results["node"] = node_client.run_scenario(one_server)
        if "c" in parts:
            results["c"] = [*c_client.run_scenario(one_server), *c_client.run_cli_mt(one_server)]
            results["load_gen"] = "{} cycles, {} errors".format(*c_client.run_load_gen(running.hosts))
        results["core restarts"] = running.core_restarts()
    if "bursts" in parts and size > 1:
        with running_system(system, size, workdir / "bursts", forceSync="yes") as running:
            started = time.monotonic()
            counts = aiozk_suite.null_bursts(running.hosts)
            results["null bursts"] = f"{counts['answered']}/{counts['sent']} answered in {time.monotonic() - started:.1f} s, {running.core_restarts()} core restarts"
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated: zookeeper,zabby")
    parser.add_argument("--sizes", default="1,3", help="comma-separated server counts: 1,3")
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts: {','.join(PARTS)}")
    parser.add_argument("--workdir", type=Path, help="where the servers' and suites' logs go (default: a new temporary folder)")
    args = parser.parse_args()
    systems, sizes, parts = args.systems.split(","), [int(size) for size in args.sizes.split(",")], set(args.only.split(","))
    if unknown := (set(systems) - set(SYSTEMS)) | (parts - set(PARTS)) | (set(sizes) - set(LAYOUTS)):
        parser.error(f"unknown: {', '.join(map(str, sorted(unknown, key=str)))}")
    if "zookeeper" in systems:
        ensure_zookeeper()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="client-suites-"))
    results: dict[tuple[str, int], dict[str, Any]] = {}
    for size in sizes if parts - {"go"} else []:  # go-zookeeper's harness starts its own servers
        for system in systems:
            started = time.monotonic()
            results[(system, size)] = run_layout(system, size, parts, workdir / f"{system}-{size}")
            print(f"{system}, {LAYOUTS[size]}: done in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    go = {system: gozk.run_suite(system, log=workdir / f"go-{system}.log") for system in systems} if "go" in parts else {}
    print_table(results, go, systems, sizes)
    print(f"\nlogs: {workdir}")
    return 0


def print_table(results: dict[tuple[str, int], dict[str, Any]], go: dict[str, Any], systems: list[str], sizes: list[int]) -> None:
    rows = [("aiozk's suite (passed/total)", "aiozk"), ("node-zookeeper-client scenario", "node"), ("C client scenario + cli_mt", "c"),
            ("load_gen (8 s)", "load_gen"), ("null-data bursts, 3 x 10 x 100 x 2", "null bursts"), ("core restarts", "core restarts")]  # fmt: skip
    columns = [(system, size) for size in sizes for system in systems if (system, size) in results]
    print("| | " + " | ".join(f"{system}, {LAYOUTS[size]}" for system, size in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for label, key in rows:
        cells = [_cell(results[column], key, results.get(("zookeeper", column[1]), {})) for column in columns]
        if any(cell != "" for cell in cells):
            print(f"| {label} | " + " | ".join(cells) + " |")
    for system, counts in go.items():
        failed = f" (failed: {', '.join(counts.failures)})" if counts.failures else ""
        print(f"\ngo-zookeeper's suite on {system}: {counts.passed} passed, {counts.failed} failed, {counts.skipped} skipped{failed}")


def _cell(result: dict[str, Any], key: str, reference: dict[str, Any]) -> str:
    value = result.get(key)
    if value is None:
        return ""
    if isinstance(value, list):  # a scenario's lines: compared with ZooKeeper's on the same layout
        if reference.get(key) is None or reference[key] is value:
            return f"{len(value)} lines"
        return f"{len(value)} lines, identical" if value == reference[key] else f"{len(value)} lines, DIFFERENT from ZooKeeper's"
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
