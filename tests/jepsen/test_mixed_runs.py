"""The fault harness on mixed ensembles: ZooKeeper 3.8 servers and zabby servers speaking
ZooKeeper's peer protocol (``scripts/jepsen.py --mix``).  The default run checks how a mixed
run is described (each server's kind, its zoo.cfg, its log format, the command that replays
it); the slow one runs 30 s of mixed faults on 2 ZooKeeper + 1 zabby and on 1 + 2."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from tests.jepsen.test_runs import SHORT, _assert_passed
from harness import CHECKOUT
from harness.jepsen.cluster import Cluster, ClusterSpec, Server
from harness.jepsen.nemesis import supported
from harness.jepsen.runner import RunSpec, effective_clients, reproduce_command, run_once, system_label
from harness.jepsen.watch_checker import same_txn
from zabby.opcodes import OpCode
from zabby.tree.txns import Txn

MIX = ("zookeeper", "zookeeper", "zabby")


def test_each_server_of_a_mixed_ensemble_has_its_kind(tmp_path: Path) -> None:
    spec = ClusterSpec(system="mixed", servers=3, workdir=tmp_path, kinds=MIX)
    zookeeper, zabby = Server(spec, 1), Server(spec, 3)
    assert (zookeeper.kind, zabby.kind) == ("zookeeper", "zabby")
    assert [p.name for p in zookeeper.log_paths] == ["zookeeper.log", "stdout.log"] and [p.name for p in zabby.log_paths] == ["server.log"]
    zabby.write_config([zabby.member_spec()])
    zookeeper.write_config([zookeeper.member_spec()])
    assert "quorum.protocol=zookeeper\n" in zabby.config_path.read_text()
    assert "quorum.protocol" not in zookeeper.config_path.read_text()
    assert supported("slow-disk", "mixed") and not supported("slow-disk", "zookeeper")


@pytest.mark.parametrize("bad", [
    {"system": "mixed", "servers": 3},  # no kinds
    {"system": "zabby", "servers": 3, "kinds": MIX},  # kinds, not mixed
    {"system": "mixed", "servers": 3, "kinds": ("zookeeper", "zabby")},  # a server without a kind
    {"system": "mixed", "servers": 3, "kinds": ("zookeeper", "zookeeper", "etcd")},
    {"system": "mixed", "servers": 3, "kinds": MIX, "reconfig": True},  # ZooKeeper's peer protocol: no reconfig, no quorum.auth
    {"system": "mixed", "servers": 3, "kinds": MIX, "quorum_auth": True},
])  # fmt: skip
def test_a_mixed_spec_names_one_kind_per_server_and_nothing_zookeepers_protocol_lacks(tmp_path: Path, bad: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError):
        ClusterSpec(workdir=tmp_path, **bad)


def test_a_mixed_run_is_replayed_by_its_command_and_uses_kazoo(tmp_path: Path) -> None:
    spec = RunSpec(seed=5, out_dir=tmp_path, system="mixed", servers=3, mix=MIX, clients=("zabby", "kazoo"))
    assert system_label(spec) == "mixed zookeeper+zookeeper+zabby"
    assert effective_clients(spec) == ("kazoo",)
    command = reproduce_command(spec)
    assert "--mix zookeeper,zookeeper,zabby" in command
    jepsen = runpy.run_path(str(CHECKOUT / "scripts" / "jepsen.py"))
    args = jepsen["parse_args"](command.split()[2:])
    assert (args.system, args.servers, args.mix) == ("mixed", 3, MIX)
    assert jepsen["parse_args"](["--mix", "zk,zabby,zabby"]).mix == ("zookeeper", "zabby", "zabby")
    for wrong in (["--mix", "zk,zk,zk"], ["--mix", "zk,zabby"], ["--mix", "zk,zk,zabby", "--servers", "3"], ["--mix", "zk,zabby,raft"]):
        with pytest.raises(SystemExit):
            jepsen["parse_args"](wrong)


def test_the_same_txn_in_a_zookeeper_log_and_a_zabby_log_is_the_same() -> None:
    """ZooKeeper logs a create2 request as a create2 txn with its body kept raw here
    (``txn_logs``); zabby logs it as a create: one txn."""
    zabby = Txn(7, 1, 2, 3, OpCode.CREATE, ("/a", b"x", ((31, "world", "anyone"),), 0, 1))
    zookeeper = Txn(7, 1, 2, 3, OpCode.CREATE2, ("/a", b"raw record"))
    assert same_txn(zabby, zookeeper)
    assert not same_txn(zabby, zookeeper._replace(body=("/b", b"raw record")))
    assert not same_txn(zabby, zookeeper._replace(cxid=9))
    assert not same_txn(zabby, zookeeper._replace(type=OpCode.DELETE))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mix", [MIX, ("zookeeper", "zabby", "zabby")])
def test_short_mixed_faults_on_a_mixed_ensemble(tmp_path: Path, mix: tuple[str, ...]) -> None:
    spec = RunSpec(seed=301, out_dir=tmp_path, system="mixed", servers=3, mix=mix, duration_s=30.0, nemesis="mixed", workers=4,
                   tick_ms=500, fault_s=4.0, quiet_s=3.0, workload=SHORT)  # fmt: skip
    record = run_once(spec)
    assert record["linearizable"] is True
    _assert_passed(record)
    assert any(role.startswith("zabby ") for role in record["roles"]), record["roles"]


def test_cluster_of_a_mixed_ensemble_writes_every_config(tmp_path: Path) -> None:
    cluster = Cluster(ClusterSpec(system="mixed", servers=3, workdir=tmp_path, kinds=MIX))
    try:
        configs = {sid: server.config_path.read_text() for sid, server in cluster.servers.items()}
    finally:
        cluster.stop()
    assert all(text.count("server.") == 3 for text in configs.values())
    assert ["quorum.protocol=zookeeper" in text for _, text in sorted(configs.items())] == [False, False, True]
