"""Quotas, laid out in the tree as ZooKeeper lays them out, and kept up to date by apply.

Theory of operation: a quota on ``/a/b`` is two znodes, ``/zookeeper/quota/a/b/zookeeper_limits``
(what is allowed) and ``/zookeeper/quota/a/b/zookeeper_stats`` (what is used), both holding
ZooKeeper's ``StatsTrack`` text (``count=N,bytes=M`` then ``=;key=value`` pairs for the 3.7+
hard limits).  Anybody may write those znodes (zkCli's ``setquota`` is only a client of
them); the tree reacts as ZooKeeper's ``DataTree`` does:

* creating a limits node makes its path a *quota root*; deleting it ends the quota;
* creating a stats node fills it with the root's real usage (the root and its descendants:
  how many znodes, how many data bytes);
* every create, delete and setData under a root updates that root's stats node in the same
  apply: its data changes, its Stat does not (ZooKeeper's ``updateQuotaStat``), and the
  tree digest covers the new data like any other.

The write that governs a path is the nearest root at or above it.  Paths under
``/zookeeper`` (and ``/``) never have a quota: the stats nodes live there.

``QuotaLedger`` is prep's part: the usage of writes prepared but not applied yet, so a
pipelined burst cannot pass a hard limit that the applied tree alone would not yet show.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

QUOTA_ROOT = "/zookeeper/quota"
QUOTA_PREFIX = QUOTA_ROOT + "/"
LIMITS_NODE = "zookeeper_limits"
STATS_NODE = "zookeeper_stats"
COUNT, BYTES, COUNT_HARD, BYTES_HARD = "count", "bytes", "countHardLimit", "byteHardLimit"
UNSET = -1


class QuotaNode(Protocol):
    @property
    def data(self) -> bytes: ...
    @property
    def children(self) -> Collection[str]:
        """The children's full paths."""
        ...


class QuotaTree(Protocol):
    """What quotas need of ``zabby.tree.datatree.DataTree`` (named so, not imported: the
    tree imports this module)."""

    quota_roots: set[str]

    @property
    def nodes(self) -> Mapping[str, QuotaNode]: ...

    def set_quota_usage(self, path: str, data: bytes) -> None: ...


# ----------------------------------------------------------------- paths
def quota_node_path(path: str) -> str:
    """``/a/b`` → ``/zookeeper/quota/a/b``, the folder of the quota on ``path``."""
    return QUOTA_ROOT + path


def limits_path(path: str) -> str:
    return f"{QUOTA_ROOT}{path}/{LIMITS_NODE}"


def stats_path(path: str) -> str:
    return f"{QUOTA_ROOT}{path}/{STATS_NODE}"


def can_have_quota(path: str) -> bool:
    """Not ``/`` and nothing under ``/zookeeper``, where the quota nodes themselves live."""
    return path != "/" and path != "/zookeeper" and not path.startswith("/zookeeper/")


def subject_of(quota_node: str) -> tuple[str, str] | None:
    """``/zookeeper/quota/a/b/zookeeper_limits`` → (``/a/b``, ``zookeeper_limits``); None for
    any other path."""
    if not quota_node.startswith(QUOTA_PREFIX):
        return None
    folder, _, name = quota_node.rpartition("/")
    if name not in (LIMITS_NODE, STATS_NODE) or len(folder) <= len(QUOTA_ROOT):
        return None
    return folder[len(QUOTA_ROOT) :], name


def governing_root(roots: set[str], path: str) -> str | None:
    """The nearest quota root at or above ``path`` (ZooKeeper's ``getMaxPrefixWithQuota``)."""
    candidate = path
    while len(candidate) > 1:
        if candidate in roots:
            return candidate
        candidate = candidate[: candidate.rfind("/")]
    return None


def namespace_of(path: str) -> str:
    """The first component of ``path`` (ZooKeeper's ``PathUtils.getTopNamespace``)."""
    return path.split("/", 2)[1]


# ----------------------------------------------------------------- StatsTrack text
def parse_stats(data: bytes) -> dict[str, int]:
    """ZooKeeper's ``StatsTrack`` parser: ``key=value`` pairs split by ``,`` or ``;``; an empty
    value is -1.  The nodes are writable by anyone, so a malformed pair is skipped, never an
    error (apply must not fail on what a client wrote)."""
    values: dict[str, int] = {}
    text = data.decode("utf-8", "replace")
    for pair in text.replace(";", ",").split(","):
        key, equals, rest = pair.partition("=")
        if not key or not equals:
            continue
        number = rest.split("=", 1)[0]
        try:
            values[key] = int(number) if number else UNSET
        except ValueError:
            continue
    return values


