"""The issue's targets checked against a run's records (the "Goals" table of
docs/benchmarks.md), and the tables of the --scale mode.

Targets: one-at-a-time p50 latency at most ZooKeeper's (create, setData, getData; standalone and
3 servers; kazoo and the Java client); pipelined throughput on 3 servers at least 1.5x
ZooKeeper's (Java client, connections spread over every server; the 2 x 4 layout also shown);
standalone pipelined create and setData at least 1.0x; and at 1M znodes on 3 servers: memory per
znode at most ZooKeeper's live heap per znode, restart and resync at most ZooKeeper's, and
throughput within 10% of the throughput at 1k znodes.
"""

from __future__ import annotations

import math
from statistics import mean
from typing import Any

from harness.bench.report import client_label, keyed, markdown_table, ratio, rounds_text

LATENCY = (("latency-write", "create"), ("latency-set", "setData"), ("latency-read", "getData"))
LATENCY_DRIVERS = ("kazoo", "java")
GOAL_HEADER = ["target", "measured", "zabby", "ZooKeeper 3.8", "zabby ÷ ZK", "needed", "met"]
PIPELINED = (("3-server", ("create-100B", "setData", "getData"), 1.5), ("standalone", ("create-100B", "setData"), 1.0))


def is_goal_row(deployment: str, driver: str, layout: str, workload: str) -> bool:
    """Whether a row of the main matrix is one the targets read (bench.py measures those in
    several rounds)."""
    if workload in dict(LATENCY):
        return driver in LATENCY_DRIVERS and layout == "default"
    return driver == "java" and any(deployment == d and workload in ws for d, ws, _ in PIPELINED)


def _verdict(value: float | None, needed: float) -> str:
    if value is None:
        return "not measured"
    return "yes" if value >= needed else "**no**"


def _ratio_text(value: float | None, needed: float, unit: str = "×") -> str:
    """Two decimals, or three rounded down where two would round a miss up to the goal (0.9995 is 0.999, not 1.00)."""
    if value is None:
        return "—"
    text = f"{value:.2f}"
    if value < needed and text == f"{needed:.2f}":
        text = f"{math.floor(value * 1000) / 1000:.3f}"
    return text + unit


def _short(rec: dict[str, Any] | None) -> str:
    if rec is None:
        return "—"
    if "error" in rec:
        return "failed"
    if rec["kind"] == "latency":
        return f"p50 {rec['p50_ms']:.2f} ms{rounds_text(rec)}"
    return f"{rec['rate']:,.0f}/s{rounds_text(rec)}"


def run_goals(records: list[dict[str, Any]]) -> list[list[str]]:
    """Rows for the latency and throughput targets, from the main records."""
    by_key = keyed(records)
    rows = []
    for deployment in ("standalone", "3-server"):
        for workload, op in LATENCY:
            for driver in LATENCY_DRIVERS:
                zab, zk = by_key.get((deployment, driver, "default", workload, "zabby")), by_key.get((deployment, driver, "default", workload, "zookeeper"))
                if zab or zk:
                    r = ratio(zab, zk)
                    rows.append([f"one-at-a-time {op} p50 ≤ ZK", f"{deployment}, {client_label(driver, 'default')}", _short(zab), _short(zk),
                                 _ratio_text(r, 1.0), "≥ 1.00×", _verdict(r, 1.0)])  # fmt: skip
    for deployment, workloads, needed in PIPELINED:
        for workload in workloads:
            for layout in ("spread", "default"):
                zab, zk = by_key.get((deployment, "java", layout, workload, "zabby")), by_key.get((deployment, "java", layout, workload, "zookeeper"))
                if zab or zk:
                    r = ratio(zab, zk)
                    rows.append([f"pipelined {workload} ≥ {needed:.1f}× ZK", f"{deployment}, {client_label('java', layout, zab or zk)}", _short(zab),
                                 _short(zk), _ratio_text(r, needed), f"≥ {needed:.2f}×", _verdict(r, needed)])  # fmt: skip
    return rows


