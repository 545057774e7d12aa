"""The side-by-side table, the Markdown report (docs/benchmarks.md) and the PNG plots of
scripts/bench.py, all made from the JSON-line records of one run."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from harness.bench.runner import percentile
from harness import CHECKOUT

DRIVER_LABEL = {"java": "Java client", "kazoo": "kazoo", "zabby-msgpack": "zabby msgpack Client"}
LAYOUTS = ("default", "spread")
SPEED_DRIFT_WARN = 0.10  # the speed probe's Python loop moved by more than this between two probes of one run


def client_label(driver: str, layout: str, rec: dict[str, Any] | None = None) -> str:
    """The client column: the library, and for the spread layout its shape."""
    if layout == "default":
        return DRIVER_LABEL[driver]
    shape = f"{rec['procs']}×{rec['conns']}×{rec['inflight']}" if rec and "procs" in rec else ""
    return f"{DRIVER_LABEL[driver]}, {shape} spread".replace(",  spread", ", spread")


def keyed(records: list[dict[str, Any]]) -> dict[tuple[str, str, str, str, str], dict[str, Any]]:
    """The main records by (deployment, driver, layout, workload, system): a row measured in
    rounds is its median round (``median_round``); otherwise a later record wins."""
    rows: dict[tuple[str, str, str, str, str], list[dict[str, Any]]] = {}
    for r in main_records(records):
        rows.setdefault((r["deployment"], r["driver"], r.get("layout", "default"), r["workload"], r["system"]), []).append(r)
    return {key: median_round(recs) for key, recs in rows.items()}


def _round_value(rec: dict[str, Any]) -> float:
    """What a round measured: its rate, or its p50 latency."""
    return rec["rate"] if rec["kind"] == "throughput" else rec["p50_ms"]


def _goodness(rec: dict[str, Any]) -> float:
    """What rounds are ranked by, larger is better: the rate, or the p50 latency negated."""
    return _round_value(rec) if rec["kind"] == "throughput" else -_round_value(rec)


def median_round(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row's records: the last one, or where it was measured in rounds (records with a
    ``round``), the round ranked in the middle, best first (of an even number, the worse of
    the two middle ones, for both systems alike), with every round's p50 or rate in
    ``round_values`` and the count of failed rounds in ``failed_rounds``."""
    rounds = [r for r in recs if "round" in r]
    if len(rounds) < 2:
        return recs[-1]
    measured = [r for r in rounds if "error" not in r and ("rate" in r or "p50_ms" in r)]
    if not measured:
        return rounds[-1]
    ranked = sorted(measured, key=_goodness, reverse=True)
    return {**ranked[len(ranked) // 2], "round_values": [_round_value(r) for r in measured], "failed_rounds": len(rounds) - len(measured)}


def rounds_text(rec: dict[str, Any]) -> str:
    """", median of 3 rounds: 0.31–0.36 ms" for a row measured in rounds, else ""."""
    values = rec.get("round_values")
    if not values:
        return ""
    low, high = min(values), max(values)
    span = f"{low:,.0f}–{high:,.0f}/s" if rec["kind"] == "throughput" else f"{low:.2f}–{high:.2f} ms"
    failed = f", {rec['failed_rounds']} failed" if rec.get("failed_rounds") else ""
    return f" (median of {len(values)} rounds: {span}{failed})"


def machine_info(zabby_root: Path | None = None) -> dict[str, Any]:
    """The machine, the versions, and the commit of the zabby checkout the servers run from."""
    info: dict[str, Any] = {"cores": os.cpu_count(), "kernel": platform.release(), "python": sys.version.split()[0]}
    try:
        mem = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
        info["ram_gib"] = round(int(mem.split()[1]) / 1024 / 1024, 1)
    except (OSError, StopIteration):
        pass
    try:
        info["cpu"] = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    for key, argv in (("java", ["java", "-version"]), ("zookeeper", ["dpkg-query", "-W", "-f", "${Version}", "zookeeper"])):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
            text = (done.stdout + done.stderr).strip().splitlines()
            info[key] = text[0] if text else ""
        except (OSError, subprocess.TimeoutExpired):
            pass
    info["zabby_commit"] = git_commit(zabby_root or CHECKOUT)
    return info


def git_commit(root: Path) -> str:
    """The short commit that last changed a checkout's zabby/ (the server's code, whatever the
    branch added elsewhere), "+local changes" when its files there differ from it."""
    try:
        rev = subprocess.run(["git", "log", "-1", "--format=%h", "--", "zabby"], cwd=root, capture_output=True, text=True, timeout=10, check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "zabby"], cwd=root, capture_output=True, text=True, timeout=10,
                               check=False).stdout.strip()  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (rev or "?") + ("+local changes" if dirty else "")


def _python_work() -> int:
    paths = {f"/bench/n{i:08d}": (i, 2 * i) for i in range(200_000)}
    return sum(value[1] - len(path) for path, value in paths.items())


def speed_probe(folder: Path) -> dict[str, float]:
    """The same fixed work in every run, so two runs can tell a slower machine (or day) from
    a slower server: a pure-Python loop (ms, best of 3) and the fdatasync of a 180 B append
    into preallocated space, as the txn log does it (p50 of 200, µs), in ``folder``."""
    loop_s = []
    for _ in range(3):
        started = time.perf_counter()
        _python_work()
        loop_s.append(time.perf_counter() - started)
    path = folder / "speed-probe.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.posix_fallocate(fd, 0, 1 << 20)
        os.fsync(fd)
        sync_s = []
        for number in range(200):
            started = time.perf_counter()
            os.pwrite(fd, b"x" * 180, number * 180)
            os.fdatasync(fd)
            sync_s.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    return {"python_loop_ms": round(min(loop_s) * 1000, 1), "fdatasync_us": round(percentile(sync_s, 0.5) * 1e6)}


def speed_note(start: dict[str, float], end: dict[str, float]) -> str:
    """The speed probe before a side-by-side run's measurements and after them, and a warning
    where the machine's Python speed moved by more than ``SPEED_DRIFT_WARN`` in between: a
    difference between the sides within that says nothing of the code."""
    before, after = start["python_loop_ms"], end["python_loop_ms"]
    note = (f"speed probe: a pure-Python loop {before:.0f} ms before the measurements, {after:.0f} ms after; "
            f"fdatasync p50 {start['fdatasync_us']:.0f} and {end['fdatasync_us']:.0f} µs")  # fmt: skip
    drift = abs(after - before) / min(before, after)
    if drift > SPEED_DRIFT_WARN:
        note += (f"\nwarning: the machine's speed moved by {100 * drift:.0f}% during the run: a difference between "
                 f"the sides within {100 * drift:.0f}% may be the machine's, not the code's")  # fmt: skip
    return note


def loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError):
        return -1.0


