"""The zkCli.sh command set over one ``SyncClient``, writing through a ``Writer``.

``Shell.execute(line)`` runs one command line and returns an exit status (``OK`` = 0,
``FAILED`` = 1 for a server-side error such as NoNode, ``USAGE`` = 2 for bad arguments,
``NOT_CONNECTED`` = 3).  Every command is one entry of ``COMMANDS``: its usage line, its
getopt-style option letters, how many positional arguments it takes, and a small handler
method ``_cmd_<name>``.  Messages and output shapes are zkCli's (``cli/*Command.java``,
``CliWrapperException``, ``StatPrinter``, ``AclParser``, ``ZooKeeperMain``).

Watch events (from ``ls -w``, ``get -w``, ``stat -w``, ``addWatch``) and session events are
printed from the client's callback thread as zkCli's watcher does::

    \nWATCHER::\n\nWatchedEvent state:SyncConnected type:NodeDataChanged path:/x\n
"""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zabby import errors as E
from zabby._version import __version__
from zabby.client.exceptions import KazooTimeoutError
from zabby.client.security import ACL, Id
from zabby.client.states import EventType, KazooState, KeeperState, WatchedEvent, ZnodeStat
from zabby.client.sync import SyncClient
from zabby.membership import Membership, MembershipError
from zabby.opcodes import AddWatchMode, WatcherType

from . import quota as quota_cmds
from . import status as status_mod
from .output import StreamWriter, Writer

OK = 0
FAILED = 1
USAGE = 2
NOT_CONNECTED = 3

HISTORY_SHOWN = 10
_ANNOUNCE_WAIT_S = 1.0

# ZooKeeper's WatchedEvent.toString names.
_EVENT_STATE = {
    KeeperState.CONNECTED: "SyncConnected",
    KeeperState.CONNECTED_RO: "ConnectedReadOnly",
    KeeperState.CONNECTING: "Disconnected",
    KeeperState.EXPIRED_SESSION: "Expired",
    KeeperState.CLOSED: "Closed",
    KeeperState.AUTH_FAILED: "AuthFailed",
}
_EVENT_TYPE = {
    EventType.NONE: "None",
    EventType.CREATED: "NodeCreated",
    EventType.DELETED: "NodeDeleted",
    EventType.CHANGED: "NodeDataChanged",
    EventType.CHILD: "NodeChildrenChanged",
    EventType.DATA_WATCH_REMOVED: "DataWatchRemoved",
    EventType.CHILD_WATCH_REMOVED: "ChildWatchRemoved",
    EventType.PERSISTENT_WATCH_REMOVED: "PersistentWatchRemoved",
}
# ZooKeeper.States names, as shown in the prompt.
_PROMPT_STATE = {
    KeeperState.CONNECTED: "CONNECTED",
    KeeperState.CONNECTED_RO: "CONNECTEDREADONLY",
    KeeperState.CONNECTING: "CONNECTING",
    KeeperState.EXPIRED_SESSION: "CLOSED",
    KeeperState.CLOSED: "CLOSED",
    KeeperState.AUTH_FAILED: "AUTH_FAILED",
}
# KeeperException.Code messages for the errors CliWrapperException does not rephrase.
_CODE_MESSAGE = {
    E.ConnectionLoss: "ConnectionLoss",
    E.SessionExpiredError: "Session expired",
    E.NoWatcherError: "No such watcher",
    E.UnimplementedError: "Unimplemented",
    E.OperationTimeoutError: "OperationTimeout",
    E.AuthFailedError: "AuthFailed",
    E.SessionMovedError: "Session moved",
    E.ThrottledOpError: "Op throttled due to high load",
    E.EphemeralOnLocalSessionError: "Ephemeral node on local session",
    E.RequestTimeoutError: "Request timeout",
    E.SystemZookeeperError: "SystemError",
    E.MarshallingError: "MarshallingError",
    E.APIError: "APIError",
}


class CliError(Exception):
    """A command failed; ``str()`` is the message zkCli prints (on stderr)."""

    status = FAILED


class UsageError(CliError):
    status = USAGE


