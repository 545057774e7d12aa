"""The same seeded random operations through kazoo, and through ZooKeeper's own Java client, to
Apache ZooKeeper 3.8 (Debian's jars) and to zabby, both standalone; every result, error,
Stat, watch event and its order must match (harness/differential/runner.py says how they are
compared).  A failure names the seed and the op:
``python scripts/diff_zookeeper.py [--client java] --seeds N --ops M --verbose`` replays it.

The differences ZooKeeper 3.8.0 is known to have are listed in harness/differential/known.py
and docs/zookeeper-compat.md; the workload steers around them, and each one's example is
checked here to still be what the list says.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.differential.java_client import build_driver
from harness.differential.known import KNOWN, KnownDifference, example_ops, under
from harness.differential.runner import CLIENT_KINDS, Pair, Script, run_ops, run_seed, run_seeds, summary
from harness.differential.servers import running_pair
from harness.local.javac import JavaUnavailable
from harness.local.zookeeper import ZooKeeperUnavailable, ensure_zookeeper

SHORT_SEEDS = range(10)
SHORT_OPS = 300
JAVA_SHORT_SEEDS = range(4)  # the Java leg's sessions are ZooKeeper's own client (java_client.py)
LONG_SEEDS = range(200)
LONG_OPS = 500


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """ZooKeeper and zabby, started once for the module; each seed works under its own root
    and deletes it afterwards."""
    try:
        ensure_zookeeper()
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"ZooKeeper 3.8 cannot run here: {exc}")
    with running_pair(Path(tmp_path_factory.mktemp("differential"))) as (reference, zabby):
        yield Pair(reference.hosts, zabby.hosts)


@pytest.mark.parametrize("seed", SHORT_SEEDS)
def test_short_run_answers_as_zookeeper(pair: Pair, seed: int) -> None:
    result = run_seed(pair, seed, SHORT_OPS)
    assert result.divergence is None, str(result.divergence)


@pytest.mark.parametrize("seed", JAVA_SHORT_SEEDS)
def test_short_run_through_the_java_client_answers_as_zookeeper(pair: Pair, seed: int) -> None:
    try:
        build_driver()
    except JavaUnavailable as exc:
        pytest.skip(f"the Java client cannot be built here: {exc}")
    result = run_seed(pair, seed, SHORT_OPS, client="java")
    assert result.divergence is None, str(result.divergence)


@pytest.mark.slow
@pytest.mark.timeout(6 * 3600)
@pytest.mark.parametrize("client", CLIENT_KINDS)
def test_long_run_answers_as_zookeeper(pair: Pair, client: str) -> None:
    results = list(run_seeds(pair, LONG_SEEDS, LONG_OPS, client))
    divergences = [str(result.divergence) for result in results if result.divergence is not None]
    assert not divergences, summary(results) + "\n\n" + "\n\n".join(divergences)


@pytest.mark.parametrize("known", KNOWN, ids=[known.name for known in KNOWN])
def test_known_difference_is_still_as_documented(pair: Pair, known: KnownDifference) -> None:
    root = f"/known-{KNOWN.index(known)}"
    result = run_ops(pair, 0, root, Script(example_ops(known, root)), len(known.example))
    divergence = result.divergence
    assert divergence is not None, (
        f"{known.name!r} is gone: drop it from harness/differential/known.py, docs/zookeeper-compat.md "
        "and the workload's steering"
    )
    found = (divergence.index, divergence.where, divergence.reference, divergence.zabby)
    assert found == (len(known.example) - 1, known.where, under(root, known.reference), under(root, known.zabby))
