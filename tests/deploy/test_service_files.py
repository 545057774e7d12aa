"""deploy/: the systemd unit runs zabby-server with options it has, never restarts a server
that stopped on a failed disk, and the logging configs (and --log-format json) give the
lines they promise."""

from __future__ import annotations

import configparser
import json
import shlex
import subprocess
import sys
from pathlib import Path

from tests import ROOT
from zabby.server.process.disk import EXIT_DISK_FAILURE
from zabby.server.main import build_parser
from zabby.testing import ServerProcess

DEPLOY = ROOT / "deploy"


def test_the_systemd_unit_starts_zabby_server_with_options_it_has() -> None:
    unit = configparser.ConfigParser(interpolation=None)
    unit.optionxform = str  # systemd keys are case-sensitive
    unit.read(DEPLOY / "systemd" / "zabby@.service")
    service = unit["Service"]
    command = shlex.split(service["ExecStart"])
    assert command[0].endswith("/zabby-server")
    args = build_parser().parse_args(command[1:])
    assert args.config == "/etc/zabby/zoo%i.cfg" and args.log_config == Path("/etc/zabby/logging.json")
    assert str(EXIT_DISK_FAILURE) in service["RestartPreventExitStatus"].split()
    assert service["KillSignal"] == "SIGTERM" and unit["Install"]["WantedBy"] == "multi-user.target"


def _log_with(config: Path) -> list[str]:
    script = ("from pathlib import Path; import logging; from zabby.server.process import logsetup; "
              f"logsetup.configure(config_file=Path({str(config)!r})); "
              "logging.getLogger('zabby.server').info('recovered %d znodes', 7, extra={'zxid': '0x5'}); "
              "logging.getLogger('zabby.server.conn').info('hidden: connections log at WARNING and above')")  # fmt: skip
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT, check=True)
    return run.stderr.splitlines()


def test_the_json_logging_config_writes_one_object_per_line() -> None:
    (line,) = _log_with(DEPLOY / "logging" / "logging-json.json")
    record = json.loads(line)
    assert record["message"] == "recovered 7 znodes" and record["level"] == "INFO" and record["zxid"] == "0x5"
    assert record["logger"] == "zabby.server" and record["ts"].endswith("Z")


def test_the_text_logging_config() -> None:
    assert _log_with(DEPLOY / "logging" / "logging.json") == ["INFO zabby.server: recovered 7 znodes"]


def test_a_server_logs_json_lines_and_refuses_a_bad_log_config(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "json")
    server.options = ["--log-format", "json"]
    server.start()
    server.stop()
    records = [json.loads(line) for line in server.log_path.read_text().splitlines()]
    assert any(r["message"].startswith("serving clients on") for r in records)
    broken = tmp_path / "broken.json"
    broken.write_text('{"version": 1, "handlers": {"h": {"class": "no.such.Handler"}}}')
    run = subprocess.run([sys.executable, "-m", "zabby.server.main", "--log-config", str(broken), str(server.config_path)],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert run.returncode == 2 and "zabby-server: logging config" in run.stderr


def test_the_install_steps_put_every_file_the_server_writes_where_the_unit_lets_it_write(tmp_path: Path) -> None:
    """deploy/systemd/install.sh, run into a folder: zoo.cfg in /etc/zabby (read-only under the
    unit's ProtectSystem=strict), and everything the server writes (data, log, the dynamic
    configuration a reconfig rewrites) under the unit's ReadWritePaths."""
    from zabby import config as zoo_config

    servers = "1=127.0.0.1:2888:3888;2181,2=127.0.0.1:2889:3889;2182,3=127.0.0.1:2890:3890;2183"
    subprocess.run(["bash", str(DEPLOY / "systemd" / "install.sh"), "--root", str(tmp_path), "--id", "2", "--servers", servers],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    unit = configparser.ConfigParser(interpolation=None)
    unit.optionxform = str
    unit.read(tmp_path / "etc" / "systemd" / "system" / "zabby@.service")
    writable = [Path(p) for p in unit["Service"]["ReadWritePaths"].split()]
    assert unit["Service"]["ProtectSystem"] == "strict"
    text = (tmp_path / "etc" / "zabby" / "zoo2.cfg").read_text()
    rebased = tmp_path / "zoo2.cfg"  # the same file, its absolute paths inside the install folder
    rebased.write_text(text.replace("=/var/lib/zabby", f"={tmp_path}/var/lib/zabby"))
    config = zoo_config.load(rebased)
    assert config.reconfig_enabled and {m.sid for m in config.peers} == {1, 2, 3} and config.server_id == 2
    written = [config.data_dir, config.data_log_dir, *zoo_config.membership_folders(config)]
    for path in written:
        absolute = Path("/") / path.relative_to(tmp_path)
        assert any(absolute.is_relative_to(folder) for folder in writable), (absolute, writable)
    assert not any(Path("/etc/zabby").is_relative_to(folder) for folder in writable)
    zoo_config.check_membership_writable(config)  # would refuse to start otherwise