@dataclass(frozen=True)
class Command:
    name: str
    usage: str
    opts: str = ""  # getopt letters; "v:" takes a value
    min_args: int = 0
    max_args: int | None = 0
    needs_session: bool = True
    long_opts: tuple[str, ...] = ()  # ``-name value`` options (zkCli's reconfig)


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        Command("addauth", "addauth scheme auth", "", 1, 2),
        Command("addWatch", "addWatch [-m mode] path # optional mode is one of [PERSISTENT, PERSISTENT_RECURSIVE] - default is PERSISTENT_RECURSIVE", "m:", 1, 1),
        Command("close", "close", needs_session=False),
        Command("config", "config [-c] [-w] [-s]", "cws"),
        Command("connect", "connect host:port", "", 0, 1, needs_session=False),
        Command("create", "create [-s] [-e] [-c] [-t ttl] path [data] [acl]", "sect:", 1, 3),
        Command("delete", "delete [-v version] path", "v:", 1, 1),
        Command("deleteall", "deleteall path [-b batch size]", "b:", 1, 1),
        Command("delquota", "delquota [-n|-b|-N|-B] path", "nbNB", 1, 1),
        Command("get", "get [-s] [-w] path", "sw", 1, 1),
        Command("getAcl", "getAcl [-s] path", "s", 1, 1),
        Command("getAllChildrenNumber", "getAllChildrenNumber path", "", 0, 1),
        Command("getEphemerals", "getEphemerals path", "", 0, 1),
        Command("help", "help", "", 0, None, needs_session=False),
        Command("history", "history", needs_session=False),
        Command("listquota", "listquota path", "", 1, 1),
        Command("ls", "ls [-s] [-w] [-R] path", "swR", 1, 1),
        Command("printwatches", "printwatches on|off", "", 0, 1, needs_session=False),
        Command("quit", "quit", needs_session=False),
        Command("reconfig", "reconfig [-s] [-v version] [[-file path] | [-members serverID=host:port1:port2;port3[,...]*]] | [-add serverId=host:port1:port2;port3[,...]]* [-remove serverId[,...]*]",
                "sv:", 0, 0, long_opts=("file", "members", "add", "remove")),  # fmt: skip
        Command("redo", "redo cmdno", "", 1, 1, needs_session=False),
        Command("removewatches", "removewatches path [-c|-d|-a] [-l]", "cdal", 1, 1),
        Command("set", "set [-s] [-v version] path data", "sv:", 2, 2),
        Command("setAcl", "setAcl [-s] [-v version] [-R] path acl", "sv:R", 2, 2),
        Command("setquota", "setquota -n|-b|-N|-B val path", "n:b:N:B:", 1, 1),
        Command("srvr-all", "srvr-all # four-letter words of every server in the list, side by side", "", 0, 0, needs_session=False),
        Command("stat", "stat [-w] path", "w", 1, 1),
        Command("sync", "sync path", "", 1, 1),
        Command("version", "version", needs_session=False),
        Command("whoami", "whoami"),
    )
}
ALIASES = {"exit": "quit"}


# -- formatting helpers (pure) ----------------------------------------------------------------
def hex64(value: int) -> str:
    """Java's ``Long.toHexString``: two's complement for negative values (TTL owners)."""
    return format(value & 0xFFFF_FFFF_FFFF_FFFF, "x")


def java_date(ms: int) -> str:
    """Java's ``Date.toString()``: ``Thu Jan 01 00:00:00 UTC 1970`` in local time."""
    return time.strftime("%a %b %d %H:%M:%S %Z %Y", time.localtime(ms / 1000.0))


def format_stat(stat: ZnodeStat) -> str:
    """zkCli's StatPrinter."""
    return (
        f"cZxid = 0x{hex64(stat.czxid)}\n"
        f"ctime = {java_date(stat.ctime)}\n"
        f"mZxid = 0x{hex64(stat.mzxid)}\n"
        f"mtime = {java_date(stat.mtime)}\n"
        f"pZxid = 0x{hex64(stat.pzxid)}\n"
        f"cversion = {stat.cversion}\n"
        f"dataVersion = {stat.version}\n"
        f"aclVersion = {stat.aversion}\n"
        f"ephemeralOwner = 0x{hex64(stat.ephemeralOwner)}\n"
        f"dataLength = {stat.dataLength}\n"
        f"numChildren = {stat.numChildren}\n"
    )


def format_event(event: WatchedEvent) -> str:
    state = _EVENT_STATE.get(event.state, str(event.state))
    kind = _EVENT_TYPE.get(event.type, str(event.type))
    path = event.path if event.path is not None else "null"
    return f"WatchedEvent state:{state} type:{kind} path:{path}"


def perm_string(perms: int) -> str:
    """ZKUtil.getPermString: letters in the order c, d, r, w, a."""
    letters = (("c", 4), ("d", 8), ("r", 1), ("w", 2), ("a", 16))
    return "".join(ch for ch, bit in letters if perms & bit)


