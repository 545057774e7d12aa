"""A plain-asyncio HTTP service that serves its requests from one ``zabby.Client``, holding a
lock (leadership) and a watch (configuration) meanwhile.  No web framework: asyncio's
``start_server`` and a minimal HTTP/1.1 handler, so the example runs on the standard library
and zabby alone (a FastAPI app would hold the same client in its lifespan).

    python examples/asyncio_service.py --hosts 127.0.0.1:2181 --port 8080 --name a

Routes (every answer is JSON):

* ``GET /config``: the latest value of the configuration node, kept current by a watch
  (``AsyncDataWatch``), without a request to ZooKeeper per HTTP request;
* ``GET /leader``: whether this instance holds the lock (``AsyncLock``): one instance of
  many leads, and the next one takes over when it goes;
* ``GET /znode/<path>``: a node read at request time through the same client.

It prints ``serving on http://127.0.0.1:<port>`` once it serves (``--port 0``: a free port),
and stops cleanly on SIGINT or SIGTERM: the lock is released and the session closed, so
another instance leads at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
from typing import Any

from zabby import Client, ZnodeStat
from zabby.client.recipes import AsyncDataWatch, AsyncLock
from zabby.errors import NoNodeError

MAX_REQUEST_BYTES = 8192
REQUEST_TIMEOUT_S = 10.0


class Service:
    def __init__(self, client: Client, name: str, config_path: str, lock_path: str) -> None:
        self.client = client
        self.name = name
        self.config_path = config_path
        self.lock = AsyncLock(client, lock_path, name)
        self.config: bytes | None = None
        self.config_version = -1

    def on_config(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        """The watch's function: called at once and on every change of the node."""
        self.config = data
        self.config_version = stat.version if stat is not None else -1

    async def lead(self) -> None:
        """Hold the lock for as long as the service runs (a leader's work would go here)."""
        async with self.lock:
            await asyncio.Event().wait()

    async def answer(self, method: str, target: str) -> tuple[int, dict[str, Any]]:
        if method != "GET":
            return 405, {"error": f"{method} is not served"}
        if target == "/config":
            if self.config is None:
                return 404, {"error": f"{self.config_path} does not exist"}
            return 200, {"value": self.config.decode("utf-8", "replace"), "version": self.config_version}
        if target == "/leader":
            return 200, {"name": self.name, "leader": self.lock.is_acquired}
        if target.startswith("/znode/"):
            try:
                data, stat = await self.client.get("/" + target.removeprefix("/znode/").strip("/"))
            except NoNodeError:
                return 404, {"error": "no such node"}
            return 200, {"value": data.decode("utf-8", "replace"), "version": stat.version}
        return 404, {"error": f"no route {target}"}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One request per connection (``Connection: close``): enough for an example."""
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            if len(head) > MAX_REQUEST_BYTES:
                raise ValueError("request head too large")
            method, target, _ = head.split(b"\r\n", 1)[0].decode("ascii").split(" ", 2)
            status, body = await self.answer(method, target)
        except (ValueError, UnicodeDecodeError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            status, body = 400, {"error": "bad request"}
        payload = json.dumps(body).encode()
        writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                     % (status, _REASONS.get(status, "Error").encode(), len(payload)) + payload)  # fmt: skip
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


async def serve(hosts: str, port: int, name: str, config_path: str, lock_path: str) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    async with Client(hosts, timeout=10.0) as client:
        service = Service(client, name, config_path, lock_path)
        async with AsyncDataWatch(client, config_path, service.on_config):
            leading = asyncio.create_task(service.lead())
            server = await asyncio.start_server(service.handle, "127.0.0.1", port)
            print(f"serving on http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
            async with server:
                await stopping.wait()
            leading.cancel()  # releases the lock (AsyncLock's exit is shielded)
            with contextlib.suppress(asyncio.CancelledError):
                await leading


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="127.0.0.1:2181", help="the ensemble's client addresses")
    parser.add_argument("--port", type=int, default=8080, help="the HTTP port on 127.0.0.1 (0: a free one)")
    parser.add_argument("--name", default="instance", help="this instance's name (the lock's identifier)")
    parser.add_argument("--config-path", default="/service/config", help="the node the service watches")
    parser.add_argument("--lock-path", default="/service/leader", help="the lock the instances share")
    args = parser.parse_args()
    asyncio.run(serve(args.hosts, args.port, args.name, args.config_path, args.lock_path))


if __name__ == "__main__":
    main()
