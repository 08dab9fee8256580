"""fakeredis for rsched.testing: a server of its own per environment, the one correction its
scripts need, and compiled scripts kept.

fakeredis (2.41) runs scripts in Lua 5.1 through lupa as Redis does, and answers ``redis.call``
in RESP2 inside a script whatever the client speaks, as Redis does, except for XREADGROUP: its
reply is shaped by the client's protocol. A client speaking RESP3 (redis-py 8's default) then
hands lua/take.lua a flattened map where Redis gives a list of [stream, entries] pairs. The
correction shapes it by the script's protocol, which is what fakeredis does for every other
command. tests/testing/test_fidelity.py holds fakeredis to a real server script by script.

fakeredis compiles a script's source at every call (about 5 ms for lua/fire.lua, more than
running it); its Lua runtime here keeps each compiled chunk, by source, as Redis keeps a
script's function by SHA. Running a compiled chunk again is running the source again: its
locals are made afresh at each run. Two more of its costs per call go, with what they guard
kept: after each script it runs a full Lua garbage collection (every compiled script is then
walked again; Lua's own incremental collector frees the call's KEYS and ARGV all the same), and
before each ``redis.call`` it lists every Lua global to find one a script set (here a count of
them is compared first, and fakeredis's own check runs when it differs).
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from rsched._core.errors import ConfigError


def fake_redis() -> Redis:
    """A decoded fakeredis client on a server of its own."""
    try:
        import fakeredis
        import lupa  # noqa: F401 - fakeredis runs scripts with it
    except ImportError as exc:
        raise ConfigError(
            f"rsched.testing needs fakeredis with Lua ({exc.name} is missing): "
            "pip install 'rsched[testing]'"
        ) from None
    _correct_xreadgroup()
    _keep_compiled()
    _count_globals()
    redis: Redis = fakeredis.FakeAsyncRedis(
        server=fakeredis.FakeServer(), decode_responses=True, encoding_errors="replace"
    )
    return redis


def _correct_xreadgroup() -> None:
    from fakeredis.commands_mixins.streams_mixin import StreamsCommandsMixin

    original = StreamsCommandsMixin._xreadgroup_reply
    if getattr(original, "rsched_corrected", False):
        return

    def reply(self: Any, res: dict[bytes, Any] | None) -> Any:
        if self._resp_version == 2:  # in a script: RESP2, whatever the client speaks
            return [[k, v] for k, v in res.items()] if res else None
        return original(self, res)

    reply.rsched_corrected = True  # type: ignore[attr-defined]
    StreamsCommandsMixin._xreadgroup_reply = reply  # type: ignore[method-assign]


#: Compiled chunks kept per runtime: rsched's scripts and a few more.
_KEPT = 512
#: What fakeredis runs after every script.
_FULL_COLLECTION = "collectgarbage()"
#: A Lua chunk returning a function that counts the globals.
_COUNT = "return function() local n = 0 for _ in pairs(_G) do n = n + 1 end return n end"


def _keep_compiled() -> None:
    import fakeredis.commands_mixins.scripting_mixin as scripting

    module = scripting.LUA_MODULE
    if isinstance(module, _KeepingModule):
        return
    scripting.LUA_MODULE = _KeepingModule(module)  # type: ignore[assignment]


class _KeepingModule:
    """fakeredis's Lua module (lupa.lua51) whose runtimes keep what they compiled."""

    def __init__(self, module: Any) -> None:
        self._module = module

        class Runtime(module.LuaRuntime):  # type: ignore[misc]
            def execute(self, code: bytes | str, *args: Any) -> Any:
                if code == _FULL_COLLECTION:
                    return None
                kept = self.__dict__.setdefault("kept", {})
                chunk = kept.get(code)
                if chunk is None:
                    chunk = self.compile(code)
                    if len(kept) < _KEPT:
                        kept[code] = chunk
                return chunk(*args)

        self.LuaRuntime = Runtime

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def _count_globals() -> None:
    import fakeredis.commands_mixins.scripting_mixin as scripting

    original = scripting._check_for_lua_globals
    if getattr(original, "rsched_counted", False):
        return
    counters: dict[int, Any] = {}

    def check(lua_runtime: Any, expected_globals: set[Any]) -> None:
        count = counters.get(id(lua_runtime))
        if count is None:
            count = counters[id(lua_runtime)] = lua_runtime.execute(_COUNT)
        if count() != len(expected_globals):
            original(lua_runtime, expected_globals)

    check.rsched_counted = True  # type: ignore[attr-defined]
    scripting._check_for_lua_globals = check
