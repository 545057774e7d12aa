"""Fixtures for the zabby.spark tests: 3-server ensembles (tickTime 200 ms), a module-scoped
SparkSession (skipped, with the reason, only when Java or pyspark is missing).

The tests' Spark JVMs compile with C1 only and collect with the serial collector
(``SHORT_JVM``): a test's Spark runs for seconds, in which C2's compiles cost more than they
give.  A session start and three small builds took 48 s of the JVM's CPU, 23 s so."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from zabby import SyncClient
from zabby.testing import (
    Ensemble,
    wait_until,  # noqa: F401  (re-exported for this folder's tests)
)

SHORT_JVM = {"SPARK_SUBMIT_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}  # the driver JVM's options (spark-submit's)


def java_missing() -> str | None:
    if shutil.which("java") is None:
        return "Java is not installed (PySpark needs a JVM)"
    try:
        subprocess.run(["java", "-version"], capture_output=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"java -version failed: {exc!r}"
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install -e '.[spark]')"
    return None


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[Ensemble]:
    ens = Ensemble(tmp_path / "ens", 3, tickTime=200)
    ens.start()
    ens.wait_leader()
    try:
        yield ens
    finally:
        ens.kill_all()


@pytest.fixture
def make_client(ensemble: Ensemble) -> Iterator[Callable[..., SyncClient]]:
    clients: list[SyncClient] = []

    def make(hosts: str | None = None, **kw: object) -> SyncClient:
        c = SyncClient(hosts or ensemble.hosts, **{"timeout": 4.0, **kw})
        c.start()
        clients.append(c)
        return c

    yield make
    for c in clients:
        try:
            c.stop()
            c.close()
        except Exception:
            pass


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    reason = java_missing()
    if reason:
        pytest.skip(reason)
    from zabby.spark.cube import spark_session

    with pytest.MonkeyPatch.context() as patch:  # for the JVM's launch only: servers launched later fork (use_fork_server)
        for name, value in SHORT_JVM.items():
            patch.setenv(name, value)
        session = spark_session("local[2]", "zabby-tests", shuffle_partitions=2, driver_memory="1g")
    try:
        yield session
    finally:
        session.stop()
