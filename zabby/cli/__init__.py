"""``zabby-cli``: a zkCli.sh-compatible shell for zabby (interactive, one-shot and a 4lw table).

* ``main.py``: argument parsing; one-shot (``zabby-cli -server h:p get /x``) vs interactive.
* ``shell.py``: the command table and one small handler per zkCli command, writing through a
  ``Writer`` so every command is testable without a terminal.
* ``completion.py``: prompt_toolkit completion of command names and znode paths.
* ``status.py``: ``srvr``/``mntr`` of every server in the list, side by side.
"""

from .output import BufferWriter, StreamWriter, Writer
from .shell import Shell

__all__ = ["BufferWriter", "Shell", "StreamWriter", "Writer"]
