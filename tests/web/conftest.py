"""Fixtures of the dashboard and HTTP API tests: the app served for the test's prefix, and a
client of the same deployment."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack

import pytest

import rsched
from rsched import Settings
from tests.support.web import serve

Web = Callable[..., str]


@pytest.fixture
def web(settings: Settings) -> Iterator[Web]:
    """``web(**create_app options)`` serves the app for this test's prefix; returns its URL."""
    with ExitStack() as stack:
        yield lambda **options: stack.enter_context(serve(settings, **options))


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[rsched.Client]:
    async with rsched.Client.from_settings(settings) as c:
        yield c
