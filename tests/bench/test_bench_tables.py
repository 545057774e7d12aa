"""The parts of harness.bench that turn records into tables and pictures, on made-up
records: the Goals table, the --scale tables, the icicle graph, the layouts per workload, the
profile summaries.
Nothing is measured here."""

from __future__ import annotations

from pathlib import Path

from harness.bench.flame import write_svg
from harness.bench.goals import goals_table, scale_tables
from harness.bench.report import print_side_by_side, summarise_profile
from harness.bench.runner import SPREAD, SPREAD_WORKLOADS


def _throughput(system: str, deployment: str, workload: str, rate: float, layout: str = "default") -> dict:
    procs, conns, inflight = (4, 1, 32) if layout == "spread" else (2, 4, 16)
    return {"system": system, "deployment": deployment, "driver": "java", "workload": workload, "kind": "throughput", "unit": "ops/s",
            "layout": layout, "procs": procs, "conns": conns, "inflight": inflight, "rate": rate, "ops": int(rate), "errors": 0,
            "wall_s": 5.0, "server_cpu_s": 4.0, "client_cpu_s": 3.0, "series": "main"}  # fmt: skip


def _latency(system: str, deployment: str, driver: str, workload: str, p50: float) -> dict:
    return {"system": system, "deployment": deployment, "driver": driver, "workload": workload, "kind": "latency", "layout": "default",
            "p50_ms": p50, "p99_ms": 2 * p50, "p999_ms": 3 * p50, "ops": 1000, "errors": 0, "wall_s": 1.0, "server_cpu_s": 0.5,
            "client_cpu_s": 0.5, "series": "main"}  # fmt: skip


def test_goals_table_judges_each_target() -> None:
    records = [
        _throughput("zabby", "3-server", "setData", 16_000, "spread"),
        _throughput("zookeeper", "3-server", "setData", 10_000, "spread"),
        _throughput("zabby", "standalone", "create-100B", 9_000),
        _throughput("zookeeper", "standalone", "create-100B", 10_000),
        _latency("zabby", "3-server", "kazoo", "latency-set", 0.5),
        _latency("zookeeper", "3-server", "kazoo", "latency-set", 0.6),
    ]
    table = goals_table(records, [])
    rows = {line.split(" | ")[0].lstrip("| ") + " / " + line.split(" | ")[1]: line for line in table.splitlines()[2:]}
    assert rows["pipelined setData ≥ 1.5× ZK / 3-server, Java client, 4×1×32 spread"].endswith("| 1.60× | ≥ 1.50× | yes |")
    assert rows["pipelined create-100B ≥ 1.0× ZK / standalone, Java client"].endswith("| 0.90× | ≥ 1.00× | **no** |")
    assert rows["one-at-a-time setData p50 ≤ ZK / 3-server, kazoo"].endswith("| 1.20× | ≥ 1.00× | yes |")
    # the side-by-side table keeps the two layouts apart
    text = print_side_by_side(records, ["setData", "create-100B"])
    assert "| setData | Java client, 4×1×32 spread | 16,000 ops/s | 10,000 ops/s | **1.60×** |" in text


def test_scale_tables_and_goals() -> None:
    memory = {"system": "zabby", "kind": "scale-memory", "znodes_before": 1_000, "znodes_after": 1_001_000,
              "servers": {"leader": {"rss_before": 50 * 2**20, "rss_after": 950 * 2**20, "rss_per_znode": 943.7},
                          "follower": {"rss_before": 50 * 2**20, "rss_after": 900 * 2**20, "rss_per_znode": 891.3}}}  # fmt: skip
    zk_memory = {"system": "zookeeper", "kind": "scale-memory", "znodes_before": 1_000, "znodes_after": 1_001_000,
                 "servers": {"leader": {"rss_before": 2**28, "rss_after": 2**30, "rss_per_znode": 805.3, "live_before": 2**23,
                                        "live_after": 2**29, "live_per_znode": 528.5}}}  # fmt: skip
    restart = [{"system": s, "kind": "scale-restart", "znodes": 1_001_000, "seconds": t, "txns_after_snapshot": 50_000,
                "server": {"load_ms": 1000.0 * t}} for s, t in (("zabby", 8.0), ("zookeeper", 4.0))]  # fmt: skip
    rates = [{"system": "zabby", "series": "scale", "kind": "throughput", "workload": "getData", "tree": tree, "rate": rate,
              "ops": 5 * rate, "server_cpu_s": 5 * rate * 40e-6, "load": 1.0} for tree, rate in (("small", 10_000), ("small", 12_000), ("large", 10_500))]  # fmt: skip
    records = [memory, zk_memory, *restart, *rates]
    goals = goals_table([], records)
    assert "| memory per znode ≤ ZK's live heap per znode |" in goals and "| 918 B | 528 B | 0.58× | ≥ 1.00× | **no** |" in goals
    assert "| restart with the znodes ≤ ZK | 3-server, 1,001,000 znodes | 8.0 s | 4.0 s | 0.50× |" in goals
    assert "| getData with the tree large within 10% of small |" in goals and "| 0.95 | — | — | ≥ 0.90 | yes |" in goals
    tables = scale_tables(records)
    assert "| zabby | leader | 1,000 → 1,001,000 | 50 MiB → 950 MiB: **944 B** |" in tables
    assert "| zabby | getData | 11,000 (10,000 / 12,000) | 10,500 (10,500) | 0.95 | 40 µs → 40 µs | 1.0, 1.0 / 1.0 |" in tables


