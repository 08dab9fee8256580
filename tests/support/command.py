"""The ``rsched`` command run as a user runs it: a child process, its exit code and output."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import anyio
import orjson

from rsched._core.settings import Settings

#: The ``cli`` fixture (tests/conftest.py): ``cli(*args)`` runs ``rsched ARGS`` in the test's
#: process against its deployment; (exit code, stdout, stderr).
Cli = Callable[..., tuple[int, str, str]]


async def cli(settings: Settings, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "RSCHED_REDIS_URL": settings.url, "RSCHED_PREFIX": settings.prefix}
    done = await anyio.run_process(
        [sys.executable, "-m", "rsched._cli.main", *args], env=env, check=False
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def as_json(result: tuple[int, str, str]) -> Any:
    """The JSON a ``cli(...)`` run printed, once it exited 0."""
    code, out, err = result
    assert code == 0, err
    return orjson.loads(out)