def format_stats(values: dict[str, int]) -> bytes:
    """``StatsTrack.toString``: ``count=N,bytes=M``, then ``=`` and ``;key=value`` for the other
    keys in sorted order (the odd ``=`` keeps 3.4's parser reading the first two)."""
    text = f"count={values.get(COUNT, UNSET)},bytes={values.get(BYTES, UNSET)}"
    extra = sorted(key for key in values if key not in (COUNT, BYTES))
    if extra:
        text += "=" + "".join(f";{key}={values[key]}" for key in extra)
    return text.encode()


def usage_text(count: int, data_bytes: int) -> bytes:
    return format_stats({COUNT: count, BYTES: data_bytes})


@dataclass(frozen=True, slots=True)
class Excess:
    """One limit a write would pass."""

    root: str
    what: str  # COUNT or BYTES
    value: int  # the usage after the write
    limit: int
    hard: bool

    def message(self) -> str:
        kind = ("hard" if self.hard else "soft") + ("CountLimit" if self.what == COUNT else "ByteLimit")
        return f"Quota exceeded: {self.root} [current {self.what}={self.value}, {kind}={self.limit}]"


def excesses(root: str, limits: dict[str, int], usage: tuple[int, int], delta: tuple[int, int]) -> list[Excess]:
    """The limits of ``root`` that a write changing its (count, bytes) by ``delta`` would pass;
    a hard limit, when set, is checked instead of the soft one (ZooKeeper's ``checkQuota``)."""
    found = []
    for what, soft_key, hard_key, used, change in (
        (COUNT, COUNT, COUNT_HARD, usage[0], delta[0]),
        (BYTES, BYTES, BYTES_HARD, usage[1], delta[1]),
    ):
        hard = limits.get(hard_key, UNSET) > UNSET
        limit = limits.get(hard_key if hard else soft_key, UNSET)
        if change > 0 and limit > UNSET and used + change > limit:
            found.append(Excess(root, what, used + change, limit, hard))
    return found


# ----------------------------------------------------------------- the tree's side
def measure(tree: QuotaTree, path: str) -> tuple[int, int]:
    """(znodes, data bytes) of ``path`` and its descendants; (0, 0) if it does not exist."""
    count = data_bytes = 0
    stack = [path] if path in tree.nodes else []
    while stack:
        current = stack.pop()
        node = tree.nodes[current]
        count += 1
        data_bytes += len(node.data)
        stack.extend(node.children)
    return count, data_bytes


def usage(tree: QuotaTree, root: str) -> tuple[int, int]:
    """(count, bytes) as the stats node of ``root`` says; (0, 0) without one."""
    node = tree.nodes.get(stats_path(root))
    values = parse_stats(node.data) if node is not None else {}
    return max(values.get(COUNT, 0), 0), max(values.get(BYTES, 0), 0)


def limits(tree: QuotaTree, root: str) -> dict[str, int]:
    node = tree.nodes.get(limits_path(root))
    return parse_stats(node.data) if node is not None else {}


def node_created(tree: QuotaTree, path: str, data_bytes: int) -> None:
    """Apply's hook for a new znode: a limits node starts a quota, a stats node is filled in,
    and the usage of the root governing ``path`` grows."""
    subject = subject_of(path)
    if subject is not None and can_have_quota(subject[0]):
        root, name = subject
        if name == LIMITS_NODE:
            tree.quota_roots.add(root)
        else:
            tree.set_quota_usage(path, usage_text(*measure(tree, root)))
    _add_usage(tree, path, 1, data_bytes)


def node_deleted(tree: QuotaTree, path: str, data_bytes: int) -> None:
    _add_usage(tree, path, -1, -data_bytes)
    subject = subject_of(path)
    if subject is not None and subject[1] == LIMITS_NODE:
        tree.quota_roots.discard(subject[0])


def data_changed(tree: QuotaTree, path: str, bytes_delta: int) -> None:
    _add_usage(tree, path, 0, bytes_delta)


def _add_usage(tree: QuotaTree, path: str, count_delta: int, bytes_delta: int) -> None:
    root = governing_root(tree.quota_roots, path)
    if root is None or (count_delta == 0 and bytes_delta == 0):
        return
    stats = stats_path(root)
    node = tree.nodes.get(stats)
    if node is None:  # a limits node without its stats node: nothing to keep up to date
        return
    values = parse_stats(node.data)
    values[COUNT] = values.get(COUNT, 0) + count_delta
    values[BYTES] = values.get(BYTES, 0) + bytes_delta
    tree.set_quota_usage(stats, format_stats(values))


