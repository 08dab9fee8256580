"""Structured log lines: logfmt quoting and the JSON form."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import orjson
import pytest

from rsched._core.log import configure_logging, get_logger


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    root = logging.getLogger("rsched")
    saved = (root.handlers[:], root.level, root.propagate)
    yield io.StringIO()
    root.handlers[:], root.level, root.propagate = saved


def _lines(stream: io.StringIO, fmt: str) -> list[str]:
    configure_logging("debug", fmt)
    handler = logging.getLogger("rsched").handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    log = get_logger("rsched.test")
    log.info("fired", count=3, ok=True, none=None, text="two words", quote='a"b', empty="",
             tab="a\tb", line="a\nb", esc="a\x1bb", eq="a=b", ok_id="job-1@17")  # fmt: skip
    log.debug("detail", items=[1, 2])
    return stream.getvalue().splitlines()


def test_logfmt_quotes_only_what_needs_it(stream: io.StringIO) -> None:
    first, second = _lines(stream, "text")
    assert " level=info logger=rsched.test event=fired count=3 ok=true none=null " in first
    assert 'text="two words" quote="a\\"b" empty=""' in first
    # Whitespace and control characters never break a line or a terminal.
    assert 'tab="a\\tb" line="a\\nb" esc="a\\u001bb" eq="a=b" ok_id=job-1@17' in first
    assert first.startswith("ts=")
    assert first.split()[0].endswith("Z")
    assert second.endswith("event=detail items=[1,2]")


def test_json_lines_parse(stream: io.StringIO) -> None:
    doc = orjson.loads(_lines(stream, "json")[0])
    assert doc["event"] == "fired"
    assert doc["count"] == 3
    assert doc["ok"] is True
    assert doc["logger"] == "rsched.test"


def _parts(line: str) -> list[str]:
    """A logfmt line without its time."""
    return line.split(" ", 1)[1].split()


def test_a_line_written_directly_matches_the_logging_path(stream: io.StringIO) -> None:
    """The direct path (rsched's handler alone, as configured) and logging's own path (a
    filter on the handler sends every record through it) write the same line."""
    configure_logging("debug", "text")
    handler = logging.getLogger("rsched").handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    log = get_logger("rsched.worker.jobs")
    fields = {"execution_id": "s1:abc", "task": "t", "attempt": 1, "note": "two words"}
    log.info("job.start", **fields)
    seen: list[str] = []

    def note(record: logging.LogRecord) -> bool:
        seen.append(record.getMessage())
        return True

    handler.addFilter(note)
    log.info("job.start", **fields)
    direct, through_logging = stream.getvalue().splitlines()
    assert seen == ["job.start"]
    assert _parts(direct) == _parts(through_logging)
    assert direct.startswith("ts=")
    assert direct.split()[0].endswith("Z")


def test_an_applications_handler_gets_every_record(stream: io.StringIO) -> None:
    """A handler added below rsched's (or a filter on the way) turns the direct path off."""
    configure_logging("info", "json")
    handler = logging.getLogger("rsched").handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    worker = logging.getLogger("rsched.worker")
    keep = Keep()
    worker.addHandler(keep)
    try:
        get_logger("rsched.worker.jobs").info("job.end", outcome="completed")
        get_logger("rsched.worker.jobs").debug("job.detail")  # below the level: nowhere
    finally:
        worker.removeHandler(keep)
    assert [r.getMessage() for r in records] == ["job.end"]
    assert records[0].rsched_fields == {"outcome": "completed"}  # type: ignore[attr-defined]
    [line] = stream.getvalue().splitlines()
    assert orjson.loads(line)["outcome"] == "completed"


def test_values_render_the_same_the_first_time_and_after(monkeypatch: pytest.MonkeyPatch) -> None:
    # The rendered strings are kept (a worker's lines repeat them), a bounded number of them;
    # a subclass of str or int is rendered as its kind, never kept.
    import enum

    from rsched._core import log

    class Level(enum.IntEnum):
        ONE = 1

    class Name(str):
        pass

    monkeypatch.setattr(log, "_rendered", {})
    monkeypatch.setattr(log, "_RENDERED_MOST", 3)
    values = [
        "plain", "two words", "", 'a"b', Name("x y"), 7, -0.5, True, False, Level.ONE,
        float("nan"), None, {"a": 1},
    ]  # fmt: skip
    first = [log._logfmt_value(v) for v in values]
    assert first == [
        "plain", '"two words"', '""', '"a\\"b"', '"x y"', "7", "-0.5", "true", "false", "1",
        "nan", "null", '"{\\"a\\":1}"',
    ]  # fmt: skip
    assert [log._logfmt_value(v) for v in values] == first
    assert len(log._rendered) <= 3
    assert all(type(k) is str for k in log._rendered)


def test_a_timestamp_has_its_milliseconds() -> None:
    from rsched._core import log

    assert log._timestamp(1767229200.0) == "2026-01-01T01:00:00.000Z"
    assert log._timestamp(1767229200.0456) == "2026-01-01T01:00:00.045Z"
    assert log._timestamp(1767229201.9999) == "2026-01-01T01:00:01.999Z"
