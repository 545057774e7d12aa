"""kazoo API compatibility (signatures, exceptions, ZnodeStat) and fork safety."""

from __future__ import annotations

import inspect
import multiprocessing
import os

import pytest
from kazoo import exceptions as kz_exceptions
from kazoo.client import KazooClient
from kazoo.protocol import states as kz_states
from kazoo import security as kz_security
from kazoo.recipe.cache import TreeEvent as KzTreeEvent

import zabby
from zabby import SyncClient
from zabby.client.aio import Client
from zabby.errors import ForkedClientError

ISSUE_METHODS = [
    "__init__", "start", "stop", "restart", "close", "create", "ensure_path", "get", "set", "exists",
    "get_children", "delete", "get_acls", "set_acls", "add_auth", "sync", "transaction", "command",
    "add_listener", "remove_listener", "unchroot", "server_version",
    "create_async", "get_async", "set_async", "exists_async", "get_children_async", "delete_async",
    "get_acls_async", "set_acls_async", "sync_async", "add_auth_async", "ensure_path_async", "start_async",
]  # fmt: skip


def _compatible(kazoo_fn: object, ours: object) -> None:
    theirs = [p for p in inspect.signature(kazoo_fn).parameters.values() if p.kind != p.VAR_KEYWORD]  # type: ignore[arg-type]
    mine = list(inspect.signature(ours).parameters.values())  # type: ignore[arg-type]
    for i, param in enumerate(theirs):
        assert i < len(mine), f"{ours}: missing {param.name}"
        assert mine[i].name == param.name, f"{ours}: parameter {i} is {mine[i].name}, kazoo has {param.name}"
        assert mine[i].default == param.default, f"{ours}: default of {param.name}"
    for extra in mine[len(theirs) :]:
        assert extra.default is not inspect.Parameter.empty or extra.kind == extra.VAR_KEYWORD, f"{ours}: extra required {extra.name}"


@pytest.mark.parametrize("name", ISSUE_METHODS)
def test_sync_client_methods_match_kazoo(name: str) -> None:
    _compatible(getattr(KazooClient, name), getattr(SyncClient, name))


@pytest.mark.parametrize("name", ["create", "ensure_path", "get", "set", "exists", "get_children", "delete", "get_acls", "set_acls", "add_auth", "sync", "start", "stop", "close"])
def test_async_client_methods_match_kazoo(name: str) -> None:
    _compatible(getattr(KazooClient, name), getattr(Client, name))


def test_properties_recipes_and_transaction() -> None:
    c = SyncClient("127.0.0.1:1")
    for attr in ("client_id", "connected", "state", "client_state", "last_zxid", "Lock", "Election", "DataWatch", "ChildrenWatch", "TreeCache", "retry"):
        assert hasattr(c, attr), attr
    tx = c.transaction()
    for name in ("create", "delete", "set_data", "check", "commit", "commit_async"):
        assert hasattr(tx, name)
    _compatible(kz_security.make_acl, zabby.make_acl)
    _compatible(kz_security.make_digest_acl, zabby.make_digest_acl)
    assert zabby.make_digest_acl("u", "p", all=True) == kz_security.make_digest_acl("u", "p", all=True)
    assert list(zabby.OPEN_ACL_UNSAFE) == list(kz_security.OPEN_ACL_UNSAFE)
    c.close()


def test_exception_classes_match_kazoo() -> None:
    names = [n for n, v in vars(kz_exceptions).items() if isinstance(v, type) and issubclass(v, Exception) and v.__module__ == kz_exceptions.__name__]
    skip = {"ZookeeperStoppedError", "SASLException", "NotReadOnlyCallError", "SessionExpiredError"}
    missing = [n for n in names if not hasattr(zabby, n) and n not in skip]
    assert missing == [] or set(missing) <= {"SASLException"}, missing
    for name, code in (("NoNodeError", -101), ("NodeExistsError", -110), ("BadVersionError", -103), ("SessionExpiredError", -112), ("ConnectionLoss", -4)):
        assert getattr(zabby, name).code == code == getattr(kz_exceptions, name).code
    assert issubclass(zabby.NoNodeError, zabby.ZookeeperError) and issubclass(zabby.ZookeeperError, zabby.KazooException)


def test_states_and_znodestat_match_kazoo() -> None:
    assert zabby.ZnodeStat._fields == kz_states.ZnodeStat._fields
    assert zabby.WatchedEvent._fields == (*kz_states.WatchedEvent._fields, "zxid")  # kazoo's, then the change's zxid (zabby)
    for cls, theirs in ((zabby.KazooState, kz_states.KazooState), (zabby.KeeperState, kz_states.KeeperState), (zabby.EventType, kz_states.EventType)):
        for name, value in vars(theirs).items():
            if name.isupper():
                assert getattr(cls, name) == value
    props = [n for n, v in vars(kz_states.ZnodeStat).items() if isinstance(v, property)]
    values = list(range(1, 12))
    for prop in props:
        assert getattr(zabby.ZnodeStat(*values), prop) == getattr(kz_states.ZnodeStat(*values), prop), prop
    assert zabby.TreeEvent.NODE_ADDED == KzTreeEvent.NODE_ADDED and zabby.TreeEvent.INITIALIZED == KzTreeEvent.INITIALIZED


def _child_uses_client(client: SyncClient, out: "multiprocessing.Queue[str]") -> None:
    try:
        client.get("/")
        out.put("no error")
    except ForkedClientError as exc:
        out.put("forked:" + str(exc))
    except BaseException as exc:
        out.put(f"other: {exc!r}")
    fresh = SyncClient(client._client.hosts[0][0] + ":" + str(client._client.hosts[0][1]))
    fresh.start(timeout=10)
    out.put("fresh:" + repr(fresh.exists("/") is not None))
    fresh.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_gets_clear_error_never_hangs(client: SyncClient) -> None:
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    proc = ctx.Process(target=_child_uses_client, args=(client, out))
    proc.start()
    first = out.get(timeout=20)
    second = out.get(timeout=20)
    proc.join(20)
    assert first.startswith("forked:") and "fork" in first and "new SyncClient" in first
    assert second == "fresh:True"
    assert proc.exitcode == 0
    assert client.exists("/") is not None  # the parent's client is untouched
