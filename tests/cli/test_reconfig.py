"""zabby-cli's ``reconfig`` (-add/-remove/-members/-file/-v/-s) and ``config`` against a real
3-server ensemble, printed as zkCli.sh prints them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import zabby.testing
from tests.cli.helpers import run
from tests.cli.test_main import cli
from zabby.cli import BufferWriter, Shell
from zabby.membership import Membership
from zabby.testing import Ensemble, ServerProcess

SETTINGS = {"tickTime": 200, "reconfigEnabled": "true", "skipACL": "yes"}


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[Ensemble]:
    with zabby.testing.ensemble(3, workdir=tmp_path, **SETTINGS) as group:
        yield group


def committed(out: str) -> Membership:
    """The membership a reconfig printed: zkCli's ``Committed new configuration:`` and the
    configuration's text."""
    head, _, text = out.partition("\n")
    assert head == "Committed new configuration:", out
    return Membership.parse(text)


def test_reconfig_add_remove_members_and_config_as_zkcli(ensemble: Ensemble) -> None:
    hosts = ensemble.hosts  # 1..3: a session on server 4 is dropped when its role changes, as in ZooKeeper
    joiner = ensemble.new_server(4, {1, 2, 3})
    joiner.start(30)
    sh = Shell(hosts, BufferWriter(), timeout_s=10.0, connect_timeout_s=10.0)
    assert sh.connect(), sh.writer.stderr  # type: ignore[attr-defined]
    try:
        status, out, err = run(sh, "config")
        assert status == 0 and err == "", err
        start = Membership.parse(out)
        assert start.version == 0 and start.sids == {1, 2, 3} and out.endswith("version=0\n")

        # -add, as zkCli: server.N=host:quorumPort:electionPort;clientPort (participant, any address)
        quorum, election, client = ensemble.ports[4]
        status, out, err = run(sh, f"reconfig -add server.4=127.0.0.1:{quorum}:{election};{client}")
        assert (status, err) == (0, ""), err
        grown = committed(out)
        assert grown.voters == {1, 2, 3, 4} and grown.version > 0
        assert f"server.4=127.0.0.1:{quorum}:{election}:participant;0.0.0.0:{client}\n" in out
        assert out.endswith(f"version={grown.version:x}\n")
        status, out, _ = run(sh, "config")
        assert Membership.parse(out) == grown
        status, out, _ = run(sh, "config -c")  # the client connect string
        assert out.strip().split(",") == [f"127.0.0.1:{ensemble.ports[sid][2]}" for sid in (1, 2, 3, 4)]

        # a stale -v is refused and changes nothing
        status, out, err = run(sh, f"reconfig -v {start.version:x} -remove 4")
        assert status != 0 and err.startswith("version No is not valid"), (out, err)
        # -remove with the right -v, and -s prints the stat of /zookeeper/config
        status, out, err = run(sh, f"reconfig -s -v {grown.version:x} -remove 4")
        assert (status, err) == (0, ""), err
        shrunk_text, _, stat = out.partition("cZxid = ")
        shrunk = committed(shrunk_text)
        assert shrunk.voters == {1, 2, 3} and f"mZxid = 0x{shrunk.version:x}" in stat

        # -members: the whole new membership (server 4 back as an observer), and -file
        members = ",".join([f"server.{m.sid}={m.spec()}" for m in shrunk.members] + [ensemble.spec(4, observer=True)])
        status, out, err = run(sh, f"reconfig -members {members}")
        assert (status, err) == (0, ""), err
        observed = committed(out)
        assert observed.voters == {1, 2, 3} and observed.observers == {4}
        path = ensemble.workdir / "three.cfg"
        path.write_text(shrunk.with_version(0).text())
        status, out, err = run(sh, f"reconfig -file {path}")
        assert (status, err) == (0, ""), err
        assert committed(out).sids == {1, 2, 3}

        status, out, err = run(sh, "reconfig -add server.5=127.0.0.1:1:2 -members server.1=127.0.0.1:1:2")
        assert status != 0 and "mixing incremental and non-incremental" in err
    finally:
        sh.close()
        joiner.stop()

    # one-shot, as a script would run it
    result = cli("-server", ensemble.servers[1].hosts, "config")
    assert result.returncode == 0 and Membership.parse(result.stdout).sids == {1, 2, 3}, result.stderr
    # not a member: ZooKeeper 3.8 ignores the id and commits the same servers under a new version
    result = cli("-server", ensemble.servers[1].hosts, "reconfig", "-remove", "9")
    assert result.returncode == 0 and committed(result.stdout).sids == {1, 2, 3}, result.stderr
    result = cli("-server", ensemble.servers[1].hosts, "reconfig", "-remove", "x")
    assert result.returncode == 1 and result.stderr, result.stdout


def test_reconfig_refused_while_disabled(zabby_server: ServerProcess) -> None:
    result = cli("-server", zabby_server.hosts, "reconfig", "-remove", "3")
    assert result.returncode == 1
    assert result.stderr == "KeeperErrorCode = Attempts to perform a reconfiguration operation when reconfiguration feature is disabled.\n"
