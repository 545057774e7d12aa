"""Every zkCli command of the shell, against a real server, output captured in memory."""

from __future__ import annotations

import re

from zabby import SyncClient
from zabby.cli import BufferWriter, Shell
from zabby.cli.shell import FAILED, NOT_CONNECTED, OK, USAGE
from zabby.testing import ServerProcess, free_port

from .helpers import run

STAT_LINE = re.compile(
    r"cZxid = 0x[0-9a-f]+\n"
    r"ctime = \w{3} \w{3} \d\d \d\d:\d\d:\d\d \S+ \d{4}\n"
    r"mZxid = 0x[0-9a-f]+\n"
    r"mtime = \w{3} \w{3} \d\d \d\d:\d\d:\d\d \S+ \d{4}\n"
    r"pZxid = 0x[0-9a-f]+\n"
    r"cversion = -?\d+\n"
    r"dataVersion = -?\d+\n"
    r"aclVersion = -?\d+\n"
    r"ephemeralOwner = 0x[0-9a-f]+\n"
    r"dataLength = \d+\n"
    r"numChildren = \d+\n"
)


def stat_field(out: str, name: str) -> str:
    match = re.search(rf"^{name} = (.*)$", out, re.M)
    assert match, out
    return match.group(1)


def test_connect_prints_session_event_and_prompt(zabby_server: ServerProcess) -> None:
    sh = Shell(zabby_server.hosts, BufferWriter(), timeout_s=5.0)
    try:
        assert sh.prompt() == f"[zk: {zabby_server.hosts}(CLOSED) 0] "
        assert sh.connect()
        assert sh.writer.stdout == "\nWATCHER::\n\nWatchedEvent state:SyncConnected type:None path:null\n"  # type: ignore[attr-defined]
        assert sh.prompt() == f"[zk: {zabby_server.hosts}(CONNECTED) 0] "
        run(sh, "ls /")
        assert sh.prompt().endswith("(CONNECTED) 1] ")
    finally:
        sh.close()


def test_create_variants(shell: Shell, other: SyncClient) -> None:
    assert run(shell, "create /a hello") == (OK, "Created /a\n", "")
    assert other.get("/a")[0] == b"hello"
    assert run(shell, "create /a") == (FAILED, "", "Node already exists: /a\n")
    assert run(shell, "create /no/such") == (FAILED, "", "Node does not exist: /no/such\n")
    assert run(shell, "create /a/empty") == (OK, "Created /a/empty\n", "")
    assert other.get("/a/empty")[0] == b""
    assert run(shell, 'create /a/q "two words"')[0] == OK
    assert other.get("/a/q")[0] == b"two words"

    status, out, _ = run(shell, "create -s /a/seq- x")
    assert status == OK and re.fullmatch(r"Created /a/seq-\d{10}\n", out)
    status, out, _ = run(shell, "create -s -e /a/eseq-")
    assert status == OK and re.fullmatch(r"Created /a/eseq-\d{10}\n", out)
    eseq = out.split()[1]
    assert other.exists(eseq).ephemeralOwner == shell.client.client_id[0]  # type: ignore[union-attr]

    assert run(shell, "create -e /eph")[0] == OK
    assert run(shell, "create /eph/child") == (FAILED, "", "Ephemerals cannot have children: /eph/child\n")
    assert run(shell, "create -c /cont")[0] == OK
    assert run(shell, "create -t 60000 /ttl")[0] == OK
    _, out, _ = run(shell, "stat /ttl")
    assert stat_field(out, "ephemeralOwner") == "0x0"  # ZooKeeper shows only sessions as owners

    assert run(shell, "create -c -e /bad") == (USAGE, "", "-c cannot be combined with -s or -e. Containers cannot be ephemeral or sequential.\n")
    assert run(shell, "create -t 10 -e /bad") == (USAGE, "", "TTLs cannot be used with Ephemeral znodes\n")
    assert run(shell, "create -t 10 -c /bad") == (USAGE, "", "TTLs cannot be used with Container znodes\n")
    assert run(shell, "create -t x /bad")[0] == USAGE
    assert run(shell, "create") == (USAGE, "", "create [-s] [-e] [-c] [-t ttl] path [data] [acl]\n")
    assert run(shell, "create -z /bad") == (USAGE, "", "Unrecognized option: -z\n")
    assert run(shell, "create nopath") == (USAGE, "", "Path must start with / character\n")
    assert run(shell, "create /a/") == (USAGE, "", "Path must not end with / character\n")
    assert run(shell, "create /a//b") == (USAGE, "", "empty node name specified @2\n")

    assert run(shell, "create /acl x world:anyone:r")[0] == OK
    assert run(shell, "getAcl /acl")[1] == "'world,'anyone\n: r\n"
    assert run(shell, "create /badacl x world:anyone") == (USAGE, "", "world:anyone does not have the form scheme:id:perm\n")
    assert run(shell, "create /badacl x world:anyone:rz") == (USAGE, "", "Unknown perm type: z\n")
    assert run(shell, "create /badacl x world:nobody:r") == (FAILED, "", "Acl is not valid : /badacl\n")


