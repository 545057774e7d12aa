"""Failover between the servers of a 3-server ensemble (one ensemble for the module): the
client's server dies, the session moves to another, and its node, watch and calls go on."""

from __future__ import annotations

import anyio
import anyio.to_thread
import pytest

from zabby import EventType, KazooState, WatchedEvent
from zabby.opcodes import AddWatchMode
from zabby.testing import Ensemble

from .adapter import eventually
from .conftest import MakeClient

pytestmark = pytest.mark.anyio


async def test_the_session_fails_over_to_another_server(make_client: MakeClient, ensemble: Ensemble, path: str) -> None:
    leader = ensemble.leader()
    assert leader is not None
    first, second = sorted(sid for sid in ensemble.servers if sid != leader)
    order = [first, second, leader]  # a follower first, so its death needs no election
    hosts = ",".join(f"127.0.0.1:{ensemble.servers[sid].port}" for sid in order)
    zk = await make_client(hosts, randomize_hosts=False)
    states: list[KazooState] = []
    zk.raw.add_listener(states.append)
    heard: list[WatchedEvent] = []
    session = zk.raw.client_id
    await zk.create(path, b"0", ephemeral=True)
    await zk.add_watch(path, heard.append, AddWatchMode.PERSISTENT)
    try:
        await anyio.to_thread.run_sync(ensemble.servers[first].kill)
        await eventually(lambda: states[-2:] == [KazooState.SUSPENDED, KazooState.CONNECTED], "reconnected elsewhere")
        stat = await zk.set(path, b"1")
        assert zk.raw.client_id == session and stat.ephemeralOwner == session[0]
        await eventually(lambda: [(e.type, e.zxid) for e in heard] == [(EventType.CHANGED, stat.mzxid)], "the watch moved along")
    finally:
        await anyio.to_thread.run_sync(ensemble.servers[first].start)
