"""``zabby-cli``: a zkCli.sh-compatible shell for zabby (interactive, one-shot and a 4lw table).

* ``main.py``: argument parsing; one-shot (``zabby-cli -server h:p get /x``) vs interactive.
* ``shell.py``: the command table and one small handler per zkCli command, writing through a
  ``Writer`` so every command is testable without a terminal.
* ``completion.py``: prompt_toolkit completion of command names and znode paths.
* ``status.py``: ``srvr``/``mntr`` of every server in the list, side by side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .output import BufferWriter, StreamWriter, Writer
    from .shell import Shell

__all__ = ["BufferWriter", "Shell", "StreamWriter", "Writer"]


def __getattr__(name: str) -> Any:
    """The shell's names, imported when first asked for: ``zabby-admin`` (``zabby.cli.admin``)
    needs neither the shell nor the client it pulls in (a fifth of a second at every start)."""
    if name == "Shell":
        from .shell import Shell

        return Shell
    if name in ("BufferWriter", "StreamWriter", "Writer"):
        from . import output

        return getattr(output, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
