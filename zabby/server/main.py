"""``zabby-server CONFIG``: recover the data dir, then serve clients, four-letter words and the
admin endpoint until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import enum
import gc
import logging
import signal
import ssl
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import trio

from zabby import config as zoo_config
from zabby import tls
from zabby.server.adminport.admin import serve_admin
from zabby.server.process import logsetup
from zabby.server.clients.client_conn import Connection, open_secure, refuse_plaintext
from zabby.server.process.collector import FullCollections
from zabby.server.process.listeners import serve_listeners
from zabby.server.process.descriptors import DescriptorLimitError, Descriptors
from zabby.server.process.guard import contained
from zabby.server.process.forks import DigestChild
from zabby.server.node import ZabbyServer
from zabby.server.process.ratelog import RateLimitedLog
from zabby.engine.storage import Storage

LOGGER = logging.getLogger("zabby.server")
CONN_LOGGER = logging.getLogger("zabby.server.conn")
QUOTA_LOGGER = logging.getLogger("zabby.server.quota")
QUOTA_WARNING_INTERVAL_S = 1.0


def open_server(config: zoo_config.ServerConfig, descriptors: Descriptors | None = None) -> ZabbyServer:
    """Recover the newest valid snapshot plus the log after it; return a ready server."""
    started = time.perf_counter()
    storage = Storage(config)
    gc.disable()  # a snapshot load and a replay make millions of objects and no cycles: the
    try:  # collector would walk the growing tree again and again (seconds at 1M znodes)
        recovered = storage.recover(config.membership, at_start=True, digest_beside=DigestChild)  # on the other core
    finally:
        gc.freeze()  # and out of the way of every full collection from now on
        gc.enable()
    tree = recovered.tree
    server = ZabbyServer(config, storage, recovered, descriptors)
    _set_quota_policy(server)
    server.stats.startup_load_ms = (time.perf_counter() - started) * 1000
    loaded = storage.datadir.recovered
    server.stats.startup_snap_load_ms = loaded.snap_load_ms
    server.stats.startup_txns_load_ms = loaded.txns_load_ms
    server.stats.startup_txns_loaded = loaded.txns_loaded
    LOGGER.info("recovered %d znodes, %d sessions, last zxid 0x%x in %.0f ms",
                tree.node_count(), len(tree.sessions), tree.last_zxid, server.stats.startup_load_ms)  # fmt: skip
    return server


def _set_quota_policy(server: ZabbyServer) -> None:
    """zookeeper.enforceQuota, and the log that hears of a quota passed but not refused.
    (The engine builds its PrepLimits from the config without them; it keeps these across
    leaderships, as it passes its limits on to each new Preparer.)"""
    preparer = server.engine.preparer
    warning = RateLimitedLog(QUOTA_LOGGER, QUOTA_WARNING_INTERVAL_S).warning
    preparer.limits = replace(preparer.limits, enforce_quota=server.config.enforce_quota, quota_warning=warning)


async def serve_clients(
    server: ZabbyServer, context: ssl.SSLContext | None = None, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve the client port, or with ``context`` the secure client port; ``task_status``
    reports the bound port."""
    config = server.config
    if context is None:
        assert config.client_port is not None
        port, host = config.client_port, config.client_port_address
    else:
        assert config.secure_client_port is not None
        port, host = config.secure_client_port, config.secure_client_port_address
    listeners = await trio.open_tcp_listeners(port, host=host, backlog=1024)
    port = listeners[0].socket.getsockname()[1]
    per_ip: Counter[str] = Counter()
    held = [0]  # connections on this port (maxCnxns)

    async def admit(stream: trio.SocketStream) -> None:
        try:
            address = stream.socket.getpeername()[:2]
        except OSError:  # reset before we looked (ENOTCONN): nobody to serve
            await stream.aclose()
            return
        refusal = _client_refusal(config, per_ip[address[0]], held[0], address[0])
        if refusal is not None:
            server.stats.connection_rejected += 1
            server.warn_rate_limited("per-ip" if "maxClientCnxns" in refusal else "max-cnxns", refusal)
            await stream.aclose()
            return
        per_ip[address[0]] += 1
        held[0] += 1
        try:
            await serve_connection(server, stream, address, context)
        finally:
            held[0] -= 1
            per_ip[address[0]] -= 1
            if not per_ip[address[0]]:
                del per_ip[address[0]]

    async def handle(stream: trio.SocketStream) -> None:
        # everything from accept() on, the peer's address included, ends this connection only
        await contained("a client connection", CONN_LOGGER, admit, stream)

    def refused() -> None:
        server.stats.connection_rejected += 1
        server.warn_rate_limited("descriptors", f"refusing a client connection: the {server.descriptors.capacity} descriptors "
                                                f"connections may hold are held (RLIMIT_NOFILE less descriptorReserve)")  # fmt: skip

    LOGGER.info("serving clients on %s:%d%s", host, port, " (TLS)" if context else "")
    task_status.started(port)
    await serve_listeners(handle, listeners, descriptors=server.descriptors, refused=refused)


