"""Builders of valid txn streams for the storage tests (a tiny stand-in for prep)."""

from __future__ import annotations

from zabby.opcodes import OpCode
from zabby.tree.datatree import DataTree
from zabby.tree.txns import Txn, encode_txn, make_zxid

OPEN_ACL = ((31, "world", "anyone"),)


class TxnMaker:
    """Makes txns that apply cleanly, in zxid order: flat nodes under ``/`` only."""

    def __init__(self, epoch: int = 1) -> None:
        self.epoch = epoch
        self.counter = 0
        self.versions: dict[str, int] = {}
        self.root_cversion = 0
        self.serial = 0

    def _next(self, txn_type: int, body: tuple[object, ...]) -> Txn:
        self.counter += 1
        zxid = make_zxid(self.epoch, self.counter)
        return Txn(zxid, 0x100, self.counter, 1_700_000_000_000 + self.counter, txn_type, body)

    def create(self, data: bytes = b"x" * 100) -> Txn:
        self.serial += 1
        path = f"/node{self.serial:06d}"
        self.root_cversion += 1
        self.versions[path] = 0
        return self._next(OpCode.CREATE, (path, data, OPEN_ACL, 0, self.root_cversion))

    def set_data(self, path: str, data: bytes) -> Txn:
        self.versions[path] += 1
        return self._next(OpCode.SET_DATA, (path, data, self.versions[path]))

    def delete(self, path: str) -> Txn:
        del self.versions[path]
        return self._next(OpCode.DELETE, (path,))

    def some(self, count: int, data_bytes: int = 100) -> list[Txn]:
        """``count`` txns: mostly creates, with some sets and deletes of existing nodes."""
        txns = []
        for index in range(count):
            existing = sorted(self.versions)
            if index % 5 == 3 and existing:
                txns.append(self.set_data(existing[index % len(existing)], bytes([index % 256]) * data_bytes))
            elif index % 7 == 6 and existing:
                txns.append(self.delete(existing[0]))
            else:
                txns.append(self.create(b"d" * data_bytes))
        return txns


def as_records(txns: list[Txn]) -> list[tuple[int, bytes]]:
    return [(txn.zxid, encode_txn(txn)) for txn in txns]


def tree_of(txns: list[Txn]) -> DataTree:
    tree = DataTree()
    for txn in txns:
        tree.apply(txn)
    return tree