def parse_perms(text: str) -> int:
    bits = {"c": 4, "d": 8, "r": 1, "w": 2, "a": 16}
    perms = 0
    for ch in text:
        if ch not in bits:
            raise UsageError(f"Unknown perm type: {ch}")
        perms |= bits[ch]
    return perms


def parse_acl(text: str) -> list[ACL]:
    """zkCli's AclParser: ``scheme:id:perms[,…]``; the id may itself contain colons."""
    acls: list[ACL] = []
    for entry in text.split(","):
        first, last = entry.find(":"), entry.rfind(":")
        if first == -1 or first == last:
            raise UsageError(f"{entry} does not have the form scheme:id:perm")
        acls.append(ACL(parse_perms(entry[last + 1 :]), Id(entry[:first], entry[first + 1 : last])))
    return acls


def validate_path(path: str, sequential: bool = False) -> None:
    """ZooKeeper's PathUtils.validatePath messages (a trailing ``/`` is fine for ``create -s``)."""
    if not path:
        raise UsageError("Path length must be > 0")
    if not path.startswith("/"):
        raise UsageError("Path must start with / character")
    if len(path) == 1:
        return
    if path.endswith("/") and not sequential:
        raise UsageError("Path must not end with / character")
    body = path[:-1] if sequential and path.endswith("/") else path
    for i, name in enumerate(body.split("/")[1:]):
        if name == "":
            raise UsageError(f"empty node name specified @{i + 1}")
        if name in (".", ".."):
            raise UsageError(f"relative paths not allowed @{i + 1}")
    for ch in body:
        if ch == "\x00" or "\x01" <= ch <= "\x1f" or "\x7f" <= ch <= "\x9f" or "\ud800" <= ch <= "\uf8ff" or "\ufff0" <= ch <= "\uffff":
            raise UsageError(f"invalid character @{body.index(ch)}")


def error_message(exc: BaseException, path: str) -> str:
    """zkCli's CliWrapperException wording for a client exception on ``path``."""
    wrapped = {
        E.NoNodeError: "Node does not exist: ",
        E.NoChildrenForEphemeralsError: "Ephemerals cannot have children: ",
        E.NodeExistsError: "Node already exists: ",
        E.NotEmptyError: "Node not empty: ",
        E.NotReadOnlyCallError: "Not a read-only call: ",
        E.InvalidACLError: "Acl is not valid : ",
        E.NoAuthError: "Insufficient permission : ",
        E.BadArgumentsError: "Arguments are not valid : ",
        E.BadVersionError: "version No is not valid : ",
        E.QuotaExceededError: "Quota has exceeded : ",
    }
    for cls, prefix in wrapped.items():
        if isinstance(exc, cls):
            return prefix + path
    if isinstance(exc, E.ReconfigInProcessError):
        return "Another reconfiguration is in progress -- concurrent reconfigs not supported (yet)"
    if isinstance(exc, E.NewConfigNoQuorumError):
        return ("KeeperErrorCode = No quorum of new config is connected and up-to-date with the leader of last commmitted config"
                " - try invoking reconfiguration after new servers are connected and synced")  # fmt: skip
    if isinstance(exc, E.ReconfigDisabledError):
        return "KeeperErrorCode = Attempts to perform a reconfiguration operation when reconfiguration feature is disabled."
    if isinstance(exc, E.ConnectionClosedError):
        return "Not connected"
    if isinstance(exc, KazooTimeoutError):
        return f"KeeperErrorCode = ConnectionLoss for {path} (no reply in time)"
    for cls, text in _CODE_MESSAGE.items():
        if isinstance(exc, cls):
            return f"KeeperErrorCode = {text} for {path}"
    return str(exc) or type(exc).__name__


def parse_options(argv: list[str], spec: str, long_opts: tuple[str, ...] = ()) -> tuple[dict[str, str], list[str]]:
    """A tiny getopt: ``-x`` flags and ``-v value`` options anywhere, ``--`` ends options.

    Clustered flags (``-sw``) are accepted; a token that does not look like an option
    (``/path``, ``data``, ``-5`` when no digit option exists) is a positional argument.
    """
    takes_value = {spec[i] for i in range(len(spec) - 1) if spec[i + 1] == ":"}
    letters = set(spec.replace(":", ""))
    opts: dict[str, str] = {}
    args: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token == "--":
            args.extend(argv[i:])
            break
        if len(token) < 2 or not token.startswith("-") or token[1].isdigit():
            args.append(token)
            continue
        if token.lstrip("-") in long_opts:
            if i >= len(argv):
                raise UsageError(f"Missing argument for option: {token.lstrip('-')}")
            opts[token.lstrip("-")] = argv[i]
            i += 1
            continue
        for j, letter in enumerate(token[1:], start=1):
            if letter not in letters:
                raise UsageError(f"Unrecognized option: {token}")
            if letter in takes_value:
                value = token[j + 1 :]
                if not value:
                    if i >= len(argv):
                        raise UsageError(f"Missing argument for option: {letter}")
                    value = argv[i]
                    i += 1
                opts[letter] = value
                break
            opts[letter] = ""
    return opts, args


