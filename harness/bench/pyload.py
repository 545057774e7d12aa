#!/usr/bin/env python3
"""One Python client process of scripts/bench.py: kazoo (jute) or zabby's own msgpack Client.

    python -m harness.bench.pyload '{"driver": "kazoo", "mode": "get", ...}'

The same modes and protocol as ZkLoad.java: set-up (connect, create the keys), print
``READY``, wait for ``GO`` on stdin, load with ``conns`` connections x ``inflight`` requests
outstanding each until ``ops`` or ``seconds``, print ``RESULT {json}`` and exit.  ``watch``
mode loads until a line ``STOP``.  ``spread`` as in ZkLoad.java: empty pins connection i to host
``(first + i) % n``; ``rotate`` gives it every host starting there, in order; ``shuffle`` lets the
client library shuffle them.  The result carries this process's CPU seconds (all its
threads) over the loaded window.
"""

from __future__ import annotations

import itertools
import json
import random
import resource
import sys
import threading
import time
from typing import Any



def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Shared:
    """Counters and limits shared by every lane of this process."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.mode: str = cfg["mode"]
        self.hosts: list[str] = cfg["hosts"].split(",")
        self.first: int = int(cfg.get("first", 0))
        self.spread: str = cfg.get("spread", "")
        self.conns: int = int(cfg.get("conns", 1))
        self.inflight: int = int(cfg.get("inflight", 1))
        self.ops_max: int = int(cfg.get("count" if self.mode == "fill" else "ops", 1000))
        self.seconds: float = float(cfg.get("seconds", 10))
        self.value: bytes = b"v" * int(cfg.get("size", 100))
        self.prefix: str = cfg.get("prefix", "/bench/w0")
        self.path: str = cfg.get("path", "/bench/shared")
        self.read_pct: int = int(cfg.get("readpct", 90))
        self.issued = itertools.count(1)
        self.completed = 0
        self.errors = 0
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.go_ns = 0
        self.deadline = 0.0
        self.last_done = 0.0
        self.stopping = False

    def host(self, index: int) -> str:
        start = (self.first + index) % len(self.hosts)
        order = self.hosts[start:] + self.hosts[:start]
        return ",".join(order) if self.spread else order[0]

    def keyed(self) -> bool:
        return self.mode in ("set", "get", "exists", "mix", "latency-read", "latency-set")

    def may_issue(self) -> int:
        """The op's sequence number (1-based), or 0 when the lane must stop."""
        number = next(self.issued)
        if self.stopping or number > self.ops_max or time.perf_counter() >= self.deadline:
            return 0
        return number

    def go(self) -> None:
        self.go_ns = time.monotonic_ns()
        self.started = time.perf_counter()
        self.last_done = self.started
        self.deadline = self.started + self.seconds

    def result(self, cpu: float, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ops": self.completed,
            "errors": self.errors,
            "elapsed_s": self.last_done - self.started,
            "cpu_s": cpu,
            "go_ns": self.go_ns,
        }
        if self.mode.startswith("latency"):
            out["lat_us"] = [round(x * 1e6, 1) for x in self.latencies]
        out.update(extra or {})
        return out


def wait_go() -> bool:
    print("READY", flush=True)
    return sys.stdin.readline().strip() == "GO"


def wait_stop() -> None:
    while True:
        line = sys.stdin.readline()
        if not line or line.strip() == "STOP":
            return


# -- kazoo ---------------------------------------------------------------------------------


