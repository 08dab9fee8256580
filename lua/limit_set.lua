--[[ limit_set — an operator sets or clears the numbers of a limit key, or of every key a
pattern matches ('*' matches any text), overriding the numbers jobs declare (docs/limits.md).

The keys it concerns that have waiting jobs become ready at once, so that raised numbers start
them without waiting for a release. Setting the same numbers twice is harmless.

KEYS[1]..KEYS[11] the limits' keys (rsched._core.keys.Keys.limits; lua/includes/limit_keys.lua)
ARGV[1] a limit key, or a pattern when it holds '*'
ARGV[2] the numbers as JSON ({"c": concurrency, "r": [count, ms]}, either may be left out), or
        '' to clear them

Returns how many keys became ready | {WRONG_TYPE=-6} a limits key has another type |
{BAD_ARGS=-7} ARGV[2] is not a JSON object (nothing done).
]]
-- @include codes
-- @include rcall
-- @include now_ms
-- @include limit_keys
-- @include limit_keys_ok
-- @include limit_head
-- @include glob_pattern

local L = limit_keys(1)
local key, body = ARGV[1], ARGV[2]
if not limit_keys_ok(L) then return {WRONG_TYPE} end
if body ~= '' then
  local ok, doc = pcall(cjson.decode, body)
  if not ok or type(doc) ~= 'table' then return {BAD_ARGS} end
end
local pattern = string.find(key, '*', 1, true) ~= nil
local hash = L.set
if pattern then hash = L.patterns end
if body == '' then rcall('HDEL', hash, key) else rcall('HSET', hash, key, body) end
local now = now_ms()
local woke = 0
local function wake(k)
  if limit_head(L, k) then
    rcall('ZADD', L.ready, now, k)
    woke = woke + 1
  end
end
if pattern then
  local lp = glob_pattern(key)
  for _, k in ipairs(rcall('HKEYS', L.keys)) do
    if string.find(k, lp) then wake(k) end
  end
else
  wake(key)
end
return woke
