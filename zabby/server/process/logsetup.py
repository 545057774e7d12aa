"""The server's logging: plain text by default, JSON lines as an option, or a config file.

    zabby-server CONF                              text lines on stderr (journald adds time and host)
    zabby-server --log-format json CONF            one JSON object per line
    zabby-server --log-config logging.json CONF    a logging.config dictConfig file (JSON), or an
                                                   .ini file for logging.config.fileConfig

A JSON line holds ``ts`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``,
``message``, ``pid``, ``thread``, ``exception`` (the traceback, when there is one) and any
``extra={...}`` fields; ``deploy/logging-json.json`` uses ``JsonFormatter`` from a config file.
"""

from __future__ import annotations

import datetime
import json
import logging
from pathlib import Path
from typing import Any

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_STANDARD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class LogConfigError(ValueError):
    """The logging configuration file cannot be used."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module doc)."""

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        fields: dict[str, Any] = {
            "ts": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
            "thread": record.threadName,
        }
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        fields.update({key: value for key, value in record.__dict__.items() if key not in _STANDARD_ATTRIBUTES})
        return json.dumps(fields, default=str)


def configure(level: str = "INFO", log_format: str = "text", config_file: Path | None = None) -> None:
    """Set up the root logger once, before the server starts.

    Raises:
        LogConfigError: the config file is missing or invalid, or the level or format unknown.
    """
    if config_file is not None:
        _load_file(config_file)
        return
    if log_format not in ("text", "json"):
        raise LogConfigError(f"--log-format {log_format!r}: expected text or json")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    try:
        logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    except ValueError as exc:
        raise LogConfigError(f"--log-level {level!r}: {exc}") from None


def _load_file(path: Path) -> None:
    import logging.config  # (with logging.handlers, socketserver, pickle): only for a config file

    try:
        if path.suffix == ".ini":
            logging.config.fileConfig(path, disable_existing_loggers=False)
        else:
            logging.config.dictConfig(json.loads(path.read_text()))
    except FileNotFoundError:
        raise LogConfigError(f"logging config {path}: no such file") from None
    except (ValueError, TypeError, KeyError, AttributeError, ImportError) as exc:  # what dictConfig raises on bad input
        raise LogConfigError(f"logging config {path}: {exc}") from None
