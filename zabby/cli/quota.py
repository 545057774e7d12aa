"""zkCli's quota commands (``SetQuotaCommand``, ``ListQuotaCommand``, ``DelQuotaCommand`` of
ZooKeeper 3.8) as plain client calls: a quota is the znodes under ``/zookeeper/quota``
(``zabby.tree.quota``), which the server keeps up to date and, with
``zookeeper.enforceQuota``, enforces.  Messages and output are zkCli's.
"""

from __future__ import annotations

from typing import Any

from zabby import errors as E
from zabby.tree import quota

from .output import Writer

LIMIT_KEYS = {"n": quota.COUNT, "b": quota.BYTES, "N": quota.COUNT_HARD, "B": quota.BYTES_HARD}


class QuotaError(Exception):
    """A quota command cannot go on; ``str()`` is zkCli's message."""


def set_quota(client: Any, path: str, letter: str, value: int, writer: Writer) -> None:
    """``setquota -n|-b|-N|-B value path``: create the quota, or change one of its limits."""
    if not quota.can_have_quota(path):
        raise QuotaError(f"{path}: a quota cannot be set on / or under /zookeeper")
    if client.exists(path) is None:
        raise QuotaError(f"{path} does not exist.")
    _check_no_nested_quota(client, path)
    key = LIMIT_KEYS[letter]
    limits_path, stats_path = quota.limits_path(path), quota.stats_path(path)
    if client.exists(limits_path) is None:
        limits = {name: quota.UNSET for name in LIMIT_KEYS.values()} | {key: value}
        client.ensure_path(quota.quota_node_path(path))
        client.create(limits_path, quota.format_stats(limits))
        client.create(stats_path, quota.usage_text(0, 0))  # the server fills in the usage
    else:
        data, _ = client.get(limits_path)
        limits = quota.parse_stats(data) | {key: value}
        client.set(limits_path, quota.format_stats(limits))
    usage = quota.parse_stats(client.get(stats_path)[0])
    _warn_if_below_usage(limits, usage, writer)


def _check_no_nested_quota(client: Any, path: str) -> None:
    """One quota per root-to-leaf path: none above ``path``, none below it."""
    parts = path.strip("/").split("/")
    for depth in range(1, len(parts)):
        parent = "/" + "/".join(parts[:depth])
        if client.exists(quota.limits_path(parent)) is not None:
            raise QuotaError(f"{path} has a parent {parent} which has a quota")
    for child in _quotas_below(client, quota.quota_node_path(path)):
        if child != path:
            raise QuotaError(f"{path} has a child {child} which has a quota")


def _quotas_below(client: Any, folder: str) -> list[str]:
    """The paths with a quota at or under the quota folder ``folder``."""
    found, stack = [], [folder]
    while stack:
        current = stack.pop()
        try:
            children = client.get_children(current)
        except E.NoNodeError:
            continue
        if quota.LIMITS_NODE in children:
            found.append(current[len(quota.QUOTA_ROOT) :])
        stack.extend(f"{current}/{name}" for name in children if name not in (quota.LIMITS_NODE, quota.STATS_NODE))
    return found


def _warn_if_below_usage(limits: dict[str, int], usage: dict[str, int], writer: Writer) -> None:
    for what, soft, hard in (("count", quota.COUNT, quota.COUNT_HARD), ("bytes", quota.BYTES, quota.BYTES_HARD)):
        used = usage.get(soft, 0)
        if any(-1 < limits.get(key, quota.UNSET) < used for key in (soft, hard)):
            writer.out(f"[Warning]: the {what} quota you create is less than the existing {what}:{used}\n")


def list_quota(client: Any, path: str, writer: Writer) -> None:
    """``listquota path``: the limits and the usage."""
    limits_path = quota.limits_path(path)
    writer.err(f"absolute path is {limits_path}\n")
    try:
        limits, _ = client.get(limits_path)
        usage, _ = client.get(quota.stats_path(path))
    except E.NoNodeError:
        raise QuotaError(f"quota for {path} does not exist.") from None
    writer.out(f"Output quota for {path} {limits.decode()}\nOutput stat for {path} {usage.decode()}\n")


def del_quota(client: Any, path: str, letter: str | None) -> None:
    """``delquota [-n|-b|-N|-B] path``: unset one limit, or remove the quota and the folders it
    leaves empty."""
    limits_path = quota.limits_path(path)
    try:
        data, _ = client.get(limits_path)
    except E.NoNodeError:
        raise QuotaError(f"Quota does not exist for {path}") from None
    if letter is not None:
        client.set(limits_path, quota.format_stats(quota.parse_stats(data) | {LIMIT_KEYS[letter]: quota.UNSET}))
        return
    folder = quota.quota_node_path(path)
    for name in (quota.LIMITS_NODE, quota.STATS_NODE):
        try:
            client.delete(f"{folder}/{name}")
        except E.NoNodeError:
            pass
    while folder != quota.QUOTA_ROOT and not client.get_children(folder):
        client.delete(folder)
        folder = folder[: folder.rfind("/")]
