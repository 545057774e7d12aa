"""Helpers for the zabby-admin tests: logs written with the storage layer, and the console
script run in-process with its output and exit code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zabby.cli import admin as admin_cli
from zabby.storage.txnlog import TxnLog
from zabby.tree.datatree import DataTree
from zabby.tree.txns import Txn, encode_txn


def write_log(data_dir: Path, txns: list[Txn], **log_options: int) -> list[Txn]:
    """``txns`` appended and synced into ``data_dir/version-2`` as the server writes them."""
    log = TxnLog(data_dir / "version-2", **log_options)
    log.open()
    for txn in txns:  # one batch per txn, so segments roll at segment_bytes_max
        log.append([(txn.zxid, encode_txn(txn))])
    log.close()
    return txns


def admin(*argv: str) -> tuple[int, str, str]:
    """``zabby-admin ARGV``: (exit code, stdout, stderr)."""
    return admin_cli.main_captured(list(argv))


SYSTEM = "/zookeeper"  # each server shows its own membership there (outside the digest, as in ZooKeeper)


def read_tree(client: Any, root: str = "/") -> dict[str, tuple[bytes, tuple[int, ...]]]:
    """Every znode under ``root`` but ``/zookeeper`` as ``path -> (data, Stat in jute
    order)``, read through a client with pipelined requests (one layer at a time)."""
    found: dict[str, tuple[bytes, tuple[int, ...]]] = {}
    layer = [root]
    while layer:
        gets = [(path, client.get_async(path)) for path in layer]
        lists = [(path, client.get_children_async(path)) for path in layer]
        for path, pending in gets:
            data, stat = pending.get(timeout=30)
            found[path] = (data, tuple(stat))
        layer = [child for path, pending in lists for name in pending.get(timeout=30)
                 if not _system(child := f"{path.rstrip('/')}/{name}")]  # fmt: skip
    return found


def tree_nodes(tree: DataTree) -> dict[str, tuple[bytes, tuple[int, ...]]]:
    """The same view of a DataTree (a snapshot's)."""
    return {path: (node.data, tuple(node.stat())) for path, node in tree.nodes.items() if not _system(path)}


def _system(path: str) -> bool:
    return path == SYSTEM or path.startswith(SYSTEM + "/")