def test_icicle_graph(tmp_path: Path) -> None:
    raw = tmp_path / "raw.txt"
    raw.write_text("main (zabby/server/main.py:10);run (trio/_core/_run.py:5);apply (zabby/tree/datatree.py:171) 30\n"
                   "main (zabby/server/main.py:10);run (trio/_core/_run.py:6);fsync (<built-in>) 10\n")  # fmt: skip
    svg = tmp_path / "out.svg"
    assert write_svg(raw, svg, "a <test>")
    text = svg.read_text()
    assert text.startswith("<svg") and text.rstrip().endswith("</svg>")
    assert "a &lt;test&gt;" in text and "apply (zabby/tree/datatree.py) — 30 samples (75.0%)" in text
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert not write_svg(empty, tmp_path / "none.svg", "nothing")


def test_spread_layout_is_the_issues() -> None:
    assert (SPREAD.procs, SPREAD.conns, SPREAD.inflight) == (4, 1, 32) and SPREAD.spread
    assert set(SPREAD_WORKLOADS) == {"create-100B", "setData", "getData"}


def test_a_row_measured_in_rounds_is_its_median_round() -> None:
    """Three rounds each: the row shows the middle one and the range; a failed round is
    counted, not ranked; a row of two rounds takes the worse one, for both systems alike."""
    zabby = [_latency("zabby", "standalone", "java", "latency-write", p50) | {"round": n} for n, p50 in enumerate((0.40, 0.30, 0.34))]
    zookeeper = [_latency("zookeeper", "standalone", "java", "latency-write", p50) | {"round": n} for n, p50 in enumerate((0.32, 0.33, 0.50))]
    zookeeper.append({**zookeeper[0], "round": 3, "error": "RuntimeError: client died"})
    pipelined = [_throughput(system, "standalone", "setData", rate) | {"round": n}
                 for system, rates in (("zabby", (9_000, 12_000)), ("zookeeper", (10_000, 11_000))) for n, rate in enumerate(rates)]  # fmt: skip
    table = goals_table(zabby + zookeeper + pipelined, [])
    rows = {line.split(" | ")[0].lstrip("| ") + " / " + line.split(" | ")[1]: line for line in table.splitlines()[2:]}
    create = rows["one-at-a-time create p50 ≤ ZK / standalone, Java client"]
    assert "| p50 0.34 ms (median of 3 rounds: 0.30–0.40 ms) |" in create
    assert "| p50 0.33 ms (median of 3 rounds: 0.32–0.50 ms, 1 failed) |" in create
    assert create.endswith("| 0.97× | ≥ 1.00× | **no** |")
    set_data = rows["pipelined setData ≥ 1.0× ZK / standalone, Java client"]
    assert "| 9,000/s (median of 2 rounds: 9,000–12,000/s) | 10,000/s (median of 2 rounds: 10,000–11,000/s) |" in set_data


def test_rounds_go_to_the_rows_the_goals_read() -> None:
    from harness.bench.goals import is_goal_row

    assert is_goal_row("3-server", "kazoo", "default", "latency-write")
    assert is_goal_row("3-server", "java", "spread", "getData")
    assert is_goal_row("standalone", "java", "default", "create-100B")
    assert not is_goal_row("standalone", "java", "default", "getData")  # no standalone getData target
    assert not is_goal_row("3-server", "kazoo", "default", "setData")  # pipelined targets are the Java client's
    assert not is_goal_row("standalone", "zabby-msgpack", "default", "latency-read")


def test_a_ratio_just_short_of_its_goal_is_not_shown_as_the_goal() -> None:
    records = [_latency("zabby", "standalone", "java", "latency-write", 0.4935), _latency("zookeeper", "standalone", "java", "latency-write", 0.4915)]
    row = next(line for line in goals_table(records, []).splitlines() if "standalone, Java client" in line)
    assert row.endswith("| 0.995× | ≥ 1.00× | **no** |")


def test_a_profile_summary_ranks_ties_by_name(tmp_path: Path) -> None:
    """Frames with the same count come out in name order, whatever order the stacks were in:
    a report rebuilt from the same profile is the same report."""
    stacks = ["main (zabby/server/main.py:1);b (zabby/b.py:2) 3", "main (zabby/server/main.py:1);c (zabby/c.py:5) 3",
              "main (zabby/server/main.py:1);a (zabby/a.py:9) 3", "main (zabby/server/main.py:1);d (zabby/d.py:1) 1"]  # fmt: skip
    summaries = []
    for order in (stacks, stacks[::-1]):
        raw = tmp_path / "raw.txt"
        raw.write_text("\n".join(order) + "\n")
        summaries.append(summarise_profile(raw))
    assert summaries[0] == summaries[1]
    assert summaries[0]["self_by_function"] == [("a (zabby/a.py)", 30.0), ("b (zabby/b.py)", 30.0), ("c (zabby/c.py)", 30.0),
                                                ("d (zabby/d.py)", 10.0)]  # fmt: skip
