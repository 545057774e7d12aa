#!/usr/bin/env python3
"""Run a local zabby ensemble on 127.0.0.1, each server's data and log under run/ensemble/.

    python scripts/ensemble.py start 3     # servers 1..3 (conf/zoo1.cfg..zoo3.cfg for 3; generated for more)
    python scripts/ensemble.py status      # mode, zxid and connections of each server
    python scripts/ensemble.py kill 2      # SIGKILL server 2
    python scripts/ensemble.py restart 2   # start server 2 again (same data)
    python scripts/ensemble.py stop        # SIGTERM every server
    python scripts/ensemble.py hosts       # the client connect string
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zabby.local import four_letter, process_alive  # noqa: E402

RUN = ROOT / "run" / "ensemble"
STATE = RUN / "servers.json"


def client_port(sid: int) -> int:
    return 2180 + sid


def write_config(sid: int, size: int) -> Path:
    """conf/zoo<sid>.cfg when it matches the size, else a generated config of the same shape."""
    folder = RUN / f"server{sid}"
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "data" / "myid").write_text(f"{sid}\n")
    source = ROOT / "conf" / f"zoo{sid}.cfg"
    if size == 3 and source.exists():
        text = source.read_text().replace(f"../run/ensemble/server{sid}/data", str(folder / "data"))
    else:
        lines = [
            "tickTime=2000", "initLimit=10", "syncLimit=5", f"dataDir={folder / 'data'}",
            f"clientPort={client_port(sid)}", "clientPortAddress=127.0.0.1", "admin.serverAddress=127.0.0.1",
            f"admin.serverPort={8079 + sid}", "4lw.commands.whitelist=*",
        ] + [f"server.{n}=127.0.0.1:{2887 + n}:{3887 + n};127.0.0.1:{client_port(n)}" for n in range(1, size + 1)]  # fmt: skip
        text = "\n".join(lines) + "\n"
    path = folder / "zoo.cfg"
    path.write_text(text)
    return path


def load_state() -> dict[str, dict[str, int]]:
    return json.loads(STATE.read_text()) if STATE.exists() else {}


def save_state(state: dict[str, dict[str, int]]) -> None:
    RUN.mkdir(parents=True, exist_ok=True)
    STATE.write_text(json.dumps(state, indent=2))


def launch(sid: int, size: int) -> int:
    config = write_config(sid, size)
    log = open(RUN / f"server{sid}" / "server.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "zabby.server.main", str(config)], stdout=log,
                            stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)  # fmt: skip
    return proc.pid


def status(state: dict[str, dict[str, int]]) -> list[tuple[int, str, str, str]]:
    rows = []
    for sid_text, entry in sorted(state.items(), key=lambda kv: int(kv[0])):
        sid = int(sid_text)
        try:
            fields = dict(line.split(": ", 1) for line in four_letter(client_port(sid), "srvr").splitlines() if ": " in line)
            rows.append((sid, fields.get("Mode", "not serving"), fields.get("Zxid", "-"), fields.get("Connections", "-")))
        except OSError:
            rows.append((sid, "down" if not process_alive(entry["pid"]) else "starting", "-", "-"))
    return rows


def wait_serving(sids: list[int], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        modes = {sid: mode for sid, mode, _, _ in status(load_state()) if sid in sids}
        if all(mode in ("leader", "follower", "observer") for mode in modes.values()):
            return True
        time.sleep(0.1)
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["start", "stop", "status", "kill", "restart", "hosts"])
    parser.add_argument("n", nargs="?", type=int, help="ensemble size (start) or server id (kill, restart)")
    args = parser.parse_args()
    state = load_state()
    if args.command == "start":
        size = args.n or 3
        for sid in range(1, size + 1):
            entry = state.get(str(sid))
            if entry and process_alive(entry["pid"]):
                print(f"server {sid} is already running (pid {entry['pid']})")
                continue
            state[str(sid)] = {"pid": launch(sid, size), "size": size}
        save_state(state)
        ok = wait_serving(list(range(1, size + 1)))
        for row in status(state):
            print("server %d: %-11s zxid %-14s connections %s" % row)
        print("hosts:", ",".join(f"127.0.0.1:{client_port(s)}" for s in range(1, size + 1)))
        return 0 if ok else 1
    if args.command in ("kill", "restart"):
        entry = state.get(str(args.n))
        if entry is None:
            print(f"no server {args.n} in {STATE}", file=sys.stderr)
            return 2
        if args.command == "kill":
            if process_alive(entry["pid"]):
                os.kill(entry["pid"], signal.SIGKILL)
            print(f"killed server {args.n} (pid {entry['pid']})")
        else:
            if process_alive(entry["pid"]):
                os.kill(entry["pid"], signal.SIGKILL)
                time.sleep(0.2)
            entry["pid"] = launch(args.n, entry["size"])
            save_state(state)
            print(f"restarted server {args.n} (pid {entry['pid']})")
        return 0
    if args.command == "stop":
        for entry in state.values():
            if process_alive(entry["pid"]):
                os.kill(entry["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 10
        while any(process_alive(e["pid"]) for e in state.values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        for entry in state.values():
            if process_alive(entry["pid"]):
                os.kill(entry["pid"], signal.SIGKILL)
        save_state({})
        print("stopped")
        return 0
    if args.command == "hosts":
        print(",".join(f"127.0.0.1:{client_port(int(s))}" for s in sorted(state, key=int)))
        return 0
    for row in status(state):
        print("server %d: %-11s zxid %-14s connections %s" % row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
