"""Tab completion for the interactive shell: command names, then znode paths.

``complete(shell, text)`` is the pure part (what may follow ``text``); ``ShellCompleter``
adapts it to prompt_toolkit.  Paths are completed one level at a time from
``get_children`` of the parent typed so far, with a short timeout so a slow server never
freezes the prompt for long.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

if TYPE_CHECKING:
    from .shell import Shell

_WORD_CHOICES = {
    "printwatches": ["on", "off"],
}
_OPTION_CHOICES = {
    ("addWatch", "-m"): ["PERSISTENT", "PERSISTENT_RECURSIVE"],
}


def complete(shell: Shell, text: str) -> tuple[str, list[str]]:
    """(the word being completed, its candidate replacements) for the line ``text``."""
    words = text.split()
    at_new_word = not text or text[-1].isspace()
    current = "" if at_new_word else words[-1]
    before = words if at_new_word else words[:-1]
    if not before:
        return current, [name for name in shell.command_names() if name.startswith(current)]
    command = before[0]
    if len(before) >= 2 and (command, before[-1]) in _OPTION_CHOICES:
        return current, [c for c in _OPTION_CHOICES[(command, before[-1])] if c.startswith(current)]
    if command in _WORD_CHOICES:
        return current, [c for c in _WORD_CHOICES[command] if c.startswith(current)]
    if current.startswith("/") or (at_new_word and command != "connect"):
        return current, complete_path(shell, current or "/")
    return current, []


def complete_path(shell: Shell, partial: str) -> list[str]:
    parent, _, prefix = partial.rpartition("/")
    parent = parent or "/"
    base = parent.rstrip("/")
    return [f"{base}/{name}" for name in shell.list_children(parent) if name.startswith(prefix)]


class ShellCompleter(Completer):
    def __init__(self, shell: Shell) -> None:
        self.shell = shell

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterable[Completion]:
        current, candidates = complete(self.shell, document.text_before_cursor)
        for candidate in candidates:
            yield Completion(candidate, start_position=-len(current))
