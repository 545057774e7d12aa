"""``snapshot compare A B``: the first differences between two trees, as ZooKeeper's
``SnapshotComparer`` prints them.

Theory of operation (ZooKeeper's): each tree is summarised (node count, total data size, max
depth, nodes per depth), then compared layer by layer from the root: at each depth the nodes
of both trees are walked in path order, and a node is reported as found only in the left or
the right tree (with its descendants' size and count), or found in both with the delta of its
descendants' size and count.  ``bytes_threshold`` / ``nodes_threshold`` are its ``-b`` / ``-n``.

Where zabby goes further: a node found in both trees whose own content differs (data, ACL or
a Stat field) is reported with the fields that differ even when the sizes are equal; with
both thresholds at 0 (the default) a node found on one side only is always reported; the
sessions are compared too.  The first ``limit`` differences are shown.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from zabby.tree.datatree import DataTree, Znode

_FIELDS = ("data", "acl", "czxid", "mzxid", "pzxid", "ctime", "mtime", "version", "cversion", "aversion", "ephemeral_owner")


@dataclass(slots=True)
class TreeInfo:
    """The per-node figures the comparer walks: descendants' data size and count, by depth."""

    tree: DataTree
    descendant_bytes: dict[str, int] = field(default_factory=dict)  # the node's own data included
    descendant_count: dict[str, int] = field(default_factory=dict)
    by_depth: list[list[str]] = field(default_factory=list)  # sorted paths; depth 0 is "/"

    @property
    def total_bytes(self) -> int:
        return self.descendant_bytes["/"]


@dataclass(frozen=True, slots=True)
class Line:
    text: str
    difference: bool = False


def depth_of(path: str) -> int:
    return 0 if path == "/" else path.count("/")


def tree_info(tree: DataTree) -> TreeInfo:
    info = TreeInfo(tree)
    paths = sorted(tree.nodes, key=lambda p: (-depth_of(p), p))  # children before their parents
    for path in paths:
        node = tree.nodes[path]
        children = node.children  # their full paths
        info.descendant_bytes[path] = len(node.data) + sum(info.descendant_bytes[c] for c in children)
        info.descendant_count[path] = len(children) + sum(info.descendant_count[c] for c in children)
    info.by_depth = [[] for _ in range(max(map(depth_of, tree.nodes)) + 1)]
    for path in sorted(tree.nodes):
        info.by_depth[depth_of(path)].append(path)
    return info


def summary(info: TreeInfo) -> list[str]:
    """ZooKeeper's TreeInfo.toString, plus the zxid, sessions and digest."""
    tree = info.tree
    lines = [f"Zxid: 0x{tree.last_zxid:x}", f"Digest: 0x{tree.digest:016x}", f"Sessions: {len(tree.sessions)}",
             f"Node count: {tree.node_count()}", f"Total size: {info.total_bytes}", f"Max depth: {len(info.by_depth)}"]  # fmt: skip
    lines += [f"Count of nodes at depth {depth + 1}: {len(paths)}" for depth, paths in enumerate(info.by_depth)]
    return lines


def _own_differences(left: Znode, right: Znode) -> list[str]:
    return [name for name in _FIELDS if getattr(left, name) != getattr(right, name)]


class _Walk:
    def __init__(self, left: TreeInfo, right: TreeInfo, bytes_threshold: int, nodes_threshold: int) -> None:
        self.left, self.right = left, right
        self.bytes_threshold, self.nodes_threshold = bytes_threshold, nodes_threshold

    def _significant(self, size: int, count: int) -> bool:
        everything = self.bytes_threshold == 0 and self.nodes_threshold == 0
        return everything or abs(size) > self.bytes_threshold or abs(count) > self.nodes_threshold

    def only(self, side: TreeInfo, name: str, path: str) -> Iterator[Line]:
        size, count = side.descendant_bytes[path], side.descendant_count[path]
        if self._significant(size, count):
            yield Line(f"Node {path} found only in {name} tree. Descendant size: {size}. Descendant count: {count}", True)

    def both(self, path: str) -> Iterator[Line]:
        delta_bytes = self.right.descendant_bytes[path] - self.left.descendant_bytes[path]
        delta_count = self.right.descendant_count[path] - self.left.descendant_count[path]
        own = _own_differences(self.left.tree.nodes[path], self.right.tree.nodes[path])
        sized = (delta_bytes or delta_count) and self._significant(delta_bytes, delta_count)
        if sized or own:
            differs = f". Differs in: {', '.join(own)}" if own else ""
            yield Line(f"Node {path} found in both trees. Delta: {delta_bytes} bytes, {delta_count} descendants{differs}", True)

    def depth(self, depth: int) -> Iterator[Line]:
        """ZooKeeper's compareNodes: a merge of both sorted layers."""
        lefts = self.left.by_depth[depth] if depth < len(self.left.by_depth) else []
        rights = self.right.by_depth[depth] if depth < len(self.right.by_depth) else []
        i = j = 0
        while i < len(lefts) or j < len(rights):
            if j == len(rights) or (i < len(lefts) and lefts[i] < rights[j]):
                yield from self.only(self.left, "left", lefts[i])
                i += 1
            elif i == len(lefts) or rights[j] < lefts[i]:
                yield from self.only(self.right, "right", rights[j])
                j += 1
            else:
                yield from self.both(lefts[i])
                i, j = i + 1, j + 1


def _session_lines(left: DataTree, right: DataTree) -> Iterator[Line]:
    only_left = left.sessions.keys() - right.sessions.keys()
    only_right = right.sessions.keys() - left.sessions.keys()
    changed = [s for s in left.sessions.keys() & right.sessions.keys() if left.sessions[s][0] != right.sessions[s][0]]
    for name, ids in (("left", only_left), ("right", only_right)):
        for session_id in sorted(ids):
            yield Line(f"Session 0x{session_id % 2**64:x} found only in {name} tree", True)
    for session_id in sorted(changed):
        yield Line(f"Session 0x{session_id % 2**64:x} found in both trees with another timeout", True)


def compare(left: TreeInfo, right: TreeInfo, bytes_threshold: int = 0, nodes_threshold: int = 0) -> Iterator[Line]:
    """Every line of the comparison, layer by layer; ``Line.difference`` marks a difference."""
    walk = _Walk(left, right, bytes_threshold, nodes_threshold)
    for depth in range(max(len(left.by_depth), len(right.by_depth))):
        yield Line(f"Analysis for depth {depth}")
        yield from walk.depth(depth)
    yield Line("Analysis for sessions")
    yield from _session_lines(left.tree, right.tree)
    yield Line("All layers compared.")