def test_ls(shell: Shell, other: SyncClient) -> None:
    for path in ("/d", "/d/b", "/d/a", "/d/c", "/d/a/x"):
        other.create(path)
    assert run(shell, "ls /d") == (OK, "[a, b, c]\n", "")
    assert run(shell, "ls /d/c") == (OK, "[]\n", "")
    assert run(shell, "ls /") == (OK, "[d, zookeeper]\n", "")
    assert run(shell, "ls /nope") == (FAILED, "", "Node does not exist: /nope\n")
    status, out, _ = run(shell, "ls -s /d")
    assert status == OK and out.startswith("[a, b, c]\n")
    assert STAT_LINE.fullmatch(out.split("\n", 1)[1])
    assert stat_field(out, "numChildren") == "3"
    assert run(shell, "ls -R /d") == (OK, "/d\n/d/a\n/d/a/x\n/d/b\n/d/c\n", "")
    assert run(shell, "ls -R /nope") == (FAILED, "", "Node does not exist: /nope\n")
    assert run(shell, "ls") == (USAGE, "", "ls [-s] [-w] [-R] path\n")

    assert run(shell, "ls -w /d")[0] == OK
    other.create("/d/new")
    assert shell.writer.wait_for("WatchedEvent state:SyncConnected type:NodeChildrenChanged path:/d")  # type: ignore[attr-defined]
    assert "\nWATCHER::\n\nWatchedEvent state:SyncConnected type:NodeChildrenChanged path:/d\n" in shell.writer.stdout  # type: ignore[attr-defined]


def test_get_set_stat(shell: Shell, other: SyncClient) -> None:
    other.create("/x", b"v0")
    assert run(shell, "get /x") == (OK, "v0\n", "")
    status, out, _ = run(shell, "get -s /x")
    assert status == OK and out.startswith("v0\n")
    assert STAT_LINE.fullmatch(out[3:])
    stat = other.exists("/x")
    assert stat_field(out, "cZxid") == f"0x{stat.czxid:x}"
    assert stat_field(out, "dataLength") == "2"
    assert stat_field(out, "dataVersion") == "0"
    assert stat_field(out, "ephemeralOwner") == "0x0"

    assert run(shell, "set -v 5 /x v1") == (FAILED, "", "version No is not valid : /x\n")
    assert run(shell, "set -v 0 /x v1") == (OK, "", "")
    assert other.get("/x")[0] == b"v1"
    status, out, _ = run(shell, "set -s /x v2")
    assert status == OK and STAT_LINE.fullmatch(out) and stat_field(out, "dataVersion") == "2"
    assert run(shell, "set /nope v") == (FAILED, "", "Node does not exist: /nope\n")
    assert run(shell, "set /x") == (USAGE, "", "set [-s] [-v version] path data\n")
    assert run(shell, "set -v abc /x v")[0] == USAGE

    status, out, _ = run(shell, "stat /x")
    assert status == OK and STAT_LINE.fullmatch(out) and stat_field(out, "dataVersion") == "2"
    assert run(shell, "stat /nope") == (FAILED, "", "Node does not exist: /nope\n")
    assert run(shell, "get /nope") == (FAILED, "", "Node does not exist: /nope\n")

    assert run(shell, "get -w /x")[0] == OK
    other.set("/x", b"changed")
    assert shell.writer.wait_for("WatchedEvent state:SyncConnected type:NodeDataChanged path:/x")  # type: ignore[attr-defined]
    assert run(shell, "stat -w /later")[0] == FAILED  # sets an exists watch all the same
    other.create("/later")
    assert shell.writer.wait_for("WatchedEvent state:SyncConnected type:NodeCreated path:/later")  # type: ignore[attr-defined]