def split_line(line: str) -> list[str]:
    """Words of a command line; single or double quotes group words (zkCli's tokenizer)."""
    try:
        return shlex.split(line, comments=False, posix=True)
    except ValueError:
        return line.split()


def _int_option(opts: dict[str, str], letter: str, default: int, what: str) -> int:
    if letter not in opts:
        return default
    try:
        return int(opts[letter])
    except ValueError:
        raise UsageError(f"{what} must be an integer: {opts[letter]}") from None


def _child(parent: str, name: str) -> str:
    return parent.rstrip("/") + "/" + name


# -- the shell ---------------------------------------------------------------------------------
class Shell:
    """One zkCli session: a ``SyncClient`` (one per ``connect``), history and the commands."""

    def __init__(
        self,
        hosts: str = "localhost:2181",
        writer: Writer | None = None,
        *,
        timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        read_only: bool = False,
        print_watches: bool = True,
        status_timeout_s: float = 2.0,
        client_factory: Callable[..., SyncClient] = SyncClient,
        client_options: dict[str, Any] | None = None,
    ) -> None:
        self.hosts = hosts
        self.writer: Writer = writer if writer is not None else StreamWriter()
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.read_only = read_only
        self.print_watches = print_watches
        self.status_timeout_s = status_timeout_s
        self.client_factory = client_factory
        self.client_options = dict(client_options or {})  # e.g. TLS, from -client-configuration
        self.client: SyncClient | None = None
        self.history: dict[int, str] = {}
        self.command_count = 0
        self.done = False
        self._lock = threading.Lock()

    # -- session ---------------------------------------------------------------------------
    def connect(self, hosts: str | None = None) -> bool:
        """Close the current session and open one to ``hosts``; False (and a message) on failure."""
        self.disconnect()
        if hosts:
            self.hosts = hosts
        try:
            client = self.client_factory(self.hosts, timeout=self.timeout_s, read_only=self.read_only or None, **self.client_options)
        except (ValueError, E.KazooException) as exc:
            self.writer.err(f"Unable to connect to {self.hosts}: {exc}\n")
            return False
        announced = threading.Event()
        client.add_listener(lambda state: self._on_state(client, state, announced))
        try:
            client.start(timeout=self.connect_timeout_s)
        except (E.KazooException, OSError) as exc:
            reason = str(exc) or ("Connection time-out" if isinstance(exc, KazooTimeoutError) else type(exc).__name__)
            self.writer.err(f"Unable to connect to {self.hosts}: {reason}\n")
            _close_quietly(client)
            return False
        self.client = client
        announced.wait(_ANNOUNCE_WAIT_S)  # the SyncConnected event prints before the next prompt
        return True

    def disconnect(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            _close_quietly(client)

    def close(self) -> None:
        self.disconnect()

    @property
    def state_name(self) -> str:
        client = self.client
        if client is None:
            return "CLOSED"
        return _PROMPT_STATE.get(client.client_state, str(client.client_state))

    def prompt(self) -> str:
        return f"[zk: {self.hosts}({self.state_name}) {self.command_count}] "

    def _alive(self) -> bool:
        client = self.client
        return client is not None and client.client_state in (KeeperState.CONNECTED, KeeperState.CONNECTED_RO, KeeperState.CONNECTING)

    # -- events ----------------------------------------------------------------------------
    def _print_event(self, event: WatchedEvent) -> None:
        if self.print_watches:
            self.writer.out(f"\nWATCHER::\n\n{format_event(event)}\n")

    def _on_watch(self, event: WatchedEvent) -> None:
        if event.type == EventType.NONE:  # the session listener reports session changes once
            return
        self._print_event(event)

    def _on_state(self, client: SyncClient, state: KazooState, announced: threading.Event) -> None:
        if state == KazooState.CONNECTED:
            keeper = KeeperState.CONNECTED_RO if client.client_state == KeeperState.CONNECTED_RO else KeeperState.CONNECTED
        elif state == KazooState.SUSPENDED:
            keeper = KeeperState.CONNECTING
        else:
            expired = client.client_state == KeeperState.EXPIRED_SESSION
            keeper = KeeperState.EXPIRED_SESSION if expired else KeeperState.CLOSED
        self._print_event(WatchedEvent(EventType.NONE, keeper, None))
        announced.set()

    # -- running commands ------------------------------------------------------------------
    def execute(self, line: str) -> int:
        """Run one command line (as typed at the prompt); returns the exit status."""
        line = line.strip()
        if not line:
            return OK
        self.history[self.command_count] = line
        try:
            return self._run(split_line(line), line)
        finally:
            self.command_count += 1

    def execute_argv(self, argv: list[str]) -> int:
        """Run one command given as words (one-shot mode: no re-quoting needed)."""
        line = shlex.join(argv)
        self.history[self.command_count] = line
        try:
            return self._run(list(argv), line)
        finally:
            self.command_count += 1

    def _run(self, words: list[str], line: str) -> int:
        if not words:
            return OK
        name = ALIASES.get(words[0], words[0])
        command = COMMANDS.get(name)
        if command is None:
            self.writer.err(f"Command not found: {words[0]}\n")
            self._usage(self.writer.err)
            return USAGE
        path = ""
        try:
            opts, args = self.parse(command, words[1:])
            path = args[0] if args else ""
            if command.needs_session and not self._alive():
                self.writer.out("Not connected\n")
                return NOT_CONNECTED
            getattr(self, "_cmd_" + name.replace("-", "_"))(opts, args)
            return OK
        except CliError as exc:
            if str(exc):
                self.writer.err(f"{exc}\n")
            return exc.status
        except E.KazooException as exc:
            self.writer.err(error_message(exc, path) + "\n")
            return FAILED
        except (TypeError, ValueError) as exc:  # the client rejected an argument
            self.writer.err(f"{exc}\n")
            return USAGE

    @staticmethod
    def parse(command: Command, argv: list[str]) -> tuple[dict[str, str], list[str]]:
        """Options and positional arguments of ``argv``, or UsageError (zkCli's message)."""
        opts, args = parse_options(argv, command.opts, command.long_opts)
        if len(args) < command.min_args or (command.max_args is not None and len(args) > command.max_args):
            raise UsageError(command.usage)
        return opts, args

    def check_usage(self, words: list[str]) -> tuple[int, str]:
        """(status, message) for a command line's syntax alone: no server is asked."""
        command = COMMANDS.get(ALIASES.get(words[0], words[0])) if words else None
        if command is None:
            return USAGE, f"Command not found: {words[0] if words else ''}"
        try:
            self.parse(command, words[1:])
        except UsageError as exc:
            return USAGE, str(exc)
        return OK, ""

    def _usage(self, write: Callable[[str], None]) -> None:
        lines = ["ZooKeeper -server host:port -client-configuration properties-file cmd args"]
        lines += [f"\t{COMMANDS[name].usage}" for name in sorted(COMMANDS, key=str.lower)]
        write("\n".join(lines) + "\n")

    def command_names(self) -> list[str]:
        return sorted([*COMMANDS, *ALIASES], key=str.lower)

    def list_children(self, path: str, timeout_s: float = 2.0) -> list[str]:
        """Children of ``path`` for completion; empty on any error (never raises)."""
        client = self.client
        if client is None or not client.connected:
            return []
        try:
            return sorted(client.get_children(path, timeout=timeout_s))
        except Exception:
            return []

    @property
    def _c(self) -> SyncClient:
        if self.client is None:
            raise CliError("Not connected")
        return self.client

    def _out(self, text: str) -> None:
        self.writer.out(text if text.endswith("\n") else text + "\n")

    # -- the commands (zkCli's classes in org.apache.zookeeper.cli) --------------------------
    def _cmd_ls(self, opts: dict[str, str], args: list[str]) -> None:
        path = args[0]
        validate_path(path)
        watch = self._on_watch if "w" in opts else None
        if "R" in opts:
            for node in self._walk(path, watch):
                self._out(node)
            return
        if "s" in opts:
            children, stat = self._c.get_children(path, watch, include_data=True)
        else:
            children, stat = self._c.get_children(path, watch), None
        self._out("[" + ", ".join(sorted(children)) + "]")
        if stat is not None:
            self.writer.out(format_stat(stat))

    def _walk(self, path: str, watch: Any = None) -> list[str]:
        """``path`` and every descendant, depth first, children sorted (ZKUtil.visitSubTreeDFS)."""
        out: list[str] = []
        stack = [path]
        while stack:
            node = stack.pop()
            try:
                children = self._c.get_children(node, watch)
            except E.NoNodeError:
                if node == path:
                    raise
                continue
            out.append(node)
            stack.extend(_child(node, name) for name in sorted(children, reverse=True))
        return out

    def _cmd_create(self, opts: dict[str, str], args: list[str]) -> None:
        path = args[0]
        ephemeral, sequence, container = "e" in opts, "s" in opts, "c" in opts
        ttl = None
        if container and (ephemeral or sequence):
            raise UsageError("-c cannot be combined with -s or -e. Containers cannot be ephemeral or sequential.")
        if "t" in opts:
            if ephemeral:
                raise UsageError("TTLs cannot be used with Ephemeral znodes")
            if container:
                raise UsageError("TTLs cannot be used with Container znodes")
            ttl = _int_option(opts, "t", 0, "ttl")
            if ttl <= 0:
                raise UsageError("ttl must be a positive number of milliseconds")
        validate_path(path, sequential=sequence)
        data = args[1].encode() if len(args) > 1 else b""
        acl = parse_acl(args[2]) if len(args) > 2 else None
        try:
            created = self._c.create(path, data, acl, ephemeral=ephemeral, sequence=sequence, container=container, ttl=ttl)
        except E.EphemeralOnLocalSessionError:
            raise CliError("Unable to create ephemeral node on a local session") from None
        except E.InvalidACLError:
            raise CliError(f"Acl is not valid : {path}") from None
        self._out(f"Created {created}")

    def _cmd_get(self, opts: dict[str, str], args: list[str]) -> None:
        path = args[0]
        validate_path(path)
        data, stat = self._c.get(path, self._on_watch if "w" in opts else None)
        self._out(data.decode("utf-8", "replace"))
        if "s" in opts:
            self.writer.out(format_stat(stat))

    def _cmd_set(self, opts: dict[str, str], args: list[str]) -> None:
        path, data = args
        validate_path(path)
        version = _int_option(opts, "v", -1, "version")
        stat = self._c.set(path, data.encode(), version)
        if "s" in opts:
            self.writer.out(format_stat(stat))

    def _cmd_stat(self, opts: dict[str, str], args: list[str]) -> None:
        path = args[0]
        validate_path(path)
        stat = self._c.exists(path, self._on_watch if "w" in opts else None)
        if stat is None:
            raise CliError(f"Node does not exist: {path}")
        self.writer.out(format_stat(stat))

    def _cmd_delete(self, opts: dict[str, str], args: list[str]) -> None:
        path = args[0]
        validate_path(path)
        self._c.delete(path, _int_option(opts, "v", -1, "version"))

    def _cmd_deleteall(self, opts: dict[str, str], args: list[str]) -> None:
        path = args[0]
        validate_path(path)
        batch = _int_option(opts, "b", 1000, "batch size")
        if batch <= 0:
            raise UsageError("batch size must be a positive integer")
        nodes = [n for n in self._walk(path) if n != "/" and n != "/zookeeper" and not n.startswith("/zookeeper/")]
        nodes.sort(key=lambda n: n.count("/"), reverse=True)  # children before parents
        for start in range(0, len(nodes), batch):
            chunk = nodes[start : start + batch]
            if len(chunk) == 1:
                try:
                    self._c.delete(chunk[0])
                except E.NoNodeError:
                    pass
                continue
            tx = self._c.transaction()
            for node in chunk:
                tx.delete(node)
            results = tx.commit()
            failed = [r for r in results if isinstance(r, Exception) and not isinstance(r, (E.RolledBackError, E.NoNodeError))]
            if failed:
                raise failed[0]
            if any(isinstance(r, E.NoNodeError) for r in results):  # raced with another client
                for node in chunk:
                    try:
                        self._c.delete(node)
                    except E.NoNodeError:
                        pass

    def _cmd_sync(self, opts: dict[str, str], args: list[str]) -> None:
        validate_path(args[0])
        self._c.sync(args[0])
        self._out("Sync is OK")

    def _cmd_getAcl(self, opts: dict[str, str], args: list[str]) -> None:  # noqa: N802 - zkCli's name
        path = args[0]
        validate_path(path)
        acls, stat = self._c.get_acls(path)
        for acl in acls:
            scheme, ident = acl.id
            self._out(f"'{scheme},'{ident}\n: {perm_string(acl.perms)}")
        if "s" in opts:
            self.writer.out(format_stat(stat))

    def _cmd_setAcl(self, opts: dict[str, str], args: list[str]) -> None:  # noqa: N802
        path, text = args
        validate_path(path)
        acls = parse_acl(text)
        version = _int_option(opts, "v", -1, "version")
        if "R" in opts:
            for node in self._walk(path):
                self._c.set_acls(node, acls, version)
            stat = self._c.exists(path)
        else:
            stat = self._c.set_acls(path, acls, version)
        if "s" in opts and stat is not None:
            self.writer.out(format_stat(stat))

    def _cmd_addauth(self, opts: dict[str, str], args: list[str]) -> None:
        scheme = args[0]
        self._c.add_auth(scheme, args[1] if len(args) > 1 else "")

    def _cmd_addWatch(self, opts: dict[str, str], args: list[str]) -> None:  # noqa: N802
        path = args[0]
        validate_path(path)
        mode_name = opts.get("m", "PERSISTENT_RECURSIVE")
        try:
            mode = AddWatchMode[mode_name.upper()]
        except KeyError:
            raise UsageError(f"Unsupported mode: {mode_name}") from None
        self._c.add_watch(path, self._on_watch, mode)

    def _cmd_removewatches(self, opts: dict[str, str], args: list[str]) -> None:
        path = args[0]
        validate_path(path)
        chosen = [k for k in "cda" if k in opts]
        if len(chosen) > 1:
            raise UsageError("removewatches path [-c|-d|-a] [-l]")
        kind = {"c": WatcherType.CHILDREN, "d": WatcherType.DATA}.get(chosen[0] if chosen else "a", WatcherType.ANY)
        self._c.remove_watches(path, kind)

    def _cmd_getEphemerals(self, opts: dict[str, str], args: list[str]) -> None:  # noqa: N802
        prefix = args[0] if args else "/"
        validate_path(prefix)
        self._out("[" + ", ".join(sorted(self._c.get_ephemerals(prefix))) + "]")

    def _cmd_getAllChildrenNumber(self, opts: dict[str, str], args: list[str]) -> None:  # noqa: N802
        path = args[0] if args else "/"
        validate_path(path)
        self._out(str(self._c.get_all_children_number(path)))

    def _cmd_whoami(self, opts: dict[str, str], args: list[str]) -> None:
        lines = ["Auth scheme: User"] + [f"{scheme}: {user}" for scheme, user in self._c.whoami()]
        self._out("\n".join(lines))

    def _cmd_config(self, opts: dict[str, str], args: list[str]) -> None:
        data, stat = self._c.get_config(self._on_watch if "w" in opts else None)
        text = data.decode("utf-8", "replace")
        if "c" in opts:
            text = client_connect_string(text)
        self._out(text)
        if "s" in opts:
            self.writer.out(format_stat(stat))

    def _cmd_reconfig(self, opts: dict[str, str], args: list[str]) -> None:
        joining, leaving, members, version = reconfig_request(opts)
        try:
            data, stat = self._c.reconfig(joining, leaving, members, version)
        except E.BadArgumentsError as exc:
            raise CliError(f"Arguments are not valid : {exc}") from None
        self._out("Committed new configuration:\n" + data.decode("utf-8", "replace"))
        if "s" in opts:
            self.writer.out(format_stat(stat))
    def _cmd_setquota(self, opts: dict[str, str], args: list[str]) -> None:
        path = args[0]
        validate_path(path)
        chosen = [letter for letter in "nbNB" if letter in opts]
        if len(chosen) != 1:
            raise UsageError(COMMANDS["setquota"].usage)
        try:
            value = int(opts[chosen[0]])
        except ValueError:
            raise CliError("NumberFormatException happens when parsing the option value") from None
        if value < 0:
            raise UsageError(f"the quota must be a number >= 0, got {value}")
        self._quota(quota_cmds.set_quota, self._c, path, chosen[0], value, self.writer)

    def _cmd_listquota(self, opts: dict[str, str], args: list[str]) -> None:
        validate_path(args[0])
        self._quota(quota_cmds.list_quota, self._c, args[0], self.writer)

    def _cmd_delquota(self, opts: dict[str, str], args: list[str]) -> None:
        validate_path(args[0])
        chosen = [letter for letter in "nbNB" if letter in opts]
        if len(chosen) > 1:
            raise UsageError(COMMANDS["delquota"].usage)
        self._quota(quota_cmds.del_quota, self._c, args[0], chosen[0] if chosen else None)

    @staticmethod
    def _quota(command: Callable[..., None], *args: Any) -> None:
        try:
            command(*args)
        except quota_cmds.QuotaError as exc:
            raise CliError(str(exc)) from None

    def _cmd_history(self, opts: dict[str, str], args: list[str]) -> None:
        for i in range(max(0, self.command_count - HISTORY_SHOWN), self.command_count + 1):
            if i in self.history:
                self._out(f"{i} - {self.history[i]}")

    def _cmd_redo(self, opts: dict[str, str], args: list[str]) -> None:
        try:
            index = int(args[0])
        except ValueError:
            raise UsageError("Command index out of range") from None
        if index < 0 or index >= self.command_count or index not in self.history:
            raise UsageError("Command index out of range")
        line = self.history[index]
        words = split_line(line)
        if words and words[0] == "redo":
            raise UsageError("No redoing redos")
        self.history[self.command_count] = line
        status = self._run(words, line)
        if status != OK:
            raise _Status(status)

    def _cmd_connect(self, opts: dict[str, str], args: list[str]) -> None:
        if not self.connect(args[0] if args else None):
            raise _Status(NOT_CONNECTED)

    def _cmd_close(self, opts: dict[str, str], args: list[str]) -> None:
        self.disconnect()

    def _cmd_printwatches(self, opts: dict[str, str], args: list[str]) -> None:
        if not args:
            self._out(f"printwatches is {'on' if self.print_watches else 'off'}")
            return
        if args[0] not in ("on", "off"):
            raise UsageError("printwatches on|off")
        self.print_watches = args[0] == "on"

    def _cmd_quit(self, opts: dict[str, str], args: list[str]) -> None:
        self.disconnect()
        self.done = True

    def _cmd_help(self, opts: dict[str, str], args: list[str]) -> None:
        self._usage(self.writer.out)

    def _cmd_version(self, opts: dict[str, str], args: list[str]) -> None:
        self._out(f"ZooKeeper CLI version: zabby {__version__}")

    def _cmd_srvr_all(self, opts: dict[str, str], args: list[str]) -> None:
        statuses = status_mod.query_all(self.hosts, self.status_timeout_s)
        self.writer.out(status_mod.format_table(statuses))
        if not all(s.reachable for s in statuses):
            raise _Status(FAILED)


class _Status(CliError):
    """Ends a command with a status and no further message (the handler already printed)."""

    def __init__(self, status: int) -> None:
        super().__init__("")
        self.status = status

    def __str__(self) -> str:
        return ""


def reconfig_request(opts: dict[str, str]) -> tuple[str | None, str | None, str | None, int]:
    """zkCli's reconfig options → (joining, leaving, new_members, from_config), or UsageError."""
    incremental = "add" in opts or "remove" in opts
    whole = "members" in opts or "file" in opts
    if not (incremental or whole):
        raise UsageError(COMMANDS["reconfig"].usage)
    if incremental and whole:
        raise UsageError("Can't use -file or -members together with -add or -remove (mixing incremental and non-incremental modes is not allowed)")
    if "members" in opts and "file" in opts:
        raise UsageError("Can't use -file and -members together (conflicting non-incremental modes)")
    try:
        version = int(opts["v"], 16) if "v" in opts else -1
    except ValueError:
        raise UsageError("-v must be followed by a long (configuration version)") from None
    members = opts.get("members")
    if "file" in opts:
        try:
            with open(opts["file"], encoding="utf-8") as handle:
                membership = Membership.parse(handle.read())
        except (OSError, MembershipError) as exc:
            raise UsageError(f"Error processing {opts['file']}: {exc}") from None
        members = ",".join(f"server.{m.sid}={m.spec()}" for m in membership.members)
    return opts.get("add"), opts.get("remove"), members, version


def client_connect_string(config: str) -> str:
    """``config -c``: the client addresses of ``server.N=host:p1:p2[:role];[addr:]port`` lines."""
    out: list[str] = []
    for line in config.splitlines():
        key, _, value = line.partition("=")
        if not key.startswith("server.") or ";" not in value:
            continue
        server_part, client_part = value.split(";", 1)
        host = server_part.split(":", 1)[0]
        addr, _, port = client_part.rpartition(":")
        if addr in ("", "0.0.0.0"):
            addr = host
        out.append(f"{addr}:{port}")
    return ",".join(out)


def _close_quietly(client: SyncClient) -> None:
    try:
        client.close()
    except Exception:
        pass