def _by_kind(records: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {r["system"]: r for r in records if r.get("kind") == kind and "error" not in r}


def _rates(records: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[float]]:
    out: dict[tuple[str, str, str], list[float]] = {}
    for r in records:
        if r.get("series") == "scale" and r.get("kind") == "throughput" and "rate" in r:
            out.setdefault((r["system"], r["workload"], r["tree"]), []).append(r["rate"])
    return out


def _scale_runs(records: list[dict[str, Any]], system: str, workload: str, tree: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("series") == "scale" and r.get("kind") == "throughput" and "rate" in r
            and (r["system"], r["workload"], r["tree"]) == (system, workload, tree)]  # fmt: skip


def _cpu_per_op(records: list[dict[str, Any]], system: str, workload: str, tree: str) -> str:
    runs = _scale_runs(records, system, workload, tree)
    return f"{mean(1e6 * r['server_cpu_s'] / max(r['ops'], 1) for r in runs):,.0f} µs" if runs else "—"


def _loads(records: list[dict[str, Any]], system: str, workload: str, tree: str) -> str:
    runs = _scale_runs(records, system, workload, tree)
    return ", ".join(f"{r['load']:.1f}" for r in runs if "load" in r) or "—"


def memory_per_znode(rec: dict[str, Any], key: str) -> float | None:
    """The mean over the leader and the live follower of ``<key>_per_znode``."""
    values = [server[f"{key}_per_znode"] for server in rec["servers"].values() if f"{key}_per_znode" in server]
    return mean(values) if values else None


def scale_goals(records: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    memory = _by_kind(records, "scale-memory")
    zab_mem, zk_mem = memory.get("zabby"), memory.get("zookeeper")
    if zab_mem or zk_mem:
        zab_rss = memory_per_znode(zab_mem, "rss") if zab_mem else None
        zk_live = memory_per_znode(zk_mem, "live") if zk_mem else None
        r = zk_live / zab_rss if zab_rss and zk_live else None
        rows.append(["memory per znode ≤ ZK's live heap per znode", "zabby RSS growth vs ZK live heap growth after a full GC",
                     f"{zab_rss:,.0f} B" if zab_rss else "—", f"{zk_live:,.0f} B" if zk_live else "—", _ratio_text(r, 1.0),
                     "≥ 1.00×", _verdict(r, 1.0)])  # fmt: skip
    for kind, title in (("scale-restart", "restart with the znodes ≤ ZK"), ("scale-resync", "resync of a follower that many behind ≤ ZK")):
        found = _by_kind(records, kind)
        zab, zk = found.get("zabby"), found.get("zookeeper")
        if zab or zk:
            r = zk["seconds"] / zab["seconds"] if zab and zk and zab["seconds"] else None
            count = (zab or zk or {}).get("znodes", 0)
            rows.append([title, f"3-server, {count:,} znodes", f"{zab['seconds']:.1f} s" if zab else "—", f"{zk['seconds']:.1f} s" if zk else "—",
                         _ratio_text(r, 1.0), "≥ 1.00×", _verdict(r, 1.0)])  # fmt: skip
    rates = _rates(records)
    for workload in ("create-100B", "setData", "getData"):
        small, large = rates.get(("zabby", workload, "small")), rates.get(("zabby", workload, "large"))
        zk_small, zk_large = rates.get(("zookeeper", workload, "small")), rates.get(("zookeeper", workload, "large"))
        if small or large:
            r = mean(large) / mean(small) if small and large else None
            zk_r = mean(zk_large) / mean(zk_small) if zk_small and zk_large else None
            rows.append([f"{workload} with the tree large within 10% of small", "3-server, Java client, spread; large ÷ small",
                         _ratio_text(r, 0.9, ""), _ratio_text(zk_r, 0.9, ""), "—", "≥ 0.90", _verdict(r, 0.9)])  # fmt: skip
    return rows


def goals_table(records: list[dict[str, Any]], scale_records: list[dict[str, Any]]) -> str:
    rows = run_goals(records) + scale_goals(scale_records)
    return markdown_table(rows, GOAL_HEADER) if rows else ""


def _mib(value: int | None) -> str:
    return "—" if value is None else f"{value / 2**20:,.0f} MiB"


def _growth(server: dict[str, Any], key: str) -> str:
    per = server.get(f"{key}_per_znode")
    if per is None:
        return "—"
    return f"{_mib(server[f'{key}_before'])} → {_mib(server[f'{key}_after'])}: **{per:,.0f} B**"


def scale_tables(records: list[dict[str, Any]]) -> str:
    """Markdown for the --scale records: fill, memory, resync and restart, throughput."""
    parts = []
    fills = _by_kind(records, "scale-fill")
    if fills:
        rows = [[system, f"{r['znodes']:,} × {100} B", f"{r['seconds']:,.0f} s", f"{r['rate']:,.0f} creates/s", f"{r.get('load', -1):.2f}"]
                for system, r in fills.items()]  # fmt: skip
        parts.append("Filling (one follower stopped; Java client, 2 processes × 2 connections × 64 in flight over the leader and "
                     "the other follower):\n\n" + markdown_table(rows, ["system", "znodes", "time", "rate", "load at end"]))  # fmt: skip
    memory = _by_kind(records, "scale-memory")
    if memory:
        rows = []
        for system, r in memory.items():
            for role, server in r["servers"].items():
                rows.append([system, role, f"{r['znodes_before']:,} → {r['znodes_after']:,}", *(_growth(server, key) for key in ("rss", "rss_gc", "live", "used"))])
        traced = _by_kind(records, "scale-tracemalloc").get("zabby")
        if traced and "traced_per_znode" in traced:
            rows.append(["zabby", f"server {traced['sid']} recovered by itself", f"{traced['znodes']:,}", "—", "—",
                         f"tracemalloc: {_mib(traced['traced_bytes'])}: **{traced['traced_per_znode']:,.0f} B**", "—"])  # fmt: skip
        parts.append("Memory per znode: growth between the two points ÷ the znodes added (from → to: per znode). zabby's last row: "
                     "the Python objects alive after a separate process recovered a follower's data dir (snapshot + log) under "
                     "tracemalloc, ÷ its znodes; not a growth.\n\n" + markdown_table(
            rows, ["system", "server", "znodes", "RSS", "RSS after a forced full GC", "live heap (class histogram after a full GC)", "heap used after that GC"]))
    resync, restart = _by_kind(records, "scale-resync"), _by_kind(records, "scale-restart")
    if resync or restart:
        rows = []
        for system in sorted(set(resync) | set(restart)):
            a, b = resync.get(system), restart.get(system)
            server = (b or {}).get("server", {})
            own = f"{server['load_ms']:,.0f} ms" if server.get("load_ms") is not None else "—"
            if "txns_loaded" in server:
                own += f" ({server['txns_loaded']:,} txns replayed in {server.get('txns_load_ms', 0):,} ms)"
            rows.append([system, f"{a['seconds']:.2f} s ({a['mode']}, {a['behind']:,} behind)" if a else "—", _mib((a or {}).get("rss_after")),
                         f"{b['seconds']:.2f} s" if b else "—", "—" if not b or b.get("txns_after_snapshot") is None else f"{b['txns_after_snapshot']:,}",
                         own, _mib((b or {}).get("rss_after"))])  # fmt: skip
        parts.append("Resync and restart: process start → serving as a follower at the leader's zxid:\n\n" + markdown_table(
            rows, ["system", "resync of a stopped follower", "its RSS then", "restart of an in-sync follower", "txns after its newest snapshot",
                   "server's own load time", "its RSS then"]))  # fmt: skip
    rates = _rates(records)
    if rates:
        rows = []
        for system in ("zabby", "zookeeper"):
            for workload in ("getData", "setData", "create-100B"):
                small, large = rates.get((system, workload, "small")), rates.get((system, workload, "large"))
                if small or large:
                    text = [f"{mean(v):,.0f} ({' / '.join(f'{x:,.0f}' for x in v)})" if v else "—" for v in (small, large)]
                    rows.append([system, workload, *text, f"{mean(large) / mean(small):.2f}" if small and large else "—",
                                 " → ".join(_cpu_per_op(records, system, workload, tree) for tree in ("small", "large")),
                                 " / ".join(_loads(records, system, workload, tree) for tree in ("small", "large"))])  # fmt: skip
        parts.append("Throughput with the tree small (~1k znodes) and large, ops/s (mean of the repeats, each in brackets), and the "
                     "servers' CPU per op (all servers' CPU s over the window ÷ ops, mean of the repeats), which the machine's load "
                     "moves less than the rate:\n\n"
                     + markdown_table(rows, ["system", "workload", "small tree", "large tree", "large ÷ small", "server CPU per op, small → large",
                                             "1-minute load, small / large"]))  # fmt: skip
    return "\n\n".join(parts)
