"""Structured log lines: ``ts=… level=info logger=rsched.scheduler event=leader.acquired k=v``.

Every line has an ``event`` name and key/value fields, as logfmt (default, readable) or JSON
(``RSCHED_LOG_FORMAT=json``) for log pipelines.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson


class EventLogger:
    """A thin wrapper so call sites read ``log.info("fired", count=3)``."""

    def __init__(self, name: str) -> None:
        self._logger = logging.getLogger(name)

    def _emit(self, level: int, event: str, fields: dict[str, Any]) -> None:
        if self._logger.isEnabledFor(level):
            self._logger.log(level, event, extra={"rsched_fields": fields})

    def debug(self, event: str, **fields: Any) -> None:
        self._emit(logging.DEBUG, event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit(logging.INFO, event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit(logging.WARNING, event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit(logging.ERROR, event, fields)


def get_logger(name: str) -> EventLogger:
    return EventLogger(name)


def _timestamp(record: logging.LogRecord) -> str:
    ms = int(record.msecs)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{ms:03d}Z"


def _logfmt_value(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    if text == "" or any(c in text for c in ' ="'):
        return orjson.dumps(text).decode()
    return text


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = getattr(record, "rsched_fields", {})
        parts = [
            f"ts={_timestamp(record)}",
            f"level={record.levelname.lower()}",
            f"logger={record.name}",
            f"event={_logfmt_value(record.getMessage())}",
        ]
        parts += [f"{k}={_logfmt_value(v)}" for k, v in fields.items()]
        if record.exc_info:
            parts.append(f"exc={_logfmt_value(self.formatException(record.exc_info))}")
        return " ".join(parts)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
            **getattr(record, "rsched_fields", {}),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def configure_logging(level: str = "info", fmt: str = "text") -> None:
    """Send rsched's log lines to stderr in the chosen format (called by the entry points)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger("rsched")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
