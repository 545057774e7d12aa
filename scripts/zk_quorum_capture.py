#!/usr/bin/env python3
"""Record what ZooKeeper 3.8 servers say to each other: the bytes of their election and quorum
links, for the quorum codecs' tests (tests/wire/data/zk_quorum, ``zabby.wire.zk_quorum``).

Three (or four, with ``--observer``) ZooKeeper servers on 127.0.0.1 (Debian's jars), each
told to reach the others through a recording proxy (its own ports stay its own), then writes
through kazoo on every server, a follower restarted behind (a DIFF), a follower restarted
with the leader forced to SNAP, a session moved between followers (REVALIDATE) and a sync.
Each proxied connection is written to ``OUT/<n>-<kind><sid>.{fwd,back}`` (fwd: what the
connecting side sent) and listed in ``OUT/index.json``.

    .venv/bin/python scripts/zk_quorum_capture.py OUT [--observer] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from pathlib import Path

from kazoo.client import KazooClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: its harness/ is not installed

from harness.local.jute_session import JuteSession
from harness.local.zookeeper import ZooKeeperProcess, ensure_zookeeper
from zabby.testing.processes import free_port, wait_until, write_myid

CHUNK_BYTES = 65536


class RecordingProxy:
    """Listens on a port of its own and forwards each connection to ``target``, recording both
    directions of every connection into ``out``."""

    def __init__(self, name: str, target: int, out: Path, counter: list[int], index: list[dict[str, object]]) -> None:
        self.name, self.target, self.out, self.counter, self.index = name, target, out, counter, index
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.counter[0] += 1
                stem = f"{self.counter[0]:03d}-{self.name}"
                self.index.append({"stem": stem, "proxy": self.name, "opened": time.time()})
                self.sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, self.out / f"{stem}.fwd"), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, self.out / f"{stem}.back"), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, path: Path) -> None:
        with open(path, "wb") as record:
            while True:
                try:
                    data = source.recv(CHUNK_BYTES)
                except OSError:
                    data = b""
                if not data:
                    break
                record.write(data)
                record.flush()
                try:
                    sink.sendall(data)
                except OSError:
                    break
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()
        with self.lock:
            for sock in self.sockets:
                sock.close()


def _members(own: int, ports: dict[int, tuple[int, int]], proxies: dict[str, RecordingProxy], observers: set[int]) -> dict[str, str]:
    lines = {}
    for sid, (quorum, election) in ports.items():
        if sid != own:
            quorum, election = proxies[f"q{sid}"].port, proxies[f"e{sid}"].port
        lines[f"server.{sid}"] = f"127.0.0.1:{quorum}:{election}" + (":observer" if sid in observers else "")
    return lines


def _write(hosts: str, prefix: str, count: int) -> None:
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=20)
    try:
        client.ensure_path(prefix)
        for i in range(count):
            path = client.create(f"{prefix}/n-", f"v{i}".encode(), sequence=True)
            client.set(path, b"changed")
        client.create(f"{prefix}/eph", b"e", ephemeral=True)
        transaction = client.transaction()
        transaction.create(f"{prefix}/m1", b"1")
        transaction.set_data(prefix, b"p")
        transaction.commit()
        client.sync(prefix)
        client.delete(f"{prefix}/m1")
        client.set_acls(prefix, client.get_acls(prefix)[0])
    finally:
        client.stop()
        client.close()


def _move_session(first: str, second: int) -> None:
    """A session made on one server, then re-attached on another (that one sends REVALIDATE)."""
    client = KazooClient(hosts=first, timeout=10)
    client.start(timeout=20)
    session_id, password = client.client_id
    try:
        with JuteSession(second) as moved:
            moved.connect(session_id=session_id, password=password, timeout_ms=10000)
    finally:
        client.stop()
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--observer", action="store_true", help="a fourth server, an observer")
    parser.add_argument("--seconds", type=float, default=3.0, help="idle time for pings to be recorded")
    parser.add_argument("--snap", action="store_true", help="every leader syncs its learners by SNAP (zookeeper.forceSnapshotSync)")
    args = parser.parse_args()
    ensure_zookeeper()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    sids = [1, 2, 3, 4] if args.observer else [1, 2, 3]
    observers = {4} if args.observer else set()
    ports = {sid: (free_port(), free_port()) for sid in sids}
    counter, index = [0], []  # type: ignore[var-annotated]
    proxies = {}
    for sid, (quorum, election) in ports.items():
        proxies[f"q{sid}"] = RecordingProxy(f"q{sid}", quorum, out, counter, index)
        proxies[f"e{sid}"] = RecordingProxy(f"e{sid}", election, out, counter, index)
    servers: dict[int, ZooKeeperProcess] = {}
    properties = {"zookeeper.forceSnapshotSync": "true"} if args.snap else None
    settings = {"tickTime": 500, "initLimit": 10, "syncLimit": 5, "4lw.commands.whitelist": "*", "admin.enableServer": "false"}
    for sid in sids:
        folder = out / "servers" / f"server{sid}"
        write_myid(folder / "data", sid)
        servers[sid] = ZooKeeperProcess(folder, members=_members(sid, ports, proxies, observers), properties=properties,
                                        **settings)  # fmt: skip
    try:
        for server in servers.values():
            server.launch()
        for server in servers.values():
            server.wait_serving(90)
        modes = {sid: server.mode() for sid, server in servers.items()}
        print("modes", modes)
        for sid, server in servers.items():
            _write(server.hosts, f"/s{sid}", 3)
        followers = [sid for sid, mode in modes.items() if mode == "follower"]
        _move_session(servers[followers[0]].hosts, servers[followers[1]].port)
        time.sleep(args.seconds)
        follower = next(sid for sid, mode in modes.items() if mode == "follower")
        servers[follower].kill()
        _write(servers[next(s for s, m in modes.items() if m == "leader")].hosts, "/behind", 2)
        servers[follower].launch()
        servers[follower].wait_serving(90)
        time.sleep(args.seconds)
        wait_until(lambda: all(s.mode() for s in servers.values()), 30)
    finally:
        for server in servers.values():
            server.kill()
        for proxy in proxies.values():
            proxy.close()
        meta = {"ports": {str(sid): list(p) for sid, p in ports.items()}, "observers": sorted(observers),
                "proxies": {name: p.port for name, p in proxies.items()}, "connections": index}  # fmt: skip
        (out / "index.json").write_text(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
