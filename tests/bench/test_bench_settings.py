"""python -m harness.bench --setting: zoo.cfg lines for every server of both systems, for experiments
(forceSync=no, a huge snapCount).  Nothing is started or measured here: the systems are only
built, which writes their zoo.cfg files."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from harness.bench import cli as bench
from harness.bench.systems import ZabbySystem, ZooKeeperSystem


def _zoo_cfg(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_settings_are_parsed_and_noted() -> None:
    notes: list[str] = []
    settings = bench.parse_settings(argparse.ArgumentParser(), ["forceSync=no", " snapCount = 1000000000 "], notes)
    assert settings == {"forceSync": "no", "snapCount": "1000000000"}
    assert notes == ["zoo.cfg changed for every server of both systems (--setting): forceSync=no, snapCount=1000000000"]
    assert bench.parse_settings(argparse.ArgumentParser(), [], notes) == {} and len(notes) == 1


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("forceSync", "is not KEY=VALUE"),
        ("=no", "is no zoo.cfg key"),
        ("force Sync=no", "is no zoo.cfg key"),
        ("snapCount=", "has no value"),
        ("clientPort=2181", "set per server by the harness"),
        ("dataDir=/tmp/x", "set per server by the harness"),
        ("server.4=127.0.0.1:1:2", "set per server by the harness"),
    ],
)
def test_a_bad_setting_is_a_usage_error(line: str, reason: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        bench.parse_settings(argparse.ArgumentParser(prog="bench.py"), [line], [])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert f"--setting {line}: " in error and reason in error, error


def test_the_settings_reach_every_servers_zoo_cfg_of_both_systems(tmp_path: Path) -> None:
    settings = {"forceSync": "no", "snapCount": "1000000000"}
    zabby = ZabbySystem(tmp_path / "zabby", 3, settings=settings)
    zookeeper = ZooKeeperSystem(tmp_path / "zookeeper", 3, settings=settings)
    configs = [proc.config_path for proc in zabby.procs.values()] + [proc.config_path for proc in zookeeper.procs.values()]
    assert len(configs) == 6
    for path in configs:
        cfg = _zoo_cfg(path)
        assert cfg["forceSync"] == "no" and cfg["snapCount"] == "1000000000", path
        assert cfg["tickTime"] == "2000"  # the common settings stay
    default = _zoo_cfg(ZabbySystem(tmp_path / "plain", 1).procs[1].config_path)
    assert default["forceSync"] == "yes" and default["snapCount"] == "100000"
