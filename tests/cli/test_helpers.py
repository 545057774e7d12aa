"""The pure parts: option parsing, ACL text, StatPrinter, event text, paths, completion."""

from __future__ import annotations

import pytest

from zabby import SyncClient
from zabby.cli import Shell
from zabby.cli.completion import ShellCompleter, complete
from zabby.cli.shell import (
    UsageError,
    client_connect_string,
    format_event,
    format_stat,
    hex64,
    parse_acl,
    parse_options,
    perm_string,
    split_line,
    validate_path,
)
from zabby.client.security import ACL, Id
from zabby.client.states import EventType, KeeperState, WatchedEvent, ZnodeStat
from zabby.testing import ServerProcess
from zabby.wire.fourletter import parse_mntr, parse_srvr


def test_parse_options() -> None:
    assert parse_options(["-s", "/a"], "sw") == ({"s": ""}, ["/a"])
    assert parse_options(["-sw", "/a"], "sw") == ({"s": "", "w": ""}, ["/a"])
    assert parse_options(["-v", "3", "/a", "data"], "sv:") == ({"v": "3"}, ["/a", "data"])
    assert parse_options(["-v3", "/a"], "sv:") == ({"v": "3"}, ["/a"])
    assert parse_options(["/a", "-c"], "cdal") == ({"c": ""}, ["/a"])  # options after the path
    assert parse_options(["/a", "--", "-s"], "s") == ({}, ["/a", "-s"])
    assert parse_options(["/a", "-5"], "s") == ({}, ["/a", "-5"])
    with pytest.raises(UsageError, match="Unrecognized option: -x"):
        parse_options(["-x", "/a"], "s")
    with pytest.raises(UsageError, match="Missing argument for option: v"):
        parse_options(["/a", "-v"], "v:")


def test_split_line() -> None:
    assert split_line('create /a "hello world"') == ["create", "/a", "hello world"]
    assert split_line("set /a 'x y'") == ["set", "/a", "x y"]
    assert split_line('set /a "unbalanced') == ["set", "/a", '"unbalanced']


def test_acl_text() -> None:
    assert parse_acl("world:anyone:cdrwa") == [ACL(31, Id("world", "anyone"))]
    assert parse_acl("digest:u:hash=:r,ip:10.0.0.0/8:rw") == [ACL(1, Id("digest", "u:hash=")), ACL(3, Id("ip", "10.0.0.0/8"))]
    assert parse_acl("auth::a") == [ACL(16, Id("auth", ""))]
    with pytest.raises(UsageError, match="does not have the form scheme:id:perm"):
        parse_acl("world")
    with pytest.raises(UsageError, match="Unknown perm type: q"):
        parse_acl("world:anyone:rq")
    assert perm_string(31) == "cdrwa"
    assert perm_string(1 | 16) == "ra"
    assert perm_string(0) == ""


def test_stat_and_event_text() -> None:
    stat = ZnodeStat(czxid=0x100000002, mzxid=0x100000003, ctime=0, mtime=1000, version=4, cversion=5,
                     aversion=6, ephemeralOwner=-(2**56) + 7, dataLength=8, numChildren=9, pzxid=0x10)  # fmt: skip
    text = format_stat(stat)
    lines = text.splitlines()
    assert [line.split(" = ")[0] for line in lines] == [
        "cZxid", "ctime", "mZxid", "mtime", "pZxid", "cversion", "dataVersion", "aclVersion", "ephemeralOwner", "dataLength", "numChildren",
    ]  # fmt: skip
    assert lines[0] == "cZxid = 0x100000002"
    assert lines[4] == "pZxid = 0x10"
    assert lines[8] == "ephemeralOwner = 0xff00000000000007"
    assert lines[5:8] == ["cversion = 5", "dataVersion = 4", "aclVersion = 6"]
    assert hex64(0) == "0" and hex64(-1) == "ffffffffffffffff"
    assert format_event(WatchedEvent(EventType.CHANGED, KeeperState.CONNECTED, "/x")) == "WatchedEvent state:SyncConnected type:NodeDataChanged path:/x"
    assert format_event(WatchedEvent(EventType.NONE, KeeperState.EXPIRED_SESSION, None)) == "WatchedEvent state:Expired type:None path:null"
    assert format_event(WatchedEvent(EventType.CHILD, KeeperState.CONNECTED, "/")) == "WatchedEvent state:SyncConnected type:NodeChildrenChanged path:/"


def test_validate_path() -> None:
    for good in ("/", "/a", "/a/b.c", "/a/..b"):
        validate_path(good)
    validate_path("/a/", sequential=True)
    for bad, message in (("", "Path length must be > 0"), ("a", "Path must start with / character"),
                         ("/a/", "Path must not end with / character"), ("/a//b", "empty node name specified @2"),
                         ("/a/./b", "relative paths not allowed @2"), ("/a\x01", "invalid character @2")):  # fmt: skip
        with pytest.raises(UsageError, match=message):
            validate_path(bad)


def test_config_connect_string() -> None:
    config = "server.1=10.0.0.1:2888:3888:participant;0.0.0.0:2181\nserver.2=h2:2888:3888;10.0.0.2:2182\nversion=100000000\n"
    assert client_connect_string(config) == "10.0.0.1:2181,10.0.0.2:2182"
    assert client_connect_string("") == ""


def test_parse_four_letter_words() -> None:
    srvr = "Zookeeper version: 3.8.4\nLatency min/avg/max: 0/0.5/3\nConnections: 2\nZxid: 0x10\nMode: leader\nNode count: 5\n"
    fields = parse_srvr(srvr)
    assert fields["Mode"] == "leader" and fields["Latency min/avg/max"] == "0/0.5/3" and fields["Node count"] == "5"
    assert parse_mntr("zk_server_state\tfollower\nzk_znode_count\t7\n") == {"zk_server_state": "follower", "zk_znode_count": "7"}


def test_completion(zabby_server: ServerProcess) -> None:
    with SyncClient(zabby_server.hosts) as client:
        for path in ("/app", "/app/alpha", "/app/beta", "/apple"):
            client.create(path)
    sh = Shell(zabby_server.hosts, timeout_s=5.0)
    try:
        assert sh.connect()
        assert complete(sh, "") == ("", sh.command_names())
        assert complete(sh, "get") == ("get", ["get", "getAcl", "getAllChildrenNumber", "getEphemerals"])
        assert complete(sh, "ls /ap") == ("/ap", ["/app", "/apple"])
        assert complete(sh, "ls -s /app/") == ("/app/", ["/app/alpha", "/app/beta"])
        assert complete(sh, "get /app/b") == ("/app/b", ["/app/beta"])
        assert complete(sh, "get /nope/x") == ("/nope/x", [])
        assert complete(sh, "ls ") == ("", ["/app", "/apple", "/zookeeper"])
        assert complete(sh, "printwatches o") == ("o", ["on", "off"])
        assert complete(sh, "addWatch -m PERSISTENT_") == ("PERSISTENT_", ["PERSISTENT_RECURSIVE"])

        from prompt_toolkit.completion import CompleteEvent
        from prompt_toolkit.document import Document

        got = list(ShellCompleter(sh).get_completions(Document("stat /app/a"), CompleteEvent(completion_requested=True)))
        assert [(c.text, c.start_position) for c in got] == [("/app/alpha", -len("/app/a"))]
        sh.disconnect()
        assert complete(sh, "ls /ap") == ("/ap", [])  # no session: no path completion, no error
    finally:
        sh.close()
