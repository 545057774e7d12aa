"""``zabby-cli``: zkCli.sh for zabby.

    zabby-cli [-server host:port[,host:port…][/chroot]] [-timeout ms] [-r]
              [-client-configuration FILE] [cmd args…]
    zabby-cli -server h1:p1,h2:p2 -servers-status

With a command it runs just that command and exits: status 0 on success, 1 when the
server reports an error (the message, zkCli's wording, goes to stderr), 2 for bad
arguments, 3 when no server could be reached within ``-connect-timeout`` seconds.  Without
one it opens the interactive shell (prompt_toolkit line editing, history and completion on a
terminal; plain lines when stdin is not a terminal).  ``-servers-status`` prints ``srvr``
of every server in the list as a table and exits (1 if some server is unreachable).
``-client-configuration`` reads zkCli's client properties file; zabby uses its TLS keys
(``zookeeper.client.secure=true``, ``zookeeper.ssl.keyStore.location``, …; PEM files).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from zabby.config import ConfigError, load_client_configuration

from . import status as status_mod
from .output import StreamWriter
from .shell import ALIASES, COMMANDS, FAILED, NOT_CONNECTED, OK, USAGE, Shell

DEFAULT_SERVER = "localhost:2181"
HISTORY_ENV = "ZABBY_CLI_HISTORY"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zabby-cli",
        description="A zkCli.sh-compatible shell for zabby.",
        allow_abbrev=False,
    )
    parser.add_argument("-server", default=DEFAULT_SERVER, help="connect string host:port[,host:port...][/chroot] (default %(default)s)")
    parser.add_argument("-timeout", type=int, default=30000, metavar="MS", help="session timeout in milliseconds (default %(default)s)")
    parser.add_argument("-connect-timeout", type=float, default=10.0, metavar="S", help="seconds to wait for the first connection (default %(default)s)")
    parser.add_argument("-client-configuration", metavar="FILE", help="ZooKeeper client properties (TLS: zookeeper.client.secure, zookeeper.ssl.*)")
    parser.add_argument("-r", action="store_true", dest="read_only", help="read-only session (allowed to connect to a read-only server)")
    parser.add_argument("-waitforconnection", action="store_true", help="accepted for zkCli compatibility (zabby-cli always waits)")
    parser.add_argument("-servers-status", action="store_true", help="print srvr/mntr of every server in -server as a table and exit")
    parser.add_argument("-status-timeout", type=float, default=2.0, metavar="S", help="per-host timeout of -servers-status (default %(default)s)")
    parser.add_argument("command", nargs="*", help="a command to run once (see 'help'); none opens the shell")
    return parser


_VALUE_OPTIONS = {"-server", "-timeout", "-connect-timeout", "-status-timeout", "-client-configuration"}
_FLAG_OPTIONS = {"-r", "-waitforconnection", "-servers-status", "-h", "--help"}


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """(zabby-cli's own options, the command words).

    The command starts at the first word that is not one of our options, so its flags
    (``get -s /x``) never reach argparse, which would take ``-s`` for an abbreviation of
    ``-server``.
    """
    i = 0
    while i < len(argv):
        word = argv[i]
        name = word.split("=", 1)[0]
        if name in _VALUE_OPTIONS:
            i += 1 if "=" in word else 2
        elif word in _FLAG_OPTIONS:
            i += 1
        elif word == "--":
            return argv[:i], argv[i + 1 :]
        else:
            break
    return argv[:i], argv[i:]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    own, command = split_argv(list(sys.argv[1:] if argv is None else argv))
    if command and command[0].startswith("-"):
        parser.print_usage(sys.stderr)
        print(f"zabby-cli: error: unrecognized arguments: {command[0]}", file=sys.stderr)
        return USAGE
    try:
        ns = parser.parse_args(own)
    except SystemExit as exc:  # argparse already printed the message
        return int(exc.code or 0) and USAGE
    ns.command = command
    if ns.timeout <= 0 or ns.connect_timeout <= 0:
        print("-timeout and -connect-timeout must be positive", file=sys.stderr)
        return USAGE
    if ns.servers_status:
        try:
            statuses = status_mod.query_all(ns.server, ns.status_timeout)
        except ValueError as exc:
            print(f"bad -server {ns.server!r}: {exc}", file=sys.stderr)
            return USAGE
        sys.stdout.write(status_mod.format_table(statuses))
        return OK if all(s.reachable for s in statuses) else 1
    try:
        client_options = load_client_configuration(ns.client_configuration).client_options() if ns.client_configuration else {}
    except ConfigError as exc:
        print(f"zabby-cli: {exc}", file=sys.stderr)
        return USAGE
    one_shot = bool(ns.command)
    shell = Shell(
        ns.server,
        StreamWriter(),
        timeout_s=ns.timeout / 1000.0,
        connect_timeout_s=ns.connect_timeout,
        read_only=ns.read_only,
        print_watches=not one_shot,
        status_timeout_s=ns.status_timeout,
        client_options=client_options,
    )
    try:
        if one_shot:
            return run_one_shot(shell, ns.command)
        return run_interactive(shell)
    finally:
        shell.close()


def run_one_shot(shell: Shell, words: list[str]) -> int:
    status, _message = shell.check_usage(words)
    if status != OK:  # bad syntax: say so without waiting for a server
        return shell.execute_argv(words)
    command = COMMANDS[ALIASES.get(words[0], words[0])]
    if command.needs_session and not shell.connect():
        return NOT_CONNECTED
    return shell.execute_argv(words)


def run_interactive(shell: Shell) -> int:
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    if interactive:
        print(f"Connecting to {shell.hosts}")
    connected = shell.connect()
    if interactive and connected:
        print("Welcome to zabby!")
    if interactive:
        return _prompt_toolkit_loop(shell)
    return _plain_loop(shell)


def _plain_loop(shell: Shell) -> int:
    """stdin is not a terminal: print the prompt, read a line, run it (zkCli without JLine)."""
    status = OK
    while not shell.done:
        shell.writer.out(shell.prompt())
        line = sys.stdin.readline()
        if not line:
            shell.writer.out("\n")
            break
        status = _execute(shell, line.rstrip("\r\n"))
    return status


def _execute(shell: Shell, line: str) -> int:
    """Run a line; Ctrl-C abandons the command (its reply, if any, is dropped), not the shell."""
    try:
        return shell.execute(line)
    except KeyboardInterrupt:
        shell.writer.err("^C\n")
        return FAILED


def _history_file() -> Path | None:
    configured = os.environ.get(HISTORY_ENV)
    if configured is not None:
        return Path(configured) if configured else None
    home = Path.home()
    return home / ".zabby_cli_history" if home.is_dir() else None


def _prompt_toolkit_loop(shell: Shell) -> int:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.completion import ThreadedCompleter
    from prompt_toolkit.history import FileHistory, History, InMemoryHistory
    from prompt_toolkit.patch_stdout import patch_stdout

    from .completion import ShellCompleter

    history: History = InMemoryHistory()
    path = _history_file()
    if path is not None:
        try:
            path.touch(exist_ok=True)
            history = FileHistory(str(path))
        except OSError:
            pass
    session: PromptSession[str] = PromptSession(
        history=history,
        completer=ThreadedCompleter(ShellCompleter(shell)),
        complete_while_typing=False,
    )
    # stdout is patched only while the prompt is on screen: a watch event then prints above
    # it.  A command's own output goes straight to the terminal, never racing the next
    # prompt's first paint through patch_stdout's flush thread.
    writer = shell.writer
    status = OK
    while not shell.done:
        try:
            if isinstance(writer, StreamWriter):
                with writer.streams_swapped(patch_stdout(raw=True)):
                    line = session.prompt(shell.prompt)
            else:
                line = session.prompt(shell.prompt)
        except KeyboardInterrupt:
            continue
        except EOFError:
            break
        status = _execute(shell, line)
    return status


if __name__ == "__main__":
    sys.exit(main())
