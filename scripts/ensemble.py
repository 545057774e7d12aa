#!/usr/bin/env python3
"""Run a local zabby ensemble on 127.0.0.1, each server's data and log under run/ensemble/.

    python scripts/ensemble.py start 3     # servers 1..3 (conf/zoo1.cfg..zoo3.cfg for 3; generated for more)
    python scripts/ensemble.py status      # mode, zxid and connections of each server
    python scripts/ensemble.py kill 2      # SIGKILL server 2
    python scripts/ensemble.py restart 2   # start server 2 again (same data)
    python scripts/ensemble.py stop        # SIGTERM every server
    python scripts/ensemble.py hosts       # the client connect string
    python scripts/ensemble.py add 4       # start server 4 and reconfigure it into the running ensemble
    python scripts/ensemble.py remove 2    # reconfigure server 2 out, then stop it

Every server runs with ``reconfigEnabled=true`` and the super user ``super:zabby`` (a
``superDigest``), which ``add`` and ``remove`` authenticate as; ``zabby-cli`` can too
(``addauth digest super:zabby``).  A server ``add`` starts lists the current members and itself
(it syncs as a non-voting follower until the reconfig adds it).  A server whose zoo.cfg a
reconfig rewrote (it names a ``dynamicConfigFile``) keeps it across ``restart`` and ``start``.

ZABBY_ENSEMBLE_DIR (default run/ensemble) and ZABBY_ENSEMBLE_BASE_PORT (default 2180: server N's
client port is base+N, quorum port base+707+N, election port base+1707+N, admin port
base+5899+N) put a second ensemble beside the first.
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

from zabby import SyncClient  # noqa: E402
from zabby.client.security import make_digest_acl_credential  # noqa: E402
from zabby.membership import Membership  # noqa: E402
from zabby.local import four_letter, process_alive  # noqa: E402

RUN = Path(os.environ.get("ZABBY_ENSEMBLE_DIR", ROOT / "run" / "ensemble")).resolve()
STATE = RUN / "servers.json"
BASE_PORT = int(os.environ.get("ZABBY_ENSEMBLE_BASE_PORT", "2180"))
SUPER_USER = ("super", "zabby")  # add and remove reconfigure as this user
RECONFIG_LINES = ["reconfigEnabled=true", f"superDigest={make_digest_acl_credential(*SUPER_USER)}"]


def client_port(sid: int) -> int:
    return BASE_PORT + sid


def server_line(sid: int) -> str:
    """Server ``sid``'s ``server.N=`` line (a participant on this machine)."""
    return f"server.{sid}=127.0.0.1:{BASE_PORT + 707 + sid}:{BASE_PORT + 1707 + sid};127.0.0.1:{client_port(sid)}"


def write_config(sid: int, size: int, members: list[str] | None = None) -> Path:
    """conf/zoo<sid>.cfg when it matches the size (and the ports are the default ones), else a
    generated config of the same shape; ``members`` are the ``server.N=`` lines to list
    instead of servers 1..size.  A zoo.cfg a reconfig rewrote is kept as it is."""
    folder = RUN / f"server{sid}"
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "data" / "myid").write_text(f"{sid}\n")
    path = folder / "zoo.cfg"
    if path.exists() and "dynamicConfigFile=" in path.read_text():
        return path
    source = ROOT / "conf" / f"zoo{sid}.cfg"
    if size == 3 and members is None and BASE_PORT == 2180 and source.exists():
        text = source.read_text().replace(f"../run/ensemble/server{sid}/data", str(folder / "data"))
        text += "".join(line + "\n" for line in RECONFIG_LINES)
    else:
        lines = [
            "tickTime=2000", "initLimit=10", "syncLimit=5", f"dataDir={folder / 'data'}",
            f"clientPort={client_port(sid)}", "clientPortAddress=127.0.0.1", "admin.serverAddress=127.0.0.1",
            f"admin.serverPort={BASE_PORT + 5899 + sid}", "4lw.commands.whitelist=*", *RECONFIG_LINES,
        ] + (members if members is not None else [server_line(n) for n in range(1, size + 1)])  # fmt: skip
        text = "\n".join(lines) + "\n"
    path.write_text(text)
    return path


def load_state() -> dict[str, dict[str, int]]:
    return json.loads(STATE.read_text()) if STATE.exists() else {}


def save_state(state: dict[str, dict[str, int]]) -> None:
    RUN.mkdir(parents=True, exist_ok=True)
    STATE.write_text(json.dumps(state, indent=2))


def launch(sid: int, size: int, members: list[str] | None = None) -> int:
    config = write_config(sid, size, members)
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


def admin_client(state: dict[str, dict[str, int]], excluding: int | None = None) -> SyncClient:
    """A session as the super user on the running servers (but ``excluding``)."""
    hosts = ",".join(f"127.0.0.1:{client_port(int(s))}" for s in sorted(state, key=int) if int(s) != excluding)
    client = SyncClient(hosts, timeout=10.0, auth_data=[("digest", ":".join(SUPER_USER))])
    client.start(timeout=30)
    return client


def add(state: dict[str, dict[str, int]], sid: int) -> int:
    """Start server ``sid`` with the current members and itself, then reconfigure it in."""
    entry = state.get(str(sid))
    if entry and process_alive(entry["pid"]):
        print(f"server {sid} is already running (pid {entry['pid']})", file=sys.stderr)
        return 2
    if not state:
        print("no ensemble is running: start one first", file=sys.stderr)
        return 2
    with admin_client(state) as client:
        current = Membership.parse(client.get_config()[0].decode())
        if sid in current.sids:
            print(f"server {sid} is a member already", file=sys.stderr)
            return 2
        members = [f"server.{m.sid}={m.spec()}" for m in current.members] + [server_line(sid)]
        state[str(sid)] = {"pid": launch(sid, len(members), members), "size": len(members)}
        save_state(state)
        if not wait_serving([sid], 60.0):
            print(f"server {sid} did not sync with the ensemble; see {RUN / f'server{sid}' / 'server.log'}", file=sys.stderr)
            return 1
        data, _ = client.reconfig(server_line(sid), None, None, current.version)
    print(f"server {sid} added; committed new configuration:\n{data.decode()}", end="")
    return 0


def remove(state: dict[str, dict[str, int]], sid: int) -> int:
    """Reconfigure server ``sid`` out, then stop it."""
    entry = state.get(str(sid))
    if entry is None:
        print(f"no server {sid} in {STATE}", file=sys.stderr)
        return 2
    with admin_client(state, excluding=sid) as client:
        data, _ = client.reconfig(None, str(sid), None)
    if process_alive(entry["pid"]):
        os.kill(entry["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 10
        while process_alive(entry["pid"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        if process_alive(entry["pid"]):
            os.kill(entry["pid"], signal.SIGKILL)
    del state[str(sid)]
    save_state(state)
    print(f"server {sid} removed and stopped; committed new configuration:\n{data.decode()}", end="")
    return 0


def main() -> int:  # noqa: C901 -- one branch per subcommand
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["start", "stop", "status", "kill", "restart", "hosts", "add", "remove"])
    parser.add_argument("n", nargs="?", type=int, help="ensemble size (start) or server id (kill, restart, add, remove)")
    args = parser.parse_args()
    state = load_state()
    if args.command in ("add", "remove"):
        if args.n is None:
            parser.error(f"{args.command} needs a server id")
        return add(state, args.n) if args.command == "add" else remove(state, args.n)
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
