"""Helpers shared by the CLI tests."""

from __future__ import annotations

from zabby.cli import Shell


def run(sh: Shell, line: str) -> tuple[int, str, str]:
    """Run one command line; (status, stdout, stderr) it produced."""
    sh.writer.take()  # type: ignore[attr-defined]
    status = sh.execute(line)
    out, err = sh.writer.take()  # type: ignore[attr-defined]
    return status, out, err
