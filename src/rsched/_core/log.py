"""Structured log lines: ``ts=… level=info logger=rsched.scheduler event=leader.acquired k=v``.

Every line has an ``event`` name and key/value fields, as logfmt (default, readable) or JSON
(``RSCHED_LOG_FORMAT=json``) for log pipelines.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson


class EventLogger:
    """A thin wrapper so call sites read ``log.info("fired", count=3)``."""

    def __init__(self, name: str) -> None:
        self._logger = logging.getLogger(name)
        #: Whether a line at a level would be written: a test that spares a line on a hot path
        #: the gathering of its fields (a call with five of them costs ~5,000 instructions).
        self.enabled_for = self._logger.isEnabledFor

    def _emit(self, level: int, event: str, fields: dict[str, Any]) -> None:
        logger = self._logger
        if not logger.isEnabledFor(level):
            return
        handler = _direct_handler(logger, level)
        if handler is not None:
            # The line rsched's own handler would write, without the LogRecord and the
            # logging machinery around it: half of a line's cost, and a worker writes a line
            # per job.
            line = handler.formatter.render(time.time(), level, logger.name, event, fields, None)
            try:
                with handler.lock:  # type: ignore[union-attr]  # a handler's lock is set
                    handler.stream.write(line + "\n")
                    handler.stream.flush()
                return
            except Exception:  # the slow path reports it (handleError)
                pass
        # makeRecord + handle skips Logger.findCaller's stack walk: source lines are not logged.
        record = logger.makeRecord(
            logger.name, level, "", 0, event, (), None, extra={"rsched_fields": fields}
        )
        logger.handle(record)

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
# A timestamp's milliseconds, '.000Z' to '.999Z', written out once.
_MILLIS = [f".{ms:03d}Z" for ms in range(1000)]


def _timestamp(created: float) -> str:
    # Formatting the date part once per second keeps a busy worker's log lines cheap.
    global _second_cache
    second = int(created)
    if _second_cache[0] != second:
        _second_cache = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return _second_cache[1] + _MILLIS[int((created - second) * 1000)]


# The strings already rendered, as logfmt values: a worker's line per job repeats its task,
# queue and outcome, and looking one up costs a third of rendering it. Bounded: emptied when
# full (the ids that pass through it once each fill it).
_rendered: dict[str, str] = {}
_RENDERED_MOST = 1024


def _logfmt_value(value: Any) -> str:
    kind = type(value)
    if kind is str:
        text = _rendered.get(value)
        if text is None:
            if len(_rendered) >= _RENDERED_MOST:
                _rendered.clear()
            text = _rendered[value] = _quoted(value)
        return text
    if kind is int or kind is float:  # the exact types first: most values of a line
        return str(value)
    if isinstance(value, str):
        return _quoted(value)
    if isinstance(value, int | float):  # bools included: JSON spells them true/false
        return "true" if value is True else "false" if value is False else str(value)
    return _quoted(orjson.dumps(value, default=str).decode())


def _quoted(text: str) -> str:
    """``text`` as a logfmt value: quoted when it holds a space, '=' or '"', or any other
    character that is not printable (whitespace, control characters: a value never breaks its
    line); str methods rather than a regex, on the path of every job's line."""
    if text and text.isprintable() and " " not in text and "=" not in text and '"' not in text:
        return text
    return orjson.dumps(text).decode()


_LEVELS = {level: logging.getLevelName(level).lower() for level in range(0, 60, 10)}


def _logfmt(
    created: float, level: int, name: str, event: str, fields: dict[str, Any], exc: str | None
) -> str:
    line = (
        f"ts={_timestamp(created)} level={_level_name(level)} logger={name} "
        f"event={_logfmt_value(event)}"
    )
    if fields:
        line += " " + " ".join([f"{k}={_logfmt_value(v)}" for k, v in fields.items()])
    if exc:
        line += f" exc={_logfmt_value(exc)}"
    return line


def _json(
    created: float, level: int, name: str, event: str, fields: dict[str, Any], exc: str | None
) -> str:
    doc: dict[str, Any] = {
        "ts": _timestamp(created),
        "level": _level_name(level),
        "logger": name,
        "event": event,
        **fields,
    }
    if exc:
        doc["exc"] = exc
    return orjson.dumps(doc, default=str).decode()


Render = Callable[[float, int, str, str, dict[str, Any], str | None], str]


class _EventFormatter(logging.Formatter):
    """Renders a record's event line with ``render`` (logfmt or JSON), which EventLogger's
    direct path calls without a record."""

    def __init__(self, render: Render) -> None:
        super().__init__()
        self.render = render

    def format(self, record: logging.LogRecord) -> str:
        exc = self.formatException(record.exc_info) if record.exc_info else None
        fields: dict[str, Any] = getattr(record, "rsched_fields", {})
        return self.render(
            record.created, record.levelno, record.name, record.getMessage(), fields, exc
        )


def _level_name(level: int) -> str:
    return _LEVELS.get(level) or logging.getLevelName(level).lower()


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler configure_logging installs on the ``rsched`` logger."""

    formatter: _EventFormatter


#: The handler configure_logging installed, and the logger it is on.
_installed: tuple[logging.Logger, _Handler] | None = None


def _direct_handler(logger: logging.Logger, level: int) -> _Handler | None:
    """rsched's own handler when a record of ``logger`` at ``level`` would go to it alone, as
    configure_logging left things: no handler or filter on the way up, none added beside it.
    None otherwise (an application's logging setup, a test's capture): then the record goes
    through logging as usual."""
    if _installed is None:
        return None
    root, handler = _installed
    node: logging.Logger | None = logger
    while node is not root:
        if node is None or node.handlers or node.filters or not node.propagate:
            return None
        node = node.parent
    handlers = root.handlers
    if len(handlers) != 1 or handlers[0] is not handler or root.filters or handler.filters:
        return None
    if level < handler.level:
        return None
    return handler


def configure_logging(level: str = "info", fmt: str = "text") -> None:
    """Send rsched's log lines to stderr in the chosen format (called by the entry points)."""
    global _installed
    handler = _Handler(sys.stderr)
    handler.setFormatter(_EventFormatter(_json if fmt == "json" else _logfmt))
    root = logging.getLogger("rsched")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    _installed = (root, handler)
