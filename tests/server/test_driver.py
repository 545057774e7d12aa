"""The trio driver carries out the engine's effects in the order their contract says: in one
``Persist``, the accepted epoch, the log cut, the append and the fsync come before the current
epoch (a learner's NEWLEADER and the DIFF before it are often one Ready; ZOOKEEPER-4643)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from zabby import config as zoo_config
from zabby.engine import Persist
from zabby.server.node import ZabbyServer
from zabby.storage.datadir import DataDir
from zabby.storage.epochs import read_epoch
from zabby.tree.acl import OPEN_ACL_UNSAFE
from zabby.tree.txns import Txn, make_zxid


def make_server(tmp_path: Path) -> ZabbyServer:
    data = tmp_path / "data"
    data.mkdir()
    (data / "myid").write_text("1\n")
    config = zoo_config.from_dict({
        "dataDir": str(data), "clientPort": "0", "tickTime": "200",
        "server.1": "127.0.0.1:1:2", "server.2": "127.0.0.1:3:4", "server.3": "127.0.0.1:5:6",
    })  # fmt: skip
    datadir = DataDir(config.data_dir, config.data_log_dir)
    tree, log = datadir.recover()
    return ZabbyServer(config, datadir, tree, log)


def test_persist_writes_the_current_epoch_after_the_log_is_synced(tmp_path: Path) -> None:
    server = make_server(tmp_path)
    calls: list[str] = []
    real_run = server.disk.run

    async def recording_run(fn: Any, *args: Any) -> Any:
        name = getattr(fn, "__name__", repr(fn))
        calls.append(f"{name}({Path(args[0]).name})" if name == "write_epoch" else name)
        return await real_run(fn, *args)

    server.disk.run = recording_run  # type: ignore[method-assign]
    real_sync = server.log.sync

    def recording_sync() -> None:  # inline when the server is idle, else through disk.run
        if not calls or calls[-1] != "sync":
            calls.append("sync")
        real_sync()

    server.log.sync = recording_sync  # type: ignore[method-assign]
    txn = Txn(make_zxid(2, 1), 0x77, 1, 0, 1, ("/a", b"", OPEN_ACL_UNSAFE, 0, 1))
    effect = Persist(accepted_epoch=2, current_epoch=2, truncate_to=0, append=[txn], sync=True)
    trio.run(server._persist, effect)
    assert calls == ["write_epoch(acceptedEpoch)", "truncate_after", "sync", "write_epoch(currentEpoch)"]
    assert read_epoch(server.datadir.current_epoch_path) == 2
    assert server.log.last_zxid == make_zxid(2, 1)
