"""Loads the Lua scripts of lua/ (one file per atomic operation) and inlines their includes.

Scripts are registered once per client and called by SHA; redis-py re-loads a script the server
forgot (NOSCRIPT, e.g. after a restart) transparently.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import ResponseError

from rsched._errors import StateError

_INCLUDE = re.compile(r"^-- @include (\w+)\s*$", re.MULTILINE)


def lua_dir() -> Path:
    """lua/ inside the installed package, or the repository's top-level lua/ in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "lua", here.parent.parent / "lua"):
        if (candidate / "fire.lua").is_file():
            return candidate
    raise FileNotFoundError(f"rsched Lua scripts not found next to {here}")


def expand(source: str, include_dir: Path, seen: tuple[str, ...] = ()) -> str:
    """Replace each ``-- @include name`` line with includes/name.lua (recursively, once each)."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in seen:
            raise ValueError(f"Lua include cycle: {' -> '.join((*seen, name))}")
        path = include_dir / f"{name}.lua"
        if not path.is_file():
            raise FileNotFoundError(f"Lua include {name!r} not found in {include_dir}")
        return expand(path.read_text(), include_dir, (*seen, name))

    return _INCLUDE.sub(replace, source)


@functools.cache
def source(name: str) -> str:
    """The full text of script ``name`` (file lua/<name>.lua) with includes inlined."""
    directory = lua_dir()
    return expand((directory / f"{name}.lua").read_text(), directory / "includes")


def names() -> list[str]:
    return sorted(p.stem for p in lua_dir().glob("*.lua"))


class ScriptCaller:
    """Calls the scripts of lua/ on one client: each registered once, then run by SHA.

    The base of the two stores (schedules and queues); a key of the wrong type, which only a
    writer other than rsched can cause, surfaces as StateError.
    """

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._scripts: dict[str, AsyncScript] = {}

    def script(self, name: str) -> AsyncScript:
        found = self._scripts.get(name)
        if found is None:
            found = self._scripts[name] = self.redis.register_script(source(name))
        return found

    async def call(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return await self.script(name)(keys=list(keys), args=list(args))
        except ResponseError as exc:
            if "WRONGTYPE" in str(exc):
                raise StateError(f"{name}: a key holds the wrong type of value ({exc})") from exc
            raise

    async def time_ms(self) -> int:
        """Redis TIME in epoch ms: decisions about time never use a client's clock."""
        seconds, micros = await self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000
