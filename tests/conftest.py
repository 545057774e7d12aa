"""The fixtures ``zabby_server`` and ``zabby_ensemble`` come from zabby's pytest plugin
(``zabby.testing.pytest_plugin``, registered by the ``pytest11`` entry point of pyproject.toml)."""

from __future__ import annotations

import compileall
from pathlib import Path

import pytest

import zabby
from tests import ROOT


def pytest_configure(config: pytest.Config) -> None:
    """Compile the bytecode of zabby and the harness once, before any test starts a process.
    A run starts hundreds of servers (and harness scripts), each importing the package; where
    PYTHONDONTWRITEBYTECODE is set, as on the CI machine, none of them wrote its bytecode, so
    each compiled every module from source again (200 ms of CPU per server start).  That
    variable does not stop reading bytecode that is there.  Files already compiled are skipped:
    the next run, and each worker of an xdist run, pay only a scan."""
    for folder in (Path(zabby.__file__).parent, ROOT / "harness"):
        compileall.compile_dir(folder, quiet=1)
