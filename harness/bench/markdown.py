"""docs/benchmarks.md from the records in one folder (docs/bench): ``results.jsonl`` (the
--full run), ``scale.jsonl`` (the --scale run) and ``profile-write-<label>.json`` (each
--profile-write run), plus the hand-written docs/bench/notes.md.  ``rebuild`` makes it again
from those files without measuring anything.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from harness.bench import report
from harness.bench.goals import goals_table, scale_tables
from harness.bench.profiling import load_profiles
from harness.bench.runner import SHAPES, SPREAD, SPREAD_WORKLOADS, WORKLOADS, Limits
from harness import CHECKOUT



def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def method(limits: Limits, zk_heap: str) -> list[str]:
    return [
        "* Every system is started by the script on 127.0.0.1 in a temporary folder: zabby "
        f"(`python -m zabby.server.main zoo.cfg`) and ZooKeeper (`java -Xmx{zk_heap} -cp zookeeper.jar:... QuorumPeerMain zoo.cfg`, "
        "Debian's jars), standalone and 3-server, the same zoo.cfg settings for both: `tickTime=2000`, `snapCount=100000`, "
        "`forceSync=yes` (every write fsynced before it is acknowledged), `maxClientCnxns=0`, 4lw enabled, AdminServer off.",
        "* Both systems run side by side, fresh for each client library; each workload runs on one and then the other. "
        "Before the first, each system gets one unmeasured run of the first throughput workload (a warm-up: ZooKeeper's "
        "JVM compiles its request path in its first seconds under load; records of series `warmup`, left out of every table).",
        *([f"* Rows the goals read (one at a time through kazoo and the Java client; pipelined through the Java client where a "
           f"throughput goal applies) are measured in {limits.rounds} rounds, the two systems' order reversed each round; such a row "
           "shows its median round (of an even number, the worse of the middle two, for both systems alike) and the range of all of them."]
          if limits.rounds > 1 else []),
        f"* Throughput: several client processes × connections × outstanding requests (Java client "
        f"{SHAPES['java'].procs}×{SHAPES['java'].conns}×{SHAPES['java'].inflight}, kazoo and zabby's msgpack Client "
        f"{SHAPES['kazoo'].procs}×{SHAPES['kazoo'].conns}×{SHAPES['kazoo'].inflight}; connection i of process p on server "
        f"(p·conns + i) mod n), each run bounded by {limits.seconds:g} s and {limits.ops:,} ops ({limits.create_ops:,} for creates); "
        "value 100 B unless said. The processes meet at a barrier after their set-up, so the window holds load only.",
        f"* Spread layout (rows \"Java client, {SPREAD.procs}×{SPREAD.conns}×{SPREAD.inflight} spread\", for {', '.join(SPREAD_WORKLOADS)}): "
        f"{SPREAD.procs} Java client processes, each with one connection and {SPREAD.inflight} requests in flight, each given every "
        "server as its connect string, process p's list starting at server p mod n (the spread ZooKeeper's shuffled host list "
        "gives on average, without its luck). `placement` in the records says where each connection was.",
        f"* Latency: one connection on a follower (3-server) or the server, one request at a time, {limits.latency_ops:,} requests "
        f"(at most {limits.latency_seconds:g} s): p50 / p99 / p999; create (latency-write), setData (latency-set), getData (latency-read).",
        f"* Session churn: {limits.churn_threads} threads per client process, each connecting, creating an ephemeral and closing, in a loop.",
        f"* Watch fan-out: {limits.watchers} connections each hold a data watch on one node (re-armed after every event); "
        f"{limits.watch_rounds} times, once `wchs` shows every watch armed, another client sets the node; the time from the "
        "setData call until the last watcher got its event (monotonic clock shared by all processes): p50 / p99 over the rounds.",
        "* Resync: in a 3-server ensemble (`commitLogCount=500` in zabby, ZooKeeper's default 500 and `snapshotSizeFactor` 0.33) "
        "1,000 small znodes are written and the follower is let catch up, then it is killed (SIGKILL), N 1 KB znodes are written, "
        "the follower is restarted; the time until its `mntr` znode count reaches the leader's. DIFF or SNAP from the leader's "
        "`zk_diff_count`/`zk_snap_count`.",
        "* The clients all speak ZooKeeper's wire protocol to both systems (zabby's jute codec): ZooKeeper's own async Java client "
        "(`harness/bench/ZkLoad.java`, compiled at run time against Debian's `libzookeeper-java`) and kazoo; zabby is also "
        "measured through its own msgpack Client (no ZooKeeper column there).",
        "* CPU seconds: the servers' utime+stime from `/proc/<pid>/stat` over the run, and the client processes' own "
        "(getrusage / the JVM's process CPU time). On 2 cores, a side using ~1 CPU s per window second per process "
        "(Python is single-threaded) or ~2 in total is the bottleneck.",
        "* **zabby ÷ ZK** is > 1 when zabby is better: throughput zabby/ZooKeeper; latency and fan-out ZooKeeper p50 / zabby p50.",
    ]


SCALE_METHOD = (
    "One system at a time (never both ensembles at once), 3 servers started fresh: 1,000 znodes written, throughput measured "
    "(getData, setData, create-100B; Java client, spread layout), then the baseline: every server's RSS (VmRSS) and, for ZooKeeper, "
    "the live heap (`jcmd <pid> GC.class_histogram`: a full GC, then the bytes of all live objects) and the heap used after that "
    "GC (`jcmd GC.heap_info`); RSS is read before any forced GC. One follower is killed (SIGKILL) and the znodes (100 B each, "
    "`/scale/d<i div 1000>/n<i mod 1000>`) are written through the other two. The same figures again on the leader and the "
    "live follower: per znode = growth ÷ znodes added. zabby has no separate live heap: its figure is the RSS growth, which is "
    "what the process costs the machine. Then the stopped follower is started (resync: process start until it serves as a "
    "follower at the leader's zxid), the other follower is killed and started again (restart: its newest snapshot loaded, the "
    "log after it replayed, a DIFF of nothing from the leader, until it serves at the leader's zxid), and the throughput is "
    "measured again with the tree large. For ZooKeeper the RSS is read again after the forced GC (G1 may give heap back). Last, "
    "zabby's Python heap: a separate process recovers the restarted follower's data dir under tracemalloc (objects alive ÷ "
    "znodes). Both systems with the same zoo.cfg as the other tables (tickTime 2000, snapCount 100000 — the default —, "
    "forceSync yes; zabby's commitLogCount 500, ZooKeeper's default); ZooKeeper with `-Xmx` as said."
)


def scale_method(meta: dict[str, Any]) -> str:
    """SCALE_METHOD for one --scale run: its ZooKeeper heap and its throughput windows."""
    text = SCALE_METHOD.replace("`-Xmx` as said", f"`-Xmx{meta.get('zk_heap', '4g')}`")
    limits = meta.get("limits")
    if limits:
        text += (f" Each throughput run is bounded by {limits['seconds']:g} s and {limits['ops']:,} ops ({limits['create_ops']:,} for "
                 "creates, so that the small tree stays small); a ratio of tree sizes is the mean of the large tree's rates over the mean of the small one's.")  # fmt: skip
    return text


def profile_section(profiles: list[dict[str, Any]], prefix: str) -> list[str]:
    """One write, each label (before / after ...) side by side."""
    if not profiles:
        return []
    lines = ["## Profile of one write", "",
             "`python scripts/bench.py --profile-write --profile-label LABEL [--zabby-root CHECKOUT]`: one-at-a-time creates of 100 B "
             "(Java client) on a fresh zabby, first without a profiler (latency, server CPU per write: all servers' CPU over the window "
             "÷ writes), then with py-spy at 200 Hz on each server on the write's path. The icicle graphs show the GIL holder "
             "(Python CPU) and every non-idle thread (fsync in the disk threads too).", ""]  # fmt: skip
    rows = []
    for result in profiles:
        for deployment, data in result["deployments"].items():
            plain = data["plain"]
            by_mode = ", ".join(f"{mode} {ms:.3f}" for mode, ms in plain.get("server_cpu_per_write_ms_by_mode", {}).items())
            graphs = " ".join(f"[{role}{'' if kind == 'gil' else ' (threads)'}]({prefix}/{files[kind]['svg']})"
                              for role, files in data["profiles"].items() for kind in ("gil", "threads") if files.get(kind, {}).get("svg"))  # fmt: skip
            rows.append([result["label"], str(result.get("zabby_commit")), deployment, f"{plain['p50_ms']:.3f} / {plain['p99_ms']:.3f} ms",
                         f"{plain['server_cpu_per_write_ms']:.3f} ms ({by_mode})", f"{result['load_at_start']:.2f}", graphs])  # fmt: skip
    lines += [report.markdown_table(rows, ["label", "zabby", "deployment", "p50 / p99", "server CPU per write", "load", "icicle graphs"]), ""]
    for result in profiles:
        for deployment, data in result["deployments"].items():
            for role, files in data["profiles"].items():
                entries = files.get("gil", {}).get("summary", {}).get("self_by_function", [])[:10]
                if entries:
                    lines += [f"{result['label']}, {deployment} {role}, GIL holder, self time:", ""]
                    lines += [f"* {pct:.1f}% {name}" for name, pct in entries] + [""]
    return lines


def probe_lines(machine: dict[str, Any]) -> list[str]:
    """The speed probes (``report.speed_probe``) at the start and the end, if the run made them."""
    start, end = machine.get("probe_at_start"), machine.get("probe_at_end")
    if not start or not end:
        return []
    return [f"* Speed probes, the same fixed work in every run (to tell a slower machine or day from a slower server): a pure-Python "
            f"loop {start['python_loop_ms']:.0f} ms at the start and {end['python_loop_ms']:.0f} ms at the end; the fdatasync of a 180 B "
            f"append p50 {start['fdatasync_us']} µs and {end['fdatasync_us']} µs"]


def write_report(path: Path, out_dir: Path, meta: dict[str, Any], records: list[dict[str, Any]], trailing: dict[str, dict[str, Any]]) -> None:
    """docs/benchmarks.md (or ``path``) from the run's records and what lies in ``out_dir``."""
    try:
        prefix = out_dir.relative_to(path.parent).as_posix()
    except ValueError:
        prefix = out_dir.as_posix()
    machine, limits, workloads = meta["machine"], Limits(**meta["limits"]), meta["workloads"]
    scale = read_records(out_dir / "scale.jsonl")
    scale_meta = next((r for r in reversed(scale) if r.get("kind") == "meta"), None)
    commands = meta.get("commands", [meta["command"]])
    lines = ["# Benchmarks: zabby vs Apache ZooKeeper 3.8", "",
             "<!-- generated by scripts/bench.py; hand-written commentary lives in docs/bench/notes.md and is included below -->", "",
             f"Produced by `{commands[0]}` ({meta['minutes']:.0f} minutes)" + (" and a second run (see the notes on this run)" if len(commands) > 1 else "")
             + f", zabby {machine.get('zabby_commit', '?')}"
             + (f"; the scale tables by `{scale_meta['command']}` ({scale_meta['minutes']:.0f} minutes)" if scale_meta else "") + ".", "",
             "## Machine", "",
             f"* {machine.get('cores')} cores ({machine.get('cpu', '?')}), {machine.get('ram_gib')} GiB RAM, Linux {machine.get('kernel')}",
             f"* Python {machine.get('python')}; {machine.get('java', 'java ?')}; Debian zookeeper {machine.get('zookeeper', '?')}",
             f"* 1-minute load average {machine.get('load_at_start', -1):.2f} at the start, {machine.get('load_at_end', -1):.2f} at the end"
             + ("" if machine.get("quiet") else " — **the machine was not quiet** (other work was running; absolute numbers are low and noisy, "
                "the ratios less so since both systems ran side by side, alternating workload by workload)"),
             *probe_lines(machine), "", "## Method", "", *method(limits, meta.get("zk_heap") or "512m"), ""]  # fmt: skip
    if meta["notes"]:
        lines += ["## Notes on this run", ""] + [f"* {note}" for note in meta["notes"]] + [""]
    goals = goals_table(records, scale)
    if goals:
        lines += ["## Goals", "", "The issue's targets against this run (ratios > 1 are zabby's lead).", "", goals, ""]
    table = report.print_side_by_side(records, workloads)
    lines += ["## Results", "", "Throughput in ops/s; latency p50 / p99 / p999; fan-out p50 / p99. "
              "CPU s: server / client processes over the run (window s: zabby/ZK wall time of the run).", table, ""]  # fmt: skip
    resync_md = report.resync_table(records)
    if resync_md:
        lines += ["### Follower resync (3-server)", "", resync_md, ""]
    if scale_meta:
        lines += [f"## Scale: {scale_meta.get('znodes', 0):,} znodes on 3 servers", "", scale_method(scale_meta), "",
                  f"Load average {scale_meta['machine'].get('load_at_start', -1):.2f} at the start, {scale_meta['machine'].get('load_at_end', -1):.2f} at the end.", "",
                  scale_tables(scale), ""]  # fmt: skip
    plots = report.plots(records, out_dir)
    for name, title in (("ratios.png", "zabby ÷ ZooKeeper per workload (Java client)"), ("throughput_vs_clients.png", "Throughput vs client count"),
                        ("latency_cdf.png", "Latency CDFs (one request at a time)")):  # fmt: skip
        if name in plots:
            lines += [f"### {title}", "", f"![{title}]({prefix}/{name})", ""]
    leads, trails, _ = report.leads_and_trails(records, workloads)
    lines += ["## Where zabby leads and trails", "", "Leads (ratio ≥ 1): " + ("; ".join(leads) if leads else "none") + ".", "",
              "Trails: " + ("; ".join(trails) if trails else "none") + ".", ""]  # fmt: skip
    lines += profile_section(load_profiles(out_dir), prefix)
    lines += trailing_section(trailing, prefix)
    notes_file = CHECKOUT / "docs" / "bench" / "notes.md"
    if notes_file.exists() and path.resolve() == (CHECKOUT / "docs" / "benchmarks.md").resolve():
        lines += [notes_file.read_text().rstrip(), ""]
    lines += ["## Reproduce", "", "```", "pip install -e '.[test,bench]'", *commands] + ([scale_meta["command"]] if scale_meta else []) + ["```", "",
              f"Raw records: `{prefix}/results.jsonl`" + (f" and `{prefix}/scale.jsonl`" if scale_meta else "") + " (one JSON line per run).", ""]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def trailing_section(profiles: dict[str, dict[str, Any]], prefix: str) -> list[str]:
    if not profiles:
        return []
    lines = ["## Profiles of the zabby server where it trails most", "",
             "py-spy (`py-spy record --nonblocking -r 200 -f raw`) attached to the zabby standalone server for the window of "
             "a fresh run of the workload with the Java client; % of samples (idle time in epoll is not sampled).", ""]  # fmt: skip
    for workload, summary in profiles.items():
        stem = f"{prefix}/profile-{workload.replace('/', '-')}"
        lines += [f"### {workload}", "",
                  f"Raw stacks: `{stem}.txt` (every non-idle thread, {summary.get('samples', 0)} samples; fsync in trio's "
                  f"worker threads shows here) and `{stem}-gil.txt` (only the thread holding the GIL: Python CPU time, "
                  f"{summary.get('gil', {}).get('samples', 0)} samples).", ""]  # fmt: skip
        gil = summary.get("gil", {})
        rows = [("self time by file, GIL holder", gil.get("self_by_file")), ("self time by function, GIL holder", gil.get("self_by_function")),
                ("inclusive, zabby frames, GIL holder", gil.get("inclusive_zabby")), ("self time by function, all non-idle threads", summary.get("self_by_function"))]  # fmt: skip
        for title, entries in rows:
            if entries:
                lines += [f"{title}:", ""] + [f"* {pct:.1f}% {name}" for name, pct in entries[:10]] + [""]
    return lines