def run_kazoo(s: Shared) -> dict[str, Any]:  # noqa: C901 -- one branch per load mode, with kazoo's callbacks inline
    from kazoo.client import KazooClient
    from kazoo.exceptions import NodeExistsError

    def connect(index: int) -> Any:
        client = KazooClient(hosts=s.host(index), timeout=30.0, randomize_hosts=s.spread == "shuffle")
        client.start(timeout=30)
        return client

    clients = [connect(i) for i in range(1 if s.mode == "churn" else s.conns)]
    admin = clients[0]
    shared_node = s.mode in ("fill", "watch", "children")
    admin.ensure_path(s.path if shared_node else s.prefix)
    if s.mode == "watch":
        admin.set(s.path, s.value)
    if s.keyed():
        for lane in range(s.conns * s.inflight):
            try:
                admin.create(f"{s.prefix}/k{lane}", s.value)
            except NodeExistsError:
                pass
    if s.mode == "children" and int(s.cfg.get("expect", 0)) not in (0, len(admin.get_children(s.path))):
        raise SystemExit(f"{s.path} has {len(admin.get_children(s.path))} children, expected {s.cfg['expect']}")
    if s.mode == "churn":
        admin.stop()
        admin.close()
        clients = []
    received: list[list[int]] = []
    if s.mode == "watch":
        def make_watcher(client: Any, times: list[int]) -> Any:
            def watcher(event: Any) -> None:
                if event.type == "CHANGED":
                    times.append(time.monotonic_ns())
                    if not s.stopping:
                        client.get_async(s.path, watch=watcher)

            return watcher

        for client in clients:
            received.append([])
            client.get(s.path, watch=make_watcher(client, received[-1]))
    if not wait_go():
        return {}
    cpu0 = cpu_seconds()
    s.go()
    if s.mode == "watch":
        wait_stop()
        s.stopping = True
        s.last_done = time.perf_counter()
    elif s.mode == "churn":
        def churn(thread: int) -> None:
            index = 0
            while s.may_issue():
                try:
                    client = connect(thread)
                    client.create(f"{s.prefix}/e{thread}-{index}", s.value, ephemeral=True)
                    client.stop()
                    client.close()
                    with s.lock:
                        s.completed += 1
                        s.last_done = time.perf_counter()
                except Exception:  # noqa: BLE001 - counted, the loop is bounded anyway
                    with s.lock:
                        s.errors += 1
                index += 1

        threads = [threading.Thread(target=churn, args=(t,), daemon=True) for t in range(s.conns)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(s.seconds + 60)
    else:
        finished = threading.Semaphore(0)
        lanes = [(client, c * s.inflight + k) for c, client in enumerate(clients) for k in range(s.inflight)]
        counters = {"index": itertools.count()}

        def issue(client: Any, lane: int) -> None:
            number = s.may_issue()
            if not number:
                finished.release()
                return
            started = time.perf_counter()
            mode = s.mode
            key = f"{s.prefix}/k{lane}"
            if mode in ("create", "latency-write"):
                result = client.create_async(f"{s.prefix}/n{lane}-{next(counters['index'])}", s.value)
            elif mode == "fill":
                result = client.create_async(f"{s.path}/n{number - 1}", s.value)
            elif mode in ("set", "latency-set"):
                result = client.set_async(key, s.value)
            elif mode in ("get", "latency-read"):
                result = client.get_async(key)
            elif mode == "exists":
                result = client.exists_async(key)
            elif mode == "children":
                result = client.get_children_async(s.path)
            elif mode == "mix":
                result = client.get_async(key) if random.randrange(100) < s.read_pct else client.set_async(key, s.value)
            else:
                raise ValueError(f"unknown mode {mode}")

            def done(async_result: Any) -> None:
                now = time.perf_counter()
                with s.lock:
                    if async_result.exception is not None:
                        s.errors += 1
                    s.completed += 1
                    s.last_done = now
                    if mode.startswith("latency"):
                        s.latencies.append(now - started)
                issue(client, lane)

            result.rawlink(done)

        for client, lane in lanes:
            issue(client, lane)
        for _ in lanes:
            if not finished.acquire(timeout=s.seconds + 60):
                s.stopping = True
                break
    cpu = cpu_seconds() - cpu0
    out = s.result(cpu, {"events_ns": received} if s.mode == "watch" else None)
    for client in clients:
        try:
            client.stop()
            client.close()
        except Exception:  # noqa: BLE001
            pass
    return out


# -- zabby's own msgpack client ------------------------------------------------------------


async def run_zabby(s: Shared) -> dict[str, Any]:  # noqa: C901 -- one branch per load mode, as run_kazoo
    import trio

    from zabby.client.aio import Client
    from zabby.errors import NodeExistsError

    async def connect(index: int) -> Client:
        client = Client(s.host(index), timeout=30.0, randomize_hosts=s.spread == "shuffle")
        await client.start(timeout=30)
        return client

    clients = [await connect(i) for i in range(1 if s.mode == "churn" else s.conns)]
    admin = clients[0]
    shared_node = s.mode in ("fill", "watch", "children")
    await admin.ensure_path(s.path if shared_node else s.prefix)
    if s.mode == "watch":
        await admin.set(s.path, s.value)
    if s.keyed():
        for lane in range(s.conns * s.inflight):
            try:
                await admin.create(f"{s.prefix}/k{lane}", s.value)
            except NodeExistsError:
                pass
    if s.mode == "children" and int(s.cfg.get("expect", 0)) not in (0, len(await admin.get_children(s.path))):
        raise SystemExit(f"{s.path} has {len(await admin.get_children(s.path))} children, expected {s.cfg['expect']}")
    if s.mode == "churn":
        await admin.stop()
        clients = []
    received: list[list[int]] = []
    if not await trio.to_thread.run_sync(wait_go):
        return {}
    cpu0 = cpu_seconds()
    s.go()

    async def lane_task(client: Client, lane: int) -> None:
        index = 0
        mode = s.mode
        key = f"{s.prefix}/k{lane}"
        while number := s.may_issue():
            started = time.perf_counter()
            try:
                if mode in ("create", "latency-write"):
                    await client.create(f"{s.prefix}/n{lane}-{index}", s.value)
                elif mode == "fill":
                    await client.create(f"{s.path}/n{number - 1}", s.value)
                elif mode in ("set", "latency-set"):
                    await client.set(key, s.value)
                elif mode in ("get", "latency-read"):
                    await client.get(key)
                elif mode == "exists":
                    await client.exists(key)
                elif mode == "children":
                    await client.get_children(s.path)
                elif mode == "mix":
                    if random.randrange(100) < s.read_pct:
                        await client.get(key)
                    else:
                        await client.set(key, s.value)
            except Exception:  # noqa: BLE001 - counted; the loop is bounded
                s.errors += 1
            now = time.perf_counter()
            s.completed += 1
            s.last_done = now
            if mode.startswith("latency"):
                s.latencies.append(now - started)
            index += 1

    async def churn_task(thread: int) -> None:
        index = 0
        while s.may_issue():
            try:
                client = await connect(thread)
                await client.create(f"{s.prefix}/e{thread}-{index}", s.value, ephemeral=True)
                await client.close()
                s.completed += 1
                s.last_done = time.perf_counter()
            except Exception:  # noqa: BLE001
                s.errors += 1
            index += 1

    async def watch_task(client: Client, times: list[int]) -> None:
        while not s.stopping:
            fired = trio.Event()

            def watcher(event: Any, fired: trio.Event = fired) -> None:
                times.append(time.monotonic_ns())
                fired.set()

            await client.get(s.path, watch=watcher)
            await fired.wait()

    with trio.move_on_after(s.seconds + 60):
        async with trio.open_nursery() as nursery:
            if s.mode == "watch":
                for client in clients:
                    received.append([])
                    nursery.start_soon(watch_task, client, received[-1])
                await trio.to_thread.run_sync(wait_stop)
                s.stopping = True
                s.last_done = time.perf_counter()
                nursery.cancel_scope.cancel()
            elif s.mode == "churn":
                for thread in range(s.conns):
                    nursery.start_soon(churn_task, thread)
            else:
                for c, client in enumerate(clients):
                    for k in range(s.inflight):
                        nursery.start_soon(lane_task, client, c * s.inflight + k)
    cpu = cpu_seconds() - cpu0
    out = s.result(cpu, {"events_ns": received} if s.mode == "watch" else None)
    for client in clients:
        with trio.move_on_after(5):
            await client.close()
    return out


def main() -> int:
    cfg = json.loads(sys.argv[1])
    shared = Shared(cfg)
    if cfg["driver"] == "kazoo":
        result = run_kazoo(shared)
    else:
        import trio

        result = trio.run(run_zabby, shared)
    if not result:
        return 2
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
