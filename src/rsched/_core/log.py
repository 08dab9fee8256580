"""Structured log lines: ``ts=… level=info logger=rsched.scheduler event=leader.acquired k=v``.

Every line has an ``event`` name and key/value fields, as logfmt (default, readable) or JSON
(``RSCHED_LOG_FORMAT=json``) for log pipelines.
"""

from __future__ import annotations

import logging
import re
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
            # makeRecord + handle skips Logger.findCaller's stack walk: source lines are not
            # logged, and a worker writes two lines per job.
            record = self._logger.makeRecord(
                self._logger.name, level, "", 0, event, (), None, extra={"rsched_fields": fields}
            )
            self._logger.handle(record)

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


_second_cache: tuple[int, str] = (-1, "")


def _timestamp(record: logging.LogRecord) -> str:
    # Formatting the date part once per second keeps a busy worker's log lines cheap.
    global _second_cache
    second = int(record.created)
    if _second_cache[0] != second:
        _second_cache = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{_second_cache[1]}.{int(record.msecs):03d}Z"


_NEEDS_QUOTES = re.compile(r'[\s="]')


def _logfmt_value(value: Any) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, int | float):  # bools included: JSON spells them true/false
        return "true" if value is True else "false" if value is False else str(value)
    else:
        text = orjson.dumps(value, default=str).decode()
    if not text or _NEEDS_QUOTES.search(text):
        return orjson.dumps(text).decode()
    return text


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = getattr(record, "rsched_fields", {})
        line = (
            f"ts={_timestamp(record)} level={record.levelname.lower()} logger={record.name} "
            f"event={_logfmt_value(record.getMessage())}"
        )
        if fields:
            line += " " + " ".join(f"{k}={_logfmt_value(v)}" for k, v in fields.items())
        if record.exc_info:
            line += f" exc={_logfmt_value(self.formatException(record.exc_info))}"
        return line


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