def trailing_profiles(out_dir: Path, workloads: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """The --full run's profiles of the trailing workloads: summaries of ``profile-<workload>.txt``
    and ``-gil.txt`` (written next to them as ``.json``), or the ``.json`` alone."""
    profiles = {}
    for workload in workloads if workloads is not None else list(WORKLOADS):
        stem = out_dir / f"profile-{workload.replace('/', '-')}"
        raw, summary = stem.with_suffix(".txt"), stem.with_suffix(".json")
        if raw.exists():
            profiles[workload] = report.summarise_profile(raw)
            gil = stem.with_name(stem.name + "-gil.txt")
            if gil.exists():
                profiles[workload]["gil"] = report.summarise_profile(gil)
            summary.write_text(json.dumps(profiles[workload], indent=1))
        elif summary.exists():
            profiles[workload] = json.loads(summary.read_text())
    return profiles


def rebuild(records_path: Path, out_dir: Path, report_path: Path) -> int:
    """The table, plots and report again from a run's records (e.g. after editing docs/bench/notes.md)."""
    records = read_records(records_path)
    meta = next((r for r in reversed(records) if r.get("kind") == "meta"), None)
    if meta is None:
        print(f"{records_path} has no meta record (an interrupted run?)", file=sys.stderr)
        return 2
    write_report(report_path, out_dir, meta, records, trailing_profiles(records_path.parent))
    print(f"report: {report_path}")
    return 0
