"""The Lua scripts: the include loader, every script's header, and loading on both servers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from redis.asyncio import Redis

from rsched._core.codes import Code
from rsched._redis import scripts

ENGINE_SCRIPTS = (
    "due", "fire", "upsert", "upsert_many", "remove", "pause", "resume", "trigger",
    "lease_acquire", "lease_renew", "lease_release", "enqueue", "debounce", "expire",
    "every_id", "flow_create", "flow_start", "flow_cancel", "flow_sweep",
)  # fmt: skip


def write(directory: Path, name: str, text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.lua").write_text(text)


def test_expand_inlines_includes_recursively(tmp_path: Path) -> None:
    inc = tmp_path / "includes"
    write(inc, "a", "local a = 1\n-- @include b\n")
    write(inc, "b", "local b = 2\n")
    out = scripts.expand("-- @include a\nreturn a + b\n", inc)
    assert out == "local a = 1\nlocal b = 2\n\nreturn a + b\n"


def test_expand_inlines_an_include_once(tmp_path: Path) -> None:
    inc = tmp_path / "includes"
    write(inc, "a", "local a = 1\n")
    write(inc, "b", "-- @include a\nlocal b = a\n")
    out = scripts.expand("-- @include b\n-- @include a\nreturn b\n", inc)
    assert out == "local a = 1\n\nlocal b = a\n\n\nreturn b\n"


def test_expand_leaves_other_comments(tmp_path: Path) -> None:
    text = "-- @include\n--  @include a\n-- see @include a\nreturn 1\n"
    assert scripts.expand(text, tmp_path) == text


def test_expand_rejects_cycles_and_missing_files(tmp_path: Path) -> None:
    inc = tmp_path / "includes"
    write(inc, "a", "-- @include b\n")
    write(inc, "b", "-- @include a\n")
    with pytest.raises(ValueError, match="cycle: a -> b -> a"):
        scripts.expand("-- @include a\n", inc)
    with pytest.raises(FileNotFoundError, match="'nope'"):
        scripts.expand("-- @include nope\n", inc)


def test_every_engine_script_exists_with_a_header() -> None:
    assert set(ENGINE_SCRIPTS) <= set(scripts.names())
    for name in ENGINE_SCRIPTS:
        text = (scripts.lua_dir() / f"{name}.lua").read_text()
        assert text.startswith(f"--[[ {name} "), name
        header = text.split("]]", 1)[0]
        assert "KEYS[1]" in header, name
        assert re.search(r"ARGV\[1\]|ARGV: none", header), name
        assert "Returns" in header or "returns" in header, name
        assert "@include" not in scripts.source(name), name


CODE_NAMED = re.compile(r"\b([A-Z][A-Z_]+)=(-?\d+)\b")
# A code a script returns by name: a reply, the first element of a reply table, or a per-item
# code it assigns.
RETURNED = re.compile(r"(?:\breturn\s+(?:tostring\()?|\{|\bcode = )([A-Z][A-Z_]+)\b")
# A code as a bare number where a script returns one.
BARE = re.compile(
    r"(?:return\s*|op_store\([^()]*?, |\w+ = )\{\s*-?\d+\s*[,}]"
    r"|return\s+'?-?\d+'?\s*(?:end\b|--|$)"
    r"|\bcode = -?\d+",
    re.MULTILINE,
)
LUA_CODE = re.compile(r"^local ([A-Z][A-Z_]+) = (-?\d+)\b", re.MULTILINE)


def _header(path: Path) -> str:
    text = path.read_text()
    if text.startswith("--[["):
        return text.split("]]", 1)[0]
    return "\n".join(line for line in text.splitlines() if line.startswith("--"))


def test_lua_codes_are_the_python_table() -> None:
    text = (scripts.lua_dir() / "includes" / "codes.lua").read_text()
    assert {name: int(number) for name, number in LUA_CODE.findall(text)} == {
        code.name: code.value for code in Code
    }


def test_codes_in_script_headers_are_the_tables() -> None:
    named: set[Code] = set()
    paths = [*scripts.lua_dir().glob("*.lua"), *scripts.lua_dir().glob("includes/*.lua")]
    for path in paths:
        header = _header(path)
        listed = {name for name, number in CODE_NAMED.findall(header)}
        for name, number in CODE_NAMED.findall(header):
            assert name in Code.__members__, f"{path.name}: {name} is not in rsched._core.codes"
            assert Code[name] == int(number), f"{path.name}: {name}={number}"
            named.add(Code[name])
        if path.parent.name == "includes":
            continue
        body = path.read_text()[len(header) :]
        assert not BARE.search(body), f"{path.name} returns a bare number: name the code"
        for name in RETURNED.findall(body):
            if name in Code.__members__:
                assert name in listed, f"{path.name} returns {name}, not named in its header"
    assert named == set(Code), "codes no script returns"


@pytest.mark.parametrize("name", scripts.names())
async def test_scripts_load_on_the_server(redis: Redis, name: str) -> None:
    sha = await redis.script_load(scripts.source(name))
    assert (await redis.script_exists(sha)) == [True]
