"""pytest fixtures for tests against real zabby servers (``zabby.testing``), registered through
the ``pytest11`` entry point: any project with zabby installed has them.

* ``zabby_server``: a started standalone server (``ServerProcess``: ``.hosts``, ``.port``) in the
  test's ``tmp_path``, killed after the test.
* ``zabby_ensemble``: three started servers with a leader elected (``Ensemble``: ``.hosts``,
  ``.servers``, ``.leader()``), killed after the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import zabby.testing
from zabby.testing.ensembles import Ensemble
from zabby.testing.processes import ServerProcess


@pytest.fixture
def zabby_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A started standalone server process on 127.0.0.1 (tickTime 200 ms); killed after the test."""
    with zabby.testing.server(workdir=tmp_path / "zabby-server") as server:
        yield server


@pytest.fixture
def zabby_ensemble(tmp_path: Path) -> Iterator[Ensemble]:
    """Three started servers on 127.0.0.1 (tickTime 200 ms), every one serving and one leading;
    killed after the test."""
    with zabby.testing.ensemble(3, workdir=tmp_path / "zabby-ensemble") as group:
        yield group
