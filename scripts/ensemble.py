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
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: its harness/ is not installed

from harness import CHECKOUT
from zabby import SyncClient
from zabby.client.fourletter import srvr
from zabby.client.security import make_digest_acl_credential
from zabby.membership import Membership
from zabby.testing.ensembles import QUORUM_LIMITS, Member
from zabby.testing.processes import kill_pids, launch_server, local_settings, process_alive, stop_pids, wait_serving, write_config, write_myid

RUN = Path(os.environ.get("ZABBY_ENSEMBLE_DIR", CHECKOUT / "run" / "ensemble")).resolve()
STATE = RUN / "servers.json"
BASE_PORT = int(os.environ.get("ZABBY_ENSEMBLE_BASE_PORT", "2180"))
SUPER_USER = ("super", "zabby")  # add and remove reconfigure as this user
RECONFIG_SETTINGS = {"reconfigEnabled": "true", "superDigest": make_digest_acl_credential(*SUPER_USER)}

State = dict[str, dict[str, int]]  # server id -> {"pid": ..., "size": ...}


def client_port(sid: int) -> int:
    return BASE_PORT + sid


def server_line(sid: int) -> str:
    """Server ``sid``'s ``server.N=`` line (a participant on this machine)."""
    return Member(sid, BASE_PORT + 707 + sid, BASE_PORT + 1707 + sid, client_port(sid)).line()


def folder_of(sid: int) -> Path:
    return RUN / f"server{sid}"


def config_for(sid: int, size: int, members: list[str] | None = None) -> Path:
    """conf/zoo<sid>.cfg when it matches the size (and the ports are the default ones), else a
    generated config of the same shape; ``members`` are the ``server.N=`` lines to list
    instead of servers 1..size.  A zoo.cfg a reconfig rewrote is kept as it is."""
    folder = folder_of(sid)
    write_myid(folder / "data", sid)
    path = folder / "zoo.cfg"
    if path.exists() and "dynamicConfigFile=" in path.read_text():
        return path
    source = CHECKOUT / "conf" / f"zoo{sid}.cfg"
    if size == 3 and members is None and BASE_PORT == 2180 and source.exists():
        text = source.read_text().replace(f"../run/ensemble/server{sid}/data", str(folder / "data"))
        path.write_text(text + "".join(f"{key}={value}\n" for key, value in RECONFIG_SETTINGS.items()))
        return path
    lines = members if members is not None else [server_line(n) for n in range(1, size + 1)]
    settings = local_settings(folder / "data", client_port(sid), BASE_PORT + 5899 + sid, tick_ms=2000)
    return write_config(path, {**settings, **QUORUM_LIMITS, **RECONFIG_SETTINGS, **dict(line.split("=", 1) for line in lines)})


def load_state() -> State:
    return json.loads(STATE.read_text()) if STATE.exists() else {}


def save_state(state: State) -> None:
    RUN.mkdir(parents=True, exist_ok=True)
    STATE.write_text(json.dumps(state, indent=2))


def running_pid(state: State, sid: int) -> int | None:
    entry = state.get(str(sid))
    return entry["pid"] if entry and process_alive(entry["pid"]) else None


def launch(sid: int, size: int, members: list[str] | None = None) -> int:
    """Server ``sid`` started detached (it outlives this script); its pid."""
    return launch_server(config_for(sid, size, members), folder_of(sid) / "server.log", new_session=True).pid


def status(state: State) -> list[tuple[int, str, str, str]]:
    rows = []
    for sid in sorted(map(int, state)):
        try:
            fields = srvr(client_port(sid))
            rows.append((sid, fields.get("Mode", "not serving"), fields.get("Zxid", "-"), fields.get("Connections", "-")))
        except OSError:
            rows.append((sid, "starting" if running_pid(state, sid) else "down", "-", "-"))
    return rows


def print_status(state: State) -> None:
    for row in status(state):
        print("server %d: %-11s zxid %-14s connections %s" % row)


