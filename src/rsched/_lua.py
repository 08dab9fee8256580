"""Loads the Lua scripts of lua/ (one file per atomic operation) and inlines their includes.

Scripts are registered once per client and called by SHA; redis-py re-loads a script the server
forgot (NOSCRIPT, e.g. after a restart) transparently.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

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
