"""Durable state: the txn log, snapshots, the epoch files and the data-directory layout.

Synchronous and blocking (the server runs these calls in a worker thread); no trio here.

- ``TxnLog``: segmented, CRC-checked, group-committed log of ``(zxid, payload)`` records.
- ``write_snapshot`` / ``read_snapshot`` / ``list_snapshots``: checked, streamed snapshots.
- ``read_epoch`` / ``write_epoch``: ``acceptedEpoch`` and ``currentEpoch``.
- ``DataDir``: ZooKeeper's ``dataDir``/``dataLogDir`` layout, recovery and purge.
"""

from zabby.storage.datadir import DataDir as DataDir
from zabby.storage.datadir import RecoveryError as RecoveryError
from zabby.storage.epochs import ACCEPTED_EPOCH as ACCEPTED_EPOCH
from zabby.storage.epochs import CURRENT_EPOCH as CURRENT_EPOCH
from zabby.storage.epochs import CorruptEpochError as CorruptEpochError
from zabby.storage.epochs import read_epoch as read_epoch
from zabby.storage.epochs import write_epoch as write_epoch
from zabby.storage.snapshot import CorruptSnapshotError as CorruptSnapshotError
from zabby.storage.snapshot import list_snapshots as list_snapshots
from zabby.storage.snapshot import read_snapshot as read_snapshot
from zabby.storage.snapshot import write_snapshot as write_snapshot
from zabby.storage.txnlog import CorruptLogError as CorruptLogError
from zabby.storage.txnlog import TxnLog as TxnLog

__all__ = [
    "ACCEPTED_EPOCH",
    "CURRENT_EPOCH",
    "CorruptEpochError",
    "CorruptLogError",
    "CorruptSnapshotError",
    "DataDir",
    "RecoveryError",
    "TxnLog",
    "list_snapshots",
    "read_epoch",
    "read_snapshot",
    "write_epoch",
    "write_snapshot",
]