def all_serving(state: State, sids: list[int], timeout_s: float = 30.0) -> bool:
    """Whether every server of ``sids`` serves within ``timeout_s`` (false at once if one ends)."""
    deadline = time.monotonic() + timeout_s
    try:
        for sid in sids:
            pid = state[str(sid)]["pid"]
            wait_serving(client_port(sid), lambda pid=pid: process_alive(pid), max(deadline - time.monotonic(), 0.1))
    except (RuntimeError, TimeoutError):
        return False
    return True


def admin_client(state: State, excluding: int | None = None) -> SyncClient:
    """A session as the super user on the running servers (but ``excluding``)."""
    hosts = ",".join(f"127.0.0.1:{client_port(int(s))}" for s in sorted(state, key=int) if int(s) != excluding)
    client = SyncClient(hosts, timeout=10.0, auth_data=[("digest", ":".join(SUPER_USER))])
    client.start(timeout=30)
    return client


def add(state: State, sid: int) -> int:
    """Start server ``sid`` with the current members and itself, then reconfigure it in."""
    if (pid := running_pid(state, sid)) is not None:
        print(f"server {sid} is already running (pid {pid})", file=sys.stderr)
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
        if not all_serving(state, [sid], 60.0):
            print(f"server {sid} did not sync with the ensemble; see {folder_of(sid) / 'server.log'}", file=sys.stderr)
            return 1
        data, _ = client.reconfig(server_line(sid), None, None, current.version)
    print(f"server {sid} added; committed new configuration:\n{data.decode()}", end="")
    return 0


def remove(state: State, sid: int) -> int:
    """Reconfigure server ``sid`` out, then stop it."""
    entry = state.get(str(sid))
    if entry is None:
        print(f"no server {sid} in {STATE}", file=sys.stderr)
        return 2
    with admin_client(state, excluding=sid) as client:
        data, _ = client.reconfig(None, str(sid), None)
    stop_pids([entry["pid"]])
    del state[str(sid)]
    save_state(state)
    print(f"server {sid} removed and stopped; committed new configuration:\n{data.decode()}", end="")
    return 0


def start(state: State, size: int) -> int:
    """Servers 1..size (those not running already), then their status."""
    for sid in range(1, size + 1):
        if (pid := running_pid(state, sid)) is not None:
            print(f"server {sid} is already running (pid {pid})")
            continue
        state[str(sid)] = {"pid": launch(sid, size), "size": size}
    save_state(state)
    ok = all_serving(state, list(range(1, size + 1)))
    print_status(state)
    print("hosts:", ",".join(f"127.0.0.1:{client_port(s)}" for s in range(1, size + 1)))
    return 0 if ok else 1


def kill(state: State, sid: int) -> int:
    """SIGKILL server ``sid``."""
    pid = state[str(sid)]["pid"]
    kill_pids([pid])
    print(f"killed server {sid} (pid {pid})")
    return 0


def restart(state: State, sid: int) -> int:
    """SIGKILL server ``sid`` if it runs, then start it again on the same data."""
    entry = state[str(sid)]
    kill_pids([entry["pid"]])
    entry["pid"] = launch(sid, entry["size"])
    save_state(state)
    print(f"restarted server {sid} (pid {entry['pid']})")
    return 0


def stop(state: State) -> int:
    """SIGTERM every server, SIGKILL those not ended within 10 s."""
    stop_pids(entry["pid"] for entry in state.values())
    save_state({})
    print("stopped")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["start", "stop", "status", "kill", "restart", "hosts", "add", "remove"])
    parser.add_argument("n", nargs="?", type=int, help="ensemble size (start) or server id (kill, restart, add, remove)")
    args = parser.parse_args()
    state = load_state()
    if args.command == "start":
        return start(state, args.n or 3)
    if args.command == "stop":
        return stop(state)
    if args.command == "hosts":
        print(",".join(f"127.0.0.1:{client_port(int(s))}" for s in sorted(state, key=int)))
        return 0
    if args.command == "status":
        print_status(state)
        return 0
    if args.n is None:
        parser.error(f"{args.command} needs a server id")
    if args.command in ("kill", "restart") and str(args.n) not in state:
        print(f"no server {args.n} in {STATE}", file=sys.stderr)
        return 2
    return {"add": add, "remove": remove, "kill": kill, "restart": restart}[args.command](state, args.n)


if __name__ == "__main__":
    sys.exit(main())