# -- the side-by-side table ---------------------------------------------------------------


def value_text(rec: dict[str, Any] | None) -> str:
    if rec is None:
        return "—"
    if "error" in rec:
        return "failed"
    errors = f" ({rec['errors']:,} errors)" if rec.get("errors") else ""
    if rec["kind"] == "throughput":
        return f"{rec['rate']:,.0f} {rec['unit']}{errors}{rounds_text(rec)}"
    if rec["kind"] == "latency":
        return f"{rec['p50_ms']:.2f} / {rec['p99_ms']:.2f} / {rec['p999_ms']:.2f} ms{rounds_text(rec)}"
    if "p50_ms" not in rec:
        return f"no complete round ({rec.get('missed_rounds', '?')} missed)"
    return f"{rec['p50_ms']:.1f} / {rec['p99_ms']:.1f} ms ({rec['watchers']} watchers)"


def ratio(zabby: dict[str, Any] | None, zk: dict[str, Any] | None) -> float | None:
    """zabby relative to ZooKeeper, >1 when zabby is better: throughput zabby/ZK, latency ZK/zabby (p50)."""
    if not zabby or not zk or "error" in zabby or "error" in zk:
        return None
    if zabby["kind"] == "throughput":
        return zabby["rate"] / zk["rate"] if zk["rate"] else None
    if "p50_ms" not in zabby or "p50_ms" not in zk or not zabby["p50_ms"]:
        return None
    return zk["p50_ms"] / zabby["p50_ms"]


def cpu_text(rec: dict[str, Any] | None) -> str:
    if not rec or "error" in rec:
        return "—"
    return f"{rec['server_cpu_s']:.1f} / {rec['client_cpu_s']:.1f}"


def main_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("series", "main") == "main" and r.get("kind") in ("throughput", "latency", "fanout")]


