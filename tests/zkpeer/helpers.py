"""Bytes ZooKeeper 3.8 servers sent each other (``data/README.md``), read into packets."""

from __future__ import annotations

from pathlib import Path

from zabby.wire.zk_quorum import PacketReader, PacketType, QuorumPacket
from zabby.wire.zk_snapshot import TreeStream

DATA = Path(__file__).parent / "data"
SNAP_SIGNATURE = "BenWasHere"


def recorded(name: str) -> bytes:
    return (DATA / name).read_bytes()


def packets(data: bytes, step: int | None = None) -> tuple[list[QuorumPacket], list[TreeStream]]:
    """Every packet of a recorded quorum stream, fed ``step`` bytes at a time (None: at once),
    and the tree that followed each SNAP."""
    reader, found, trees = PacketReader(), [], []
    tree: TreeStream | None = None
    step = step or len(data)
    for start in range(0, len(data), step):
        chunk = data[start : start + step]
        if tree is not None:
            rest = tree.feed(chunk)
            if rest is None:
                continue
            tree, chunk = None, rest
        reader.feed(chunk)
        while tree is None and (packet := reader.next_packet()) is not None:
            found.append(packet)
            if packet.type == PacketType.SNAP:
                tree = TreeStream(2**30, SNAP_SIGNATURE)
                trees.append(tree)
                rest = tree.feed(reader.take_rest())
                if rest is not None:
                    tree = None
                    reader.feed(rest)
    return found, trees
