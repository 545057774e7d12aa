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


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as out:
        out.write(json.dumps(record, default=str) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def configuration(record: dict[str, Any]) -> tuple[str, int, str, str]:
    return record["system"], record["servers"], "+".join(record.get("clients", [])), record["nemesis"]


def markdown_table(records: list[dict[str, Any]]) -> str:
    groups: dict[tuple[str, int, str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        groups[configuration(record)].append(record)
    rows = [_row(config, runs) for config, runs in sorted(groups.items())]
    return "\n".join([TABLE_HEADER, TABLE_RULE, *rows]) + "\n"


def _row(config: tuple[str, int, str, str], runs: list[dict[str, Any]]) -> str:
    system, servers, clients, nemesis = config
    ops = Counter()
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
        + (f", reconfigs {_outcomes(record['reconfigs'])}" if record.get("reconfigs") else "")
    )


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