def side_by_side(records: list[dict[str, Any]], workload_order: list[str]) -> list[tuple[str, list[list[str]]]]:
    """Per deployment: rows of (workload, client, zabby, ZooKeeper, ratio, CPU zabby, CPU ZK, window)."""
    by_key = keyed(records)
    sections = []
    for deployment in ("standalone", "3-server"):
        rows = []
        for workload in workload_order:
            for driver in ("java", "kazoo", "zabby-msgpack"):
                for layout in LAYOUTS:
                    zab = by_key.get((deployment, driver, layout, workload, "zabby"))
                    zk = by_key.get((deployment, driver, layout, workload, "zookeeper"))
                    if zab is None and zk is None:
                        continue
                    r = ratio(zab, zk)
                    windows = "/".join(f"{rec['wall_s']:.1f}" for rec in (zab, zk) if rec and "wall_s" in rec)
                    rows.append([workload, client_label(driver, layout, zab or zk), value_text(zab), value_text(zk),
                                 "—" if r is None else f"**{r:.2f}×**", cpu_text(zab), cpu_text(zk), windows])  # fmt: skip
        if rows:
            sections.append((deployment, rows))
    return sections


HEADER = ["workload", "client", "zabby", "ZooKeeper 3.8", "zabby ÷ ZK", "zabby CPU s server / clients", "ZK CPU s server / clients", "window s"]


def markdown_table(rows: list[list[str]], header: list[str] = HEADER) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def print_side_by_side(records: list[dict[str, Any]], workload_order: list[str]) -> str:
    out = []
    for deployment, rows in side_by_side(records, workload_order):
        out.append(f"\n### {deployment}\n")
        out.append(markdown_table(rows))
    text = "\n".join(out)
    print(text)
    return text


def resync_table(records: list[dict[str, Any]]) -> str:
    rows = []
    for rec in records:
        if rec.get("kind") != "resync":
            continue
        if "error" in rec:
            rows.append([rec["system"], f"{rec['behind']:,}", "failed", rec["error"][:80], "", ""])
            continue
        rows.append([rec["system"], f"{rec['behind']:,} × 1 KB", f"{rec['seconds']:.2f} s", rec["mode"],
                     f"{rec['fill_rate']:,.0f} creates/s", f"{rec['leader_cpu_s']:.1f} / {rec['follower_cpu_s']:.1f}"])  # fmt: skip
    if not rows:
        return ""
    return markdown_table(rows, ["system", "follower behind by", "catch-up time", "sync", "fill rate (Java client)", "CPU s leader / restarted follower"])


def leads_and_trails(records: list[dict[str, Any]], workload_order: list[str]) -> tuple[list[str], list[str], list[tuple[float, str, str]]]:
    """Workloads zabby leads / trails on (by the Java client's ratio, both deployments)."""
    by_key = keyed(records)
    leads: list[str] = []
    trails: list[str] = []
    all_ratios: list[tuple[float, str, str]] = []
    for deployment in ("standalone", "3-server"):
        for workload in workload_order:
            for driver in ("java", "kazoo"):
                for layout in LAYOUTS:
                    zab, zk = by_key.get((deployment, driver, layout, workload, "zabby")), by_key.get((deployment, driver, layout, workload, "zookeeper"))
                    r = ratio(zab, zk)
                    if r is None:
                        continue
                    label = f"{workload} ({deployment}, {client_label(driver, layout, zab)}): {r:.2f}×"
                    all_ratios.append((r, workload + (" spread" if layout == "spread" else ""), deployment + "/" + driver))
                    (leads if r >= 1.0 else trails).append(label)
    return leads, trails, sorted(all_ratios)


# -- plots --------------------------------------------------------------------------------


