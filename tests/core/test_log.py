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
    log.info("fired", count=3, ok=True, none=None, text="two words", quote='a"b', empty="")
    log.debug("detail", items=[1, 2])
    return stream.getvalue().splitlines()


def test_logfmt_quotes_only_what_needs_it(stream: io.StringIO) -> None:
    first, second = _lines(stream, "text")
    assert " level=info logger=rsched.test event=fired count=3 ok=true none=null " in first
    assert 'text="two words" quote="a\\"b" empty=""' in first
    assert first.startswith("ts=")
    assert first.split()[0].endswith("Z")
    assert second.endswith("event=detail items=[1,2]")


def test_json_lines_parse(stream: io.StringIO) -> None:
    doc = orjson.loads(_lines(stream, "json")[0])
    assert doc["event"] == "fired"
    assert doc["count"] == 3
    assert doc["ok"] is True
    assert doc["logger"] == "rsched.test"
