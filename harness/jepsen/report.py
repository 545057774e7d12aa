"""Results: one JSON line per run, and a markdown table per configuration (system, servers,
clients, nemesis) for ``docs/reliability.md``."""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

TABLE_HEADER = (
    "| system | servers | clients | nemesis | runs | failed runs | operations (ok / fail / unknown) | faults injected "
    "| linearizable | lost / duplicated writes | server processes died | longest window with no successful write "
    "| converge after heal (median / max) | commit |"
)
TABLE_RULE = "|" + "---|" * TABLE_HEADER.count(" | ") + "---|"
# a column of its own when some run had a well-behaved client beside hostile ones (nemesis group ``clients``)
BYSTANDER_HEADER = "well-behaved client: read p99 median / worst, max (p99 per run)"


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as out:
        out.write(json.dumps(record, default=str) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def configuration(record: dict[str, Any]) -> tuple[str, int, str, str]:
    return record["system"], record["servers"], "+".join(record.get("clients", [])), record["nemesis"]


def markdown_table(records: list[dict[str, Any]]) -> str:
    """One row per configuration; the well-behaved client's column only when some run has it,
    so the tables of runs without hostile clients keep their shape."""
    groups: dict[tuple[str, int, str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        groups[configuration(record)].append(record)
    bystander = any(record.get("bystander") for record in records)
    header, rule = TABLE_HEADER, TABLE_RULE
    if bystander:
        header = TABLE_HEADER.replace(" | commit |", f" | {BYSTANDER_HEADER} | commit |")
        rule = "|" + "---|" * header.count(" | ") + "---|"
    rows = [_row(config, runs, bystander) for config, runs in sorted(groups.items())]
    return "\n".join([header, rule, *rows]) + "\n"


def bystander_cell(runs: list[dict[str, Any]]) -> str:
    """The well-behaved client's read latencies over the runs that measured them: the median and
    the worst of the runs' p99, the longest read, the failed reads, and each run's p99."""
    figures = [run["bystander"] for run in runs if run.get("bystander", {}).get("p99_ms") is not None]
    missing = sum(1 for run in runs if run.get("bystander")) - len(figures)
    if not figures:
        return "-" if not missing else f"not reported ({missing} runs)"
    p99s = [f["p99_ms"] for f in figures]
    reads, failed = sum(f.get("reads", 0) for f in figures), sum(f.get("failures", 0) for f in figures)
    text = (f"{statistics.median(p99s):.1f} / {max(p99s):.1f} ms, max {max(f['max_ms'] for f in figures):.0f} ms, "
            f"{reads} reads answered, {failed} attempts failed (while its server was cut off or down; p99 per run: {', '.join(f'{p:.1f}' for p in p99s)})")  # fmt: skip
    return text + (f"; not reported in {missing} runs" if missing else "")


def _row(config: tuple[str, int, str, str], runs: list[dict[str, Any]], bystander: bool = False) -> str:
    system, servers, clients, nemesis = config
    ops: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    for run in runs:
        ops.update(run.get("ops", {}))
        faults.update(run.get("faults", {}))
    verdicts = [run.get("linearizable") for run in runs]
    linearizable = "yes" if all(v is True for v in verdicts) else f"no: {verdicts.count(False)} runs" if False in verdicts else f"undecided: {sum(v is None for v in verdicts)} runs"
    lost = sum(run.get("creates", {}).get("lost", 0) for run in runs)
    duplicated = sum(run.get("creates", {}).get("duplicated", 0) for run in runs)
    deaths = sum(len(run.get("deaths", [])) for run in runs)
    gaps = [run["longest_write_gap_s"] for run in runs if run.get("longest_write_gap_s") is not None]
    converge = [run["converge_s"] for run in runs if run.get("converge_s") is not None]
    not_converged = sum(1 for run in runs if run.get("converged") is False)
    converge_text = f"{statistics.median(converge):.1f} s / {max(converge):.1f} s" if converge else "-"
    if not_converged:
        converge_text += f" ({not_converged} runs did not)"
    commits = ", ".join(sorted({run.get("commit", "?") for run in runs}))
    fault_text = f"{sum(faults.values())} (" + ", ".join(f"{kind} {count}" for kind, count in sorted(faults.items())) + ")"
    cells = [
        system, str(servers), clients, nemesis, str(len(runs)), str(sum(1 for run in runs if not run.get("ok"))),
        f"{ops['total']} ({ops['ok']} / {ops['fail']} / {ops['unknown']})", fault_text, linearizable,
        f"{lost} / {duplicated}", str(deaths), f"{max(gaps):.1f} s" if gaps else "-", converge_text, commits,
    ]  # fmt: skip
    if bystander:
        cells.insert(-1, bystander_cell(runs))
    return "| " + " | ".join(cells) + " |"


def run_line(record: dict[str, Any]) -> str:
    """One line per run for the console."""
    ops = record.get("ops", {})
    verdict = "PASS" if record.get("ok") else "FAIL"
    return (
        f"{verdict} {record['system']} x{record['servers']} seed {record['seed']}: {ops.get('total', 0)} ops "
        f"({ops.get('ok', 0)} ok, {ops.get('fail', 0)} fail, {ops.get('unknown', 0)} unknown), "
        f"faults {sum(record.get('faults', {}).values())}, linearizable {record.get('linearizable')}, "
        f"converged in {record.get('converge_s')} s, longest write gap {record.get('longest_write_gap_s')} s"
        + (f", all killed and restarted: serving the same tree in {record['restart_s']} s" if record.get("restart_s") is not None else "")
        + (f", reconfigs {_outcomes(record['reconfigs'])}" if record.get("reconfigs") else "")
        + _bystander_text(record.get("bystander"))
        + _watch_text(record.get("watch"))
        + (f", roles polled {record['roles']}" if record.get("roles") else "")
    )


def _watch_totals(watch: dict[str, Any]) -> Counter[str]:
    totals: Counter[str] = Counter()
    for figures in watch.get("watchers", {}).values():
        totals.update({key: value for key, value in figures.items() if isinstance(value, int) and not isinstance(value, bool)})
        totals["not_caught_up"] += not figures.get("caught_up", False)
        totals["watchers"] += 1
    return totals


def _watch_text(watch: dict[str, Any] | None) -> str:
    if not watch or "watchers" not in watch:
        return ""
    t = _watch_totals(watch)
    return (f", watch: {t['watchers']} watchers, {t['events']} events of {t['expected']} expected: {t['missed']} missed, "
            f"{t['duplicated']} duplicated, {t['reordered']} reordered, {t['mismatched']} mismatched, {t['history_lost']} HISTORY_LOST")  # fmt: skip


def _bystander_text(figures: dict[str, Any] | None) -> str:
    if not figures:
        return ""
    if figures.get("p99_ms") is None:
        return f", well-behaved client: no figures ({figures.get('error', '?')})"
    return (f", well-behaved client on server {figures.get('server')}: p99 {figures['p99_ms']:.1f} ms, max {figures['max_ms']:.0f} ms, "
            f"{figures.get('reads', 0)} reads answered, {figures.get('failures', 0)} attempts failed, fresh connect max {figures.get('fresh_max_ms', 0):.0f} ms")  # fmt: skip


def _outcomes(counts: dict[str, int]) -> str:
    return f"{counts.get('ok', 0)} ok / {counts.get('fail', 0)} failed / {counts.get('unknown', 0)} unknown"


RECONFIG_HEADER = (
    "| system | servers | nemesis | runs | failed runs | operations (ok / fail / unknown) | reconfig faults injected "
    "| reconfigs (ok / failed / unknown) | linearizable | lost / duplicated writes | server processes died "
    "| membership restored on every server | converge after heal (median / max) | commit |"
)


def reconfig_table(records: list[dict[str, Any]]) -> str:
    """The runs that reconfigured, one row per configuration (docs/reliability.md, Reconfiguration)."""
    groups: dict[tuple[str, int, str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        if "reconfigs" in record:
            groups[configuration(record)].append(record)
    rows = []
    for (system, servers, _, nemesis), runs in sorted(groups.items()):
        cells = _row((system, servers, "-", nemesis), runs).strip("| ").split(" | ")
        reconfigs: Counter[str] = Counter()
        faults: Counter[str] = Counter()
        for run in runs:
            reconfigs.update(run.get("reconfigs", {}))
            faults.update({kind: n for kind, n in run.get("faults", {}).items() if kind.startswith("reconfig-")})
        restored = sum(1 for run in runs if run.get("membership") and not any("membership" in f or "dynamic config" in f or "config version" in f for f in run.get("failures", [])))
        fault_text = f"{sum(faults.values())} (" + ", ".join(f"{kind} {count}" for kind, count in sorted(faults.items())) + ")"
        row = [system, str(servers), nemesis, cells[4], cells[5], cells[6], fault_text, _outcomes(reconfigs), cells[8], cells[9], cells[10], f"{restored} / {len(runs)} runs", cells[12], cells[13]]
        rows.append("| " + " | ".join(row) + " |")
    rule = "|" + "---|" * RECONFIG_HEADER.count(" | ") + "---|"
    return "\n".join([RECONFIG_HEADER, rule, *rows]) + "\n"


WATCH_HEADER = (
    "| system | servers | nemesis | runs | watchers (not caught up) | events checked / expected | missed | duplicated "
    "| reordered | mismatched | unverifiable (zxid ranges no log covers) | HISTORY_LOST | re-subscribed after expiry | commit |"
)


def watch_table(records: list[dict[str, Any]]) -> str:
    """The watch workload's figures, one row per configuration (docs/reliability.md, Watches):
    summed over the runs and their watchers.  ZooKeeper's events carry no zxid, so its
    reordered and mismatched cells are "-" (not judged)."""
    groups: dict[tuple[str, int, str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        if record.get("watch", {}).get("watchers"):
            groups[configuration(record)].append(record)
    rows = []
    for (system, servers, _, nemesis), runs in sorted(groups.items()):
        t: Counter[str] = Counter()
        holes = sum(run["watch"].get("holes", 0) for run in runs)
        for run in runs:
            t.update(_watch_totals(run["watch"]))
        zxids = system == "zabby"
        cells = [system, str(servers), nemesis, str(len(runs)), f"{t['watchers']} ({t['not_caught_up']})", f"{t['events']} / {t['expected']}",
                 str(t["missed"]), str(t["duplicated"]), str(t["reordered"]) if zxids else "-", str(t["mismatched"]) if zxids else "-",
                 f"{t['unverifiable']} ({holes})", str(t["history_lost"]) if zxids else "-", str(t["resubscribed"] if zxids else t["expiries"]),
                 ", ".join(sorted({run.get("commit", "?") for run in runs}))]  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |")
    rule = "|" + "---|" * WATCH_HEADER.count(" | ") + "---|"
    return "\n".join([WATCH_HEADER, rule, *rows]) + "\n"
