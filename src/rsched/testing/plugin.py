"""rsched's pytest plugin: the ``rsched_env`` fixture, a :class:`~rsched.testing.TestEnv` per
test, open for the test's duration. A project loads it from its top conftest.py with
``pytest_plugins = ["rsched.testing.plugin"]``: it is not registered for every pytest run of an
environment where rsched is installed.

A project says which worker the environment runs by defining the fixture ``rsched_worker`` (in
its conftest.py), and may define ``rsched_start`` (where the clock starts) and
``rsched_settings``. ``rsched_env`` is an async fixture run by anyio's pytest plugin (which
comes with anyio): a test that uses it runs under anyio, with no marker needed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

import pytest

import rsched
from rsched._core.settings import Settings
from rsched.testing._env import TestEnv


@pytest.fixture
def rsched_worker() -> rsched.Worker | None:
    """The worker whose handlers the environment runs: override it in your conftest.py
    (``return myapp.tasks.worker``). None (this default) runs no jobs: they wait in their
    queues, for ``env.enqueued()``."""
    return None


@pytest.fixture
def rsched_start() -> datetime | str | float | None:
    """Where the virtual clock starts (default: rsched.testing.DEFAULT_START)."""
    return None


@pytest.fixture
def rsched_settings() -> Settings | None:
    """The deployment's settings (default: the worker's)."""
    return None


@pytest.fixture
async def rsched_env(
    anyio_backend: str,
    rsched_worker: rsched.Worker | None,
    rsched_start: datetime | str | float | None,
    rsched_settings: Settings | None,
) -> AsyncIterator[TestEnv]:
    """A TestEnv on fakeredis for the test: ``env.client``, ``await env.advance("1d")``."""
    async with TestEnv(rsched_worker, start=rsched_start, settings=rsched_settings) as env:
        yield env
