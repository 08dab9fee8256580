--[[ limit_set — an operator sets or clears the numbers of a limit key, or of every key a
pattern matches ('*' matches any text), overriding the numbers jobs declare (docs/limits.md).

The keys it concerns that have waiting jobs become ready at once, so that raised numbers start
them without waiting for a release. Setting the same numbers twice is harmless.

KEYS[1]..KEYS[11] the limits' keys (rsched._core.keys.Keys.limits; lua/includes/limit_keys.lua)
ARGV[1] a limit key, or a pattern when it holds '*'
ARGV[2] the numbers as JSON ({"c": concurrency, "r": [count, ms]}, either may be left out), or
        '' to clear them
KEYS[12] audit (partition 0's {p}:audit, docs/audit.md)
ARGV[3] audit, who and from where (lua/includes/audit_ctx.lua)

Appends one record to the audit trail (action limit_set or limit_clear; changes: numbers, old
and new) unless the numbers were those already (a call re-sent after a lost reply records
nothing a second time).

Returns how many keys became ready | {WRONG_TYPE=-6} a limits key has another type |
{BAD_ARGS=-7} ARGV[2] is not a JSON object, or the audit argument is malformed (nothing done).
]]
-- @include codes
-- @include rcall
-- @include now_ms
-- @include limit_keys
-- @include limit_keys_ok
-- @include limit_head
-- @include glob_pattern
-- @include audit_ctx
-- @include audit
-- @include audit_value

local L = limit_keys(1)
local key, body = ARGV[1], ARGV[2]
if not limit_keys_ok(L) then return {WRONG_TYPE} end
if body ~= '' then
  local ok, doc = pcall(cjson.decode, body)
  if not ok or type(doc) ~= 'table' then return {BAD_ARGS} end
end
local ctx, refused = audit_ctx(KEYS[12], ARGV[3])
if not ctx then return {refused} end
local pattern = string.find(key, '*', 1, true) ~= nil
local hash = L.set
if pattern then hash = L.patterns end
local old = rcall('HGET', hash, key) or false
local new = body ~= '' and body or false
if old ~= new then
  audit(ctx, new and 'limit_set' or 'limit_clear', key, nil, nil,
        {numbers = {audit_value(old), audit_value(new)}})
end
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
