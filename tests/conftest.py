"""The fixtures ``zabby_server`` and ``zabby_ensemble`` come from zabby's pytest plugin
(``zabby.testing.pytest_plugin``, registered by the ``pytest11`` entry point of pyproject.toml)."""

from __future__ import annotations

import compileall
from pathlib import Path

import pytest

import zabby
from tests import ROOT
from zabby.testing.processes import use_fork_server


def pytest_configure(config: pytest.Config) -> None:
    """A run starts hundreds of servers: each is forked from a template that has imported the
    server (``use_fork_server``: 30 ms of CPU a start instead of 300), and what runs as a
    command (a server with an environment of its own, the harness's scripts) finds the
    bytecode of zabby and the harness compiled.  Where PYTHONDONTWRITEBYTECODE is set, as on
    the CI machine, no process wrote it, so each compiled every module it imported from source
    again (200 ms of CPU per server).  That variable does not stop reading bytecode that is
    there; files already compiled are skipped (the next run, each xdist worker, pay a scan)."""
    for folder in (Path(zabby.__file__).parent, ROOT / "harness"):
        compileall.compile_dir(folder, quiet=1)
    use_fork_server()
