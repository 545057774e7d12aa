"""A reconfig where the configuration folder is read-only, as under the shipped systemd unit
(ProtectSystem=strict, only the data folder writable): each zoo.cfg sits on a filesystem
mounted read-only and names a dynamicConfigFile in its server's data folder, as
docs/operations.md (*Installing under systemd*) says to set it up.  The committed membership
is written there, every server keeps serving, and a restart comes back with it.  A server
whose reconfig would have to write beside a read-only zoo.cfg refuses to start, saying so."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import CHECKOUT
from tests.ensemble.test_reconfig import SERVING, SETTINGS, reconfigure
from tests.tmpfs import small_tmpfs
from zabby.membership import Membership
from zabby.testing import Ensemble, wait_until


def _read_only(mount_point: Path) -> None:
    done = subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot remount read-only here: {done.stderr.decode().strip()}")


def _move_config(ensemble: Ensemble, conf: Path) -> None:
    """Each server's zoo.cfg into ``conf`` (soon read-only), its server.N lines into a
    dynamicConfigFile in its data folder."""
    for sid, server in ensemble.servers.items():
        lines = server.config_path.read_text().splitlines()
        dynamic = server.data_dir / "zoo.cfg.dynamic"
        dynamic.write_text("\n".join(line for line in lines if line.startswith("server.")) + "\n")
        static = [line for line in lines if not line.startswith("server.")] + [f"dynamicConfigFile={dynamic}"]
        server.config_path = conf / f"zoo{sid}.cfg"
        server.config_path.write_text("\n".join(static) + "\n")


@pytest.fixture
def conf(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "etc-zabby", "1m") as mount_point:
        yield mount_point


def test_a_reconfig_writes_the_membership_in_the_data_folder_when_zoo_cfg_is_read_only(tmp_path: Path, conf: Path) -> None:
    ensemble = Ensemble(tmp_path / "ensemble", 3, **SETTINGS)
    _move_config(ensemble, conf)
    _read_only(conf)
    try:
        ensemble.start()
        ensemble.wait_leader()
        membership = reconfigure(ensemble, 1, leaving="3")
        assert membership.voters == {1, 2}
        for sid in (1, 2):
            server = ensemble.servers[sid]
            dynamic = server.data_dir / "zoo.cfg.dynamic"
            wait_until(lambda: Membership.parse(dynamic.read_text()).version == membership.version, 10.0,  # noqa: B023
                       f"server {sid}'s dynamic file")  # fmt: skip
            server.wait_mode(SERVING, 30)  # (one of them leads the new membership after an election)
            assert "Read-only file system" not in server.log_path.read_text()
        for sid in (1, 2):  # a restart reads the membership back from the data folder
            ensemble.servers[sid].restart()
        for sid in (1, 2):
            ensemble.servers[sid].wait_mode(SERVING, 30)
        conf_word = ensemble.servers[1].four_letter("conf")
        assert f"version={membership.version:x}" in conf_word and "server.3" not in conf_word
    finally:
        ensemble.kill_all()


def test_a_server_that_could_not_record_a_reconfig_refuses_to_start(tmp_path: Path, conf: Path) -> None:
    ensemble = Ensemble(tmp_path / "ensemble", 3, **SETTINGS)
    server = ensemble.servers[1]
    server.config_path = conf / "zoo1.cfg"
    server.config_path.write_text((server.workdir / "zoo.cfg").read_text())  # its server.N lines in zoo.cfg
    _read_only(conf)
    done = subprocess.run([sys.executable, "-m", "zabby.server.main", str(server.config_path)], capture_output=True, text=True,
                          timeout=60, cwd=CHECKOUT, check=False)  # fmt: skip
    assert done.returncode == 2
    assert f"reconfigEnabled=true but {conf} is not writable" in done.stderr and "dynamicConfigFile" in done.stderr