def plots(records: list[dict[str, Any]], out_dir: Path) -> list[str]:
    """PNG files written (names relative to out_dir); none when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plots", file=sys.stderr)
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    colour = {"zabby": "tab:blue", "zookeeper": "tab:orange"}
    style = {"standalone": "-", "3-server": "--"}

    scaling = [r for r in records if r.get("series") == "scaling" and "rate" in r]
    if scaling:
        workloads = sorted({r["workload"] for r in scaling}, key=lambda w: ["create-100B", "getData"].index(w) if w in ("create-100B", "getData") else 9)
        fig, axes = plt.subplots(1, len(workloads), figsize=(5.5 * len(workloads), 4), squeeze=False)
        for ax, workload in zip(axes[0], workloads):
            series: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
            for r in scaling:
                if r["workload"] == workload:
                    series[(r["system"], r["deployment"])].append((r["procs"] * r["conns"], r["rate"]))
            for (system, deployment), points in sorted(series.items()):
                points.sort()
                ax.plot([p[0] for p in points], [p[1] for p in points], style.get(deployment, "-"), marker="o",
                        color=colour[system], label=f"{system} {deployment}")  # fmt: skip
            ax.set_title(f"{workload}, Java client (16 outstanding / connection)")
            ax.set_xlabel("client connections (4 per client process)")
            ax.set_ylabel("ops/s")
            ax.set_xscale("log", base=2)
            ticks = sorted({p[0] for points in series.values() for p in points})
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.minorticks_off()
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend()
        fig.tight_layout()
        fig.savefig(out_dir / "throughput_vs_clients.png", dpi=110)
        plt.close(fig)
        written.append("throughput_vs_clients.png")

    latency = [r for r in keyed(records).values() if r.get("kind") == "latency" and r.get("cdf_ms")]
    if latency:
        fig, axes = plt.subplots(1, 3, figsize=(17, 4.5), squeeze=False)
        for ax, workload in zip(axes[0], ("latency-write", "latency-set", "latency-read")):
            for r in latency:
                if r["workload"] != workload:
                    continue
                cdf = r["cdf_ms"]
                ys = [i / (len(cdf) - 1) for i in range(len(cdf))]
                dash = {"java": "-", "kazoo": ":", "zabby-msgpack": "-."}[r["driver"]]
                width = 2.0 if r["deployment"] == "standalone" else 1.0
                ax.plot(cdf, ys, dash, linewidth=width, color=colour[r["system"]], label=f"{r['system']} {r['deployment']}, {DRIVER_LABEL[r['driver']]}")
            ax.set_xscale("log")
            ax.set_title(f"{workload}: one request at a time")
            ax.set_xlabel("latency (ms, log)")
            ax.set_ylabel("fraction of requests")
            ax.grid(alpha=0.3, which="both")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out_dir / "latency_cdf.png", dpi=110)
        plt.close(fig)
        written.append("latency_cdf.png")

    _, _, all_ratios = leads_and_trails(records, list(dict.fromkeys(r["workload"] for r in main_records(records))))
    java = [(r, w, d) for r, w, d in all_ratios if d.endswith("/java")]
    if java:
        java.sort(key=lambda x: (x[2], x[1]))
        fig, ax = plt.subplots(figsize=(8, 0.3 * len(java) + 1.2))
        labels = [f"{w} ({d.split('/')[0]})" for _, w, d in java]
        values = [r for r, _, _ in java]
        ax.barh(labels, values, color=["tab:green" if v >= 1 else "tab:red" for v in values])
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("zabby ÷ ZooKeeper (>1: zabby better; Java client)")
        ax.invert_yaxis()
        ax.grid(alpha=0.3, axis="x", which="both")
        fig.tight_layout()
        fig.savefig(out_dir / "ratios.png", dpi=110)
        plt.close(fig)
        written.append("ratios.png")
    return written


# -- profiles -----------------------------------------------------------------------------

_LINE = re.compile(r":\d+\)$")


def summarise_profile(raw_path: Path, top: int = 12) -> dict[str, Any]:
    """py-spy's raw (collapsed) stacks: % of samples by file (self), by function (self), and
    zabby functions inclusive."""
    self_file: Counter[str] = Counter()
    self_func: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw_path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [_LINE.sub(")", frame) for frame in stack.split(";")]
        leaf = frames[-1]
        self_func[leaf] += count
        match = re.search(r"\((.*)\)$", leaf)
        self_file[_short_file(match.group(1)) if match else leaf] += count
        for frame in set(frames):
            if "zabby/" in frame:
                incl[frame] += count
    if not total:
        return {"samples": 0}

    def pct(counter: Counter[str]) -> list[tuple[str, float]]:
        # ties by name: the counters fill in set order, which changes with the hash seed
        ranked = sorted(counter.items(), key=lambda item: (-item[1], item[0]))[:top]
        return [(_short_frame(name), round(100 * n / total, 1)) for name, n in ranked]

    # the frames every sample goes through (main, the serve loop) say nothing: leave them out
    inclusive = Counter({name: n for name, n in incl.items() if n < 0.9 * total and not name.startswith(("<module> (", "main ("))})
    return {"samples": total, "self_by_file": pct(self_file), "self_by_function": pct(self_func), "inclusive_zabby": pct(inclusive)}


def _short_file(path: str) -> str:
    for marker in ("site-packages/", "/lib/python3", "/work/main/"):
        if marker in path:
            tail = path.split(marker, 1)[1]
            return tail.split("/", 1)[1] if marker == "/lib/python3" and "/" in tail else tail
    return path


def _short_frame(frame: str) -> str:
    match = re.match(r"(.*) \((.*)\)$", frame)
    return f"{match.group(1)} ({_short_file(match.group(2))})" if match else frame