def test_delete_and_deleteall(shell: Shell, other: SyncClient) -> None:
    other.create("/t")
    other.create("/t/a")
    assert run(shell, "delete /t") == (FAILED, "", "Node not empty: /t\n")
    assert run(shell, "delete -v 3 /t/a") == (FAILED, "", "version No is not valid : /t/a\n")
    assert run(shell, "delete -v 0 /t/a") == (OK, "", "")
    assert run(shell, "delete /t") == (OK, "", "")
    assert run(shell, "delete /t") == (FAILED, "", "Node does not exist: /t\n")

    for i in range(5):
        other.create(f"/tree/n{i}/leaf", makepath=True)
    assert run(shell, "deleteall /tree") == (OK, "", "")
    assert other.exists("/tree") is None
    for i in range(5):
        other.create(f"/tree2/n{i}/leaf", makepath=True)
    assert run(shell, "deleteall /tree2 -b 3") == (OK, "", "")
    assert other.exists("/tree2") is None
    assert run(shell, "deleteall /tree") == (FAILED, "", "Node does not exist: /tree\n")


def test_sync_ephemerals_children_number(shell: Shell, other: SyncClient) -> None:
    assert run(shell, "sync /") == (OK, "Sync is OK\n", "")
    assert run(shell, "getEphemerals") == (OK, "[]\n", "")
    run(shell, "create -e /e2")
    run(shell, "create -e /e1")
    other.create("/p/q/r", makepath=True)
    assert run(shell, "getEphemerals") == (OK, "[/e1, /e2]\n", "")
    assert run(shell, "getEphemerals /e1") == (OK, "[/e1]\n", "")
    assert run(shell, "getAllChildrenNumber /p") == (OK, "2\n", "")
    assert run(shell, "getAllChildrenNumber /nope") == (FAILED, "", "Node does not exist: /nope\n")


def test_acls_auth_whoami(shell: Shell, other: SyncClient) -> None:
    other.create("/s", b"secret")
    status, out, _ = run(shell, "getAcl /s")
    assert (status, out) == (OK, "'world,'anyone\n: cdrwa\n")
    status, out, _ = run(shell, "getAcl -s /s")
    assert out.startswith("'world,'anyone\n: cdrwa\n") and STAT_LINE.fullmatch(out.split("\n", 2)[2])

    assert run(shell, "whoami") == (OK, "Auth scheme: User\nip: 127.0.0.1\n", "")
    assert run(shell, "addauth digest alice:pw") == (OK, "", "")
    assert run(shell, "whoami")[1] == "Auth scheme: User\nip: 127.0.0.1\ndigest: alice:V55/p2T0OpjQ+low3NVAH4aLvm0=\n"

    status, out, _ = run(shell, "setAcl -s /s auth::cdrwa")
    assert status == OK and stat_field(out, "aclVersion") == "1"
    assert run(shell, "getAcl /s")[1] == "'digest,'alice:V55/p2T0OpjQ+low3NVAH4aLvm0=\n: cdrwa\n"
    assert run(shell, "get /s") == (OK, "secret\n", "")
    assert run(shell, "setAcl -v 0 /s world:anyone:r") == (FAILED, "", "version No is not valid : /s\n")
    # another session without the credential is refused
    sh2 = Shell(shell.hosts, BufferWriter(), timeout_s=5.0)
    try:
        assert sh2.connect()
        assert run(sh2, "get /s") == (FAILED, "", "Insufficient permission : /s\n")
        assert run(sh2, "setAcl /s world:anyone:cdrwa") == (FAILED, "", "Insufficient permission : /s\n")
    finally:
        sh2.close()

    for path in ("/r", "/r/a", "/r/a/b"):
        other.create(path)
    assert run(shell, "setAcl -R /r world:anyone:rw") == (OK, "", "")
    for path in ("/r", "/r/a", "/r/a/b"):
        assert [(a.perms, a.id.scheme, a.id.id) for a in other.get_acls(path)[0]] == [(3, "world", "anyone")]
    assert run(shell, "getAcl /r/a/b")[1] == "'world,'anyone\n: rw\n"
    assert run(shell, "setAcl /r") == (USAGE, "", "setAcl [-s] [-v version] [-R] path acl\n")