def rebuild(tree: QuotaTree) -> None:
    """After loading a snapshot: find the quota roots and recount their usage (ZooKeeper's
    ``setupQuota``)."""
    tree.quota_roots.clear()
    for limits_node in _quota_nodes(tree, LIMITS_NODE):
        subject = subject_of(limits_node)
        if subject is not None and can_have_quota(subject[0]):
            tree.quota_roots.add(subject[0])
    for root in sorted(tree.quota_roots):
        if stats_path(root) in tree.nodes:
            tree.set_quota_usage(stats_path(root), usage_text(*measure(tree, root)))


def _quota_nodes(tree: QuotaTree, name: str) -> Iterator[str]:
    stack = [QUOTA_ROOT] if QUOTA_ROOT in tree.nodes else []
    while stack:
        current = stack.pop()
        for child in tree.nodes[current].children:
            if child.endswith("/" + name):
                yield child
            stack.append(child)


@dataclass(frozen=True, slots=True)
class QuotaFigures:
    """One namespace's quotas, summed over its roots, for mntr and /metrics: a limit is the
    hard one when set, else the soft one (-1: none)."""

    namespace: str
    count_limit: int
    bytes_limit: int
    count_usage: int
    bytes_usage: int


def figures(tree: QuotaTree) -> tuple[QuotaFigures, ...]:
    totals: dict[str, list[int]] = {}
    for root in sorted(tree.quota_roots):
        allowed = limits(tree, root)
        used = usage(tree, root)
        entry = totals.setdefault(namespace_of(root), [0, 0, 0, 0])
        for index, (hard, soft) in enumerate(((COUNT_HARD, COUNT), (BYTES_HARD, BYTES))):
            limit = allowed.get(hard, UNSET) if allowed.get(hard, UNSET) > UNSET else allowed.get(soft, UNSET)
            entry[index] += max(limit, 0)
            entry[index + 2] += used[index]
    return tuple(QuotaFigures(namespace, *values) for namespace, values in sorted(totals.items()))


# ----------------------------------------------------------------- prep's side
class QuotaLedger:
    """The (count, bytes) that prepared, not yet applied writes add to each quota root.

    Ordering: ``add`` in zxid order; ``applied(zxid)`` once the tree holds every txn up to
    ``zxid`` (its stats nodes then count them); ``rollback(mark)`` drops what a failed multi
    added after ``mark()``.
    """

    def __init__(self) -> None:
        self._entries: deque[tuple[int, str, int, int]] = deque()
        self._totals: dict[str, tuple[int, int]] = {}

    def in_flight(self, root: str) -> tuple[int, int]:
        return self._totals.get(root, (0, 0))

    def add(self, zxid: int, root: str, count_delta: int, bytes_delta: int) -> tuple[int, int]:
        """Count a prepared write in; the root's (count, bytes) in flight with it."""
        self._entries.append((zxid, root, count_delta, bytes_delta))
        return self._change(root, count_delta, bytes_delta)

    def drop_last(self) -> None:
        """Take the last ``add`` back (a write refused after it was counted)."""
        self.rollback(len(self._entries) - 1)

    def applied(self, zxid: int) -> None:
        """A run of entries of one root (a batch of writes all under ``TREE``) is taken off
        its totals at once: one ``_change`` a batch, not one a txn."""
        entries = self._entries
        run_root, run_count, run_bytes = None, 0, 0
        while entries and entries[0][0] <= zxid:
            _, root, count_delta, bytes_delta = entries.popleft()
            if root != run_root:
                if run_root is not None:
                    self._change(run_root, -run_count, -run_bytes)
                run_root, run_count, run_bytes = root, 0, 0
            run_count += count_delta
            run_bytes += bytes_delta
        if run_root is not None:
            self._change(run_root, -run_count, -run_bytes)

    def mark(self) -> int:
        return len(self._entries)

    def rollback(self, mark: int) -> None:
        while len(self._entries) > mark:
            _, root, count_delta, bytes_delta = self._entries.pop()
            self._change(root, -count_delta, -bytes_delta)

    def reset(self) -> None:
        self._entries.clear()
        self._totals.clear()

    def _change(self, root: str, count_delta: int, bytes_delta: int) -> tuple[int, int]:
        count, data_bytes = self._totals.get(root, (0, 0))
        count, data_bytes = count + count_delta, data_bytes + bytes_delta
        if count == 0 and data_bytes == 0:
            self._totals.pop(root, None)
        else:
            self._totals[root] = (count, data_bytes)
        return count, data_bytes