def _client_refusal(config: zoo_config.ServerConfig, from_ip: int, on_port: int, ip: str) -> str | None:
    """Why a new client connection is refused, if it is: maxClientCnxns from its IP, maxCnxns
    on its port."""
    limit = config.client_connections_per_ip_max
    if limit and from_ip >= limit:
        return f"too many connections from {ip} - max is {limit} (maxClientCnxns); refusing"
    if config.client_connections_max and on_port >= config.client_connections_max:
        return f"too many connections on this port - max is {config.client_connections_max} (maxCnxns); refusing {ip}"
    return None


async def serve_connection(server: ZabbyServer, stream: trio.SocketStream, address: tuple[str, int], context: ssl.SSLContext | None) -> None:
    """One client connection, over TLS when ``context`` is given."""
    client_stream: trio.abc.Stream = stream
    if context is not None:
        secure = await open_secure(stream, context, address, server.warn_rate_limited)
        if secure is None:
            await refuse_plaintext(stream, address, server)
            return
        client_stream = secure
    conn = Connection(server, client_stream, address)
    server.connections.add(conn.session)  # until detach, when the connection ends
    await conn.run()


async def serve(server: ZabbyServer, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Run every task of one server; ``task_status`` reports the bound client port."""
    async with trio.open_nursery() as nursery:
        if server.transport is not None:
            await nursery.start(server.transport.run)
        nursery.start_soon(server.run_peer, nursery)
        nursery.start_soon(server.run_ticker)
        if server.config.admin_enabled:
            await nursery.start(serve_admin, server)
        ports = []
        if server.config.client_tls is not None:
            ports.append(await nursery.start(serve_clients, server, tls.server_context(server.config.client_tls)))
        if server.config.client_port is not None:
            ports.append(await nursery.start(serve_clients, server))
        task_status.started(ports[-1])  # the plaintext port when there is one


async def _run(config: zoo_config.ServerConfig, descriptors: Descriptors) -> None:
    server = open_server(config, descriptors)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve, server)
            nursery.start_soon(contained, "the collector's task", LOGGER, FullCollections().run)

            async def stop_on_signal() -> None:
                async for signum in signals:
                    LOGGER.info("received %s, shutting down", signal.Signals(signum).name)
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(stop_on_signal)
    server.close()


def check_tls(config: zoo_config.ServerConfig) -> None:
    """Load every key, certificate and CA file now, so a bad one stops the start with its
    name rather than failing each connection.  Raises: tls.TlsSetupError."""
    if config.client_tls is not None:
        tls.server_context(config.client_tls)
    if config.quorum_tls is not None:
        tls.server_context(config.quorum_tls, "ssl.quorum.")
        tls.peer_client_context(config.quorum_tls)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zabby-server", description="Run a zabby server from a zoo.cfg file.")
    parser.add_argument("config", help="path to a zoo.cfg file")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.add_argument("--log-format", choices=["text", "json"], default="text", help="text lines, or one JSON object per line")
    parser.add_argument("--log-config", type=Path, help="a logging config file (dictConfig JSON, or .ini); overrides the two above")
    return parser


def fast_enum_members() -> None:
    """Python 3.11's ``EnumType.__getattr__`` makes every ``OpCode.CREATE``, ``Err.OK`` or
    ``ServerState.LEADING`` go through the slow attribute hook of a metaclass that has one:
    0.1 µs each, tens of them per write on each server.  Its members are in the class
    dictionaries already; the hook is only the fallback that 3.12 removed.  The server's own
    process drops it (a library must not: ``zabby.client`` leaves its users' enums alone)."""
    if "__getattr__" in vars(enum.EnumType):
        delattr(enum.EnumType, "__getattr__")


def main(argv: list[str] | None = None) -> int:
    fast_enum_members()
    args = build_parser().parse_args(argv)
    if not __debug__:
        print("zabby-server: refusing to run under python -O (its invariant checks are assertions)", file=sys.stderr)
        return 2
    try:
        logsetup.configure(args.log_level, args.log_format, args.log_config)
        config = zoo_config.load(args.config)
        zoo_config.check_membership_writable(config)
        check_tls(config)
        descriptors = Descriptors.for_server(config)
    except (zoo_config.ConfigError, tls.TlsSetupError, logsetup.LogConfigError, DescriptorLimitError) as exc:
        print(f"zabby-server: {exc}", file=sys.stderr)
        return 2
    trio.run(_run, config, descriptors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
