"""The other ZooKeeper clients against zabby and ZooKeeper 3.8 (issue 55; harness/differential/
clients.py, scripts/client_suites.py): node-zookeeper-client's and the C client's scenarios the
same on both from the first request on, a handful of aiozk's own tests, and the xids each client
really sends (recorded by a proxy) all answered by zabby.  The whole suites on 1 and 3 servers
(aiozk's 85 tests, go-zookeeper's, the scenarios on 3 servers, null-data bursts) are slow."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from harness.differential import aiozk_suite, c_client, gozk, node_client, zkcli
from harness.differential.clients import ClientUnavailable, ensure_debian_clients, npm_packages
from harness.differential.servers import RunningSystem, running_system
from harness.differential.xids import ConnectionLog, recording_proxy
from harness.local.zookeeper import ZooKeeperUnavailable, ensure_zookeeper

AIOZK_QUICK = ["aiozk/test/test_client.py", "aiozk/test/test_counter.py"]  # 11 of its 85 tests, 3 s on zabby


def _available(*needs: Callable[[], object]) -> None:
    """Install what the test needs; skip where apt-get or npm is not available."""
    try:
        for need in needs:
            need()
    except (ClientUnavailable, ZooKeeperUnavailable) as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RunningSystem]]:
    """ZooKeeper 3.8 and zabby, standalone, for the whole module."""
    _available(ensure_zookeeper, ensure_debian_clients, lambda: npm_packages("node", [node_client.PACKAGE]))
    workdir = Path(tmp_path_factory.mktemp("other-clients"))
    with running_system("zookeeper", 1, workdir / "zookeeper") as reference, running_system("zabby", 1, workdir / "zabby") as zabby:
        yield {"zookeeper": reference, "zabby": zabby}


def _port(running: RunningSystem) -> int:
    return int(running.hosts.split(",")[-1].rsplit(":", 1)[1])


def test_node_scenario_is_the_same_on_both_from_the_first_request(both: dict[str, RunningSystem]) -> None:
    theirs, ours = (node_client.run_scenario(both[system].hosts) for system in ("zookeeper", "zabby"))
    assert len(theirs) > 65 and theirs[1] == "02 a getChildren / -> error NO_NODE(-101)", theirs[:3]  # xid 0, answered
    assert node_client.first_difference(theirs, ours) is None, node_client.first_difference(theirs, ours)


def test_c_scenario_and_cli_mt_are_the_same_on_both(both: dict[str, RunningSystem]) -> None:
    theirs, ours = ([*c_client.run_scenario(both[system].hosts), *c_client.run_cli_mt(both[system].hosts)] for system in ("zookeeper", "zabby"))
    assert any("burst 8 threads x 60 requests -> ok 480 errors 0" in line for line in theirs), theirs
    assert node_client.first_difference(theirs, ours) is None, node_client.first_difference(theirs, ours)


def test_a_handful_of_aiozks_own_tests_pass_on_zabby(both: dict[str, RunningSystem], tmp_path: Path) -> None:
    counts = aiozk_suite.run_suite(both["zabby"].hosts, AIOZK_QUICK, log=tmp_path / "aiozk.log")
    assert counts.total == 11 and counts.passed == 11, (counts, (tmp_path / "aiozk.log").read_text()[-3000:])


def _kazoo_concurrently(hosts: str) -> None:
    """kazoo from 4 threads at once on one client, 25 async creates each."""
    client = KazooClient(hosts=hosts)
    client.start(20)
    try:
        client.ensure_path("/kazoo-xids")

        def creates(thread: int) -> None:
            for result in [client.create_async(f"/kazoo-xids/t{thread}-{i}", b"") for i in range(25)]:
                result.get(20)

        threads = [threading.Thread(target=creates, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        client.stop()
        client.close()


CLIENTS: dict[str, Callable[[str], object]] = {
    "kazoo": _kazoo_concurrently,
    "java (zkCli.sh)": zkcli.run,
    "C, 16 threads on one handle": lambda hosts: c_client.run_scenario(hosts, "/c-xids", threads=16, requests=60),
    "node-zookeeper-client": lambda hosts: node_client.run_scenario(hosts, "/node-xids"),
    "go-zookeeper, 16 goroutines": lambda hosts: gozk.run_probe(hosts, "/go-xids", goroutines=16, requests=60),
    "aiozk, pipelined": lambda hosts: aiozk_suite.null_bursts(hosts, clients=2, bursts=2, size=50, root="/aiozk-xids"),
}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_zabby_answers_every_xid_the_client_really_sends(both: dict[str, RunningSystem], client: str) -> None:
    with recording_proxy(_port(both["zabby"])) as proxy:
        CLIENTS[client](f"127.0.0.1:{proxy.port}")
    sessions = [log for log in proxy.connections if log.xids]
    assert sessions, f"{client} sent no request through the proxy"
    for log in sessions:
        assert log.refused() == [] and log.unanswered() == [], _describe(client, log)
    first = {log.xids[0] for log in sessions}
    print(f"{client}: first xids {sorted(first)}, {sum(len(log.xids) for log in sessions)} requests, "
          f"{sum(log.out_of_order() for log in sessions)} out of order on the wire")  # fmt: skip


def _describe(client: str, log: ConnectionLog) -> str:
    return f"{client}, connection {log.number}: refused {log.refused()[:5]}, unanswered {log.unanswered()[:5]}, closed by {log.closed_by}"


def test_the_proxy_sees_node_clients_xid_0_and_a_refusal() -> None:
    log = ConnectionLog(1, requests=[(0, 8), (1, 1), (-2, 11)], replies=[(0, -101), (1, -8)])
    assert log.xids == [0, 1] and log.unanswered() == [] and log.refused() == [1]
    assert ConnectionLog(2, requests=[(5, 4), (3, 4), (4, 4)]).out_of_order() == 2


def test_old_srvr_is_what_go_zookeepers_harness_parses() -> None:
    text = "Zookeeper version: 3.8.0-${mvngit.commit.id}, built on 2024-12-29 17:54 UTC\nLatency min/avg/max: 0/0.5123/3\nReceived: 3\n"
    assert gozk.old_srvr(text).splitlines()[:2] == ["Zookeeper version: 3.8.0---mvngit.commit.id-, built on 12/29/2024 17:54 UTC",
                                                    "Latency min/avg/max: 0/1/3"]  # fmt: skip


# --- the whole suites (slow) ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("size", [1, 3])
def test_aiozks_whole_suite_passes_on_zabby(tmp_path: Path, size: int) -> None:
    with running_system("zabby", size, tmp_path / "zabby") as zabby:
        counts = aiozk_suite.run_suite(zabby.hosts, log=tmp_path / "aiozk.log")
        restarts = zabby.core_restarts()
    assert counts.total == 85 and counts.passed == 85 and restarts == 0, (counts, restarts)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_everything_of_go_zookeepers_suite_that_passes_on_zookeeper_passes_on_zabby(tmp_path: Path) -> None:
    _available(ensure_zookeeper, ensure_debian_clients)
    theirs = gozk.run_suite("zookeeper", log=tmp_path / "zookeeper.log")
    ours = gozk.run_suite("zabby", log=tmp_path / "zabby.log")
    assert theirs.passed >= 25, theirs
    failed_on_zookeeper = {name.split(" ")[0] for name in theirs.failures}  # "TestX (panicked)": which of two parallel tests panicked varies
    passed_on_zookeeper_only = [name for name in ours.failures if name.split(" ")[0] not in failed_on_zookeeper]
    assert gozk.still_failing("zabby", passed_on_zookeeper_only, log=tmp_path / "zabby.log") == [], (theirs, ours)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_node_and_c_scenarios_are_the_same_on_3_servers(tmp_path: Path) -> None:
    _available(ensure_zookeeper, ensure_debian_clients, lambda: npm_packages("node", [node_client.PACKAGE]))
    outputs = {}
    for system in ("zookeeper", "zabby"):
        with running_system(system, 3, tmp_path / system) as running:
            server = running.hosts.split(",")[-1]  # every session on one server: no session reads behind another's write
            outputs[system] = [*node_client.run_scenario(server), *c_client.run_scenario(server)]
            cycles, errors = c_client.run_load_gen(running.hosts)
            assert cycles > 0 and errors == 0, (system, cycles, errors)
    assert node_client.first_difference(outputs["zookeeper"], outputs["zabby"]) is None, node_client.first_difference(outputs["zookeeper"], outputs["zabby"])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_null_data_bursts_through_aiozk_on_3_servers_are_all_answered(tmp_path: Path) -> None:
    """Issue 55's figure: 3 clients x 10 bursts of 100 null creates, then as many null setData,
    with ZooKeeper's forceSync (proposals queue behind the fsync): all 6,000 answered, no core
    restart in any server's log."""
    with running_system("zabby", 3, tmp_path, forceSync="yes") as zabby:
        counts = aiozk_suite.null_bursts(zabby.hosts)
        restarts = zabby.core_restarts()
    assert counts["sent"] == counts["answered"] == 6000 and restarts == 0, (counts, restarts)
