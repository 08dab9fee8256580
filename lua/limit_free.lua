--[[ limit_free — jobs let go of their limit holds without the script that ends their run (a job
its worker will not run after all: superseded by a newer run of its schedule). The scripts that
acknowledge a run (complete, retry, dead) release its holds themselves.

A released key with waiting jobs becomes ready for the resume calls. Releasing a hold that is
gone does nothing, so running it twice is harmless.

KEYS[1]..KEYS[11] the limits' keys (rsched._core.keys.Keys.limits; lua/includes/limit_keys.lua)
ARGV[1]      JSON array of [execution id, [limit key, …] ]

Returns the number of keys that became ready | {BAD_ARGS=-7} ARGV[1] is not a JSON array |
{WRONG_TYPE=-6} a limits key has another type (nothing done).
]]
-- @include codes
-- @include rcall
-- @include now_ms
-- @include limit_keys
-- @include limit_keys_ok
-- @include limit_release

local L = limit_keys(1)
local ok, items = pcall(cjson.decode, ARGV[1])
if not ok or type(items) ~= 'table' then return {BAD_ARGS} end
if not limit_keys_ok(L) then return {WRONG_TYPE} end
local now = now_ms()
local woke = 0
for _, it in ipairs(items) do woke = woke + limit_release(L, now, it[1], it[2]) end
return woke