def test_add_and_remove_watches(shell: Shell, other: SyncClient) -> None:
    other.create("/w")
    removed = "WatchedEvent state:SyncConnected type:PersistentWatchRemoved path:/w"
    assert run(shell, "addWatch /w") == (OK, "", "")  # PERSISTENT_RECURSIVE by default
    other.create("/w/a")
    other.set("/w/a", b"1")
    w = shell.writer
    assert w.wait_for("type:NodeCreated path:/w/a")  # type: ignore[attr-defined]
    assert w.wait_for("type:NodeDataChanged path:/w/a")  # type: ignore[attr-defined]
    assert "NodeChildrenChanged" not in w.stdout  # type: ignore[attr-defined]
    status, out, _ = run(shell, "removewatches /w")
    assert status == OK
    assert removed in out or w.wait_for(removed)  # type: ignore[attr-defined]
    w.take()  # type: ignore[attr-defined]
    other.create("/w/b")
    run(shell, "sync /w")  # anything pending for the watch would have arrived by now
    assert "NodeCreated path:/w/b" not in w.stdout  # type: ignore[attr-defined]

    assert run(shell, "addWatch -m PERSISTENT /w") == (OK, "", "")
    other.create("/w/c")
    other.set("/w", b"x")
    assert w.wait_for("type:NodeChildrenChanged path:/w")  # type: ignore[attr-defined]
    assert w.wait_for("type:NodeDataChanged path:/w")  # type: ignore[attr-defined]
    assert "path:/w/c" not in w.stdout  # type: ignore[attr-defined]
    status, out, err = run(shell, "removewatches /w -a")
    assert (status, err) == (OK, "")
    assert removed in out or w.wait_for(removed)  # type: ignore[attr-defined]
    assert run(shell, "addWatch -m SOMETIMES /w") == (USAGE, "", "Unsupported mode: SOMETIMES\n")
    assert run(shell, "removewatches /w -c -d") == (USAGE, "", "removewatches path [-c|-d|-a] [-l]\n")

    assert run(shell, "get -w /w")[0] == OK
    status, out, err = run(shell, "removewatches /w -d")
    assert (status, err) == (OK, "")
    data_removed = "type:DataWatchRemoved path:/w"
    assert data_removed in out or w.wait_for(data_removed)  # type: ignore[attr-defined]
    assert run(shell, "removewatches /w -d")[0] == FAILED  # no data watch any more


def test_printwatches(shell: Shell, other: SyncClient) -> None:
    assert run(shell, "printwatches") == (OK, "printwatches is on\n", "")
    assert run(shell, "printwatches off") == (OK, "", "")
    assert run(shell, "printwatches") == (OK, "printwatches is off\n", "")
    assert run(shell, "printwatches maybe") == (USAGE, "", "printwatches on|off\n")
    other.create("/pw")
    run(shell, "get -w /pw")
    other.set("/pw", b"1")
    run(shell, "sync /pw")
    assert not shell.writer.wait_for("WATCHER::", 0.3)  # type: ignore[attr-defined]
    run(shell, "printwatches on")
    run(shell, "get -w /pw")
    other.set("/pw", b"2")
    assert shell.writer.wait_for("type:NodeDataChanged path:/pw")  # type: ignore[attr-defined]


def test_config(shell: Shell) -> None:
    status, out, _ = run(shell, "config")
    assert status == OK and out.endswith("\n")
    status, out, _ = run(shell, "config -s")
    assert status == OK and STAT_LINE.search(out)
    assert run(shell, "config -c")[0] == OK


def test_history_and_redo(shell: Shell, other: SyncClient) -> None:
    run(shell, "create /h one")  # 0
    run(shell, "get /h")  # 1
    other.set("/h", b"two")
    assert run(shell, "redo 1") == (OK, "two\n", "")  # 2
    assert run(shell, "history") == (OK, "0 - create /h one\n1 - get /h\n2 - get /h\n3 - history\n", "")
    assert run(shell, "redo 99") == (USAGE, "", "Command index out of range\n")
    assert run(shell, "redo 3")[0] == OK  # history again
    for _ in range(12):
        run(shell, "sync /")
    _, out, _ = run(shell, "history")
    lines = out.splitlines()
    assert len(lines) == 11 and lines[-1] == f"{shell.command_count - 1} - history"


def test_close_connect_quit(shell: Shell, zabby_server: ServerProcess) -> None:
    assert run(shell, "create -e /mine")[0] == OK
    status, out, _ = run(shell, "close")
    assert (status, out) == (OK, "\nWATCHER::\n\nWatchedEvent state:Closed type:None path:null\n")
    assert shell.prompt().startswith(f"[zk: {zabby_server.hosts}(CLOSED) ")
    assert run(shell, "ls /") == (NOT_CONNECTED, "Not connected\n", "")
    status, out, _ = run(shell, "connect")
    assert status == OK and "state:SyncConnected type:None" in out
    assert run(shell, "ls /") == (OK, "[zookeeper]\n", "")  # the ephemeral went with the old session
    status, out, _ = run(shell, f"connect {zabby_server.hosts}")
    assert status == OK and "(CONNECTED)" in shell.prompt()
    shell.connect_timeout_s = 1.0
    status, _, err = run(shell, f"connect 127.0.0.1:{free_port()}")
    assert status == NOT_CONNECTED and "Unable to connect" in err
    assert "(CLOSED)" in shell.prompt()
    assert run(shell, f"connect {zabby_server.hosts}")[0] == OK
    assert run(shell, "quit")[0] == OK
    assert shell.done and shell.client is None


def test_help_version_unknown(shell: Shell) -> None:
    status, out, _ = run(shell, "help")
    assert status == OK and out.startswith("ZooKeeper -server host:port")
    for usage in ("\tls [-s] [-w] [-R] path\n", "\tcreate [-s] [-e] [-c] [-t ttl] path [data] [acl]\n", "\tget [-s] [-w] path\n",
                  "\tset [-s] [-v version] path data\n", "\tsetAcl [-s] [-v version] [-R] path acl\n", "\tredo cmdno\n"):  # fmt: skip
        assert usage in out
    assert run(shell, "version")[1].startswith("ZooKeeper CLI version: zabby ")
    status, _, err = run(shell, "frobnicate /")
    assert status == USAGE and err.startswith("Command not found: frobnicate\nZooKeeper -server")
    assert run(shell, "   ") == (OK, "", "")
    assert run(shell, "exit")[0] == OK
    assert shell.done


def test_srvr_all_in_shell(shell: Shell, zabby_server: ServerProcess) -> None:
    status, out, _ = run(shell, "srvr-all")
    assert status == OK
    header, row = out.splitlines()
    assert header.split()[:3] == ["HOST", "MODE", "ZXID"]
    assert row.split()[:2] == [zabby_server.hosts, "standalone"]
