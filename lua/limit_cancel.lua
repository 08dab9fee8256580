--[[ limit_cancel — drop a job that waits on a limit key: it never runs (Client.cancel).

Cancelling a job that no longer waits (started, or cancelled already) does nothing.

KEYS[1]..KEYS[11] the limits' keys (rsched._core.keys.Keys.limits; lua/includes/limit_keys.lua)
ARGV[1] execution id

Returns OK=5 the job waited and was dropped | NOT_PENDING=-10 it did not wait |
{WRONG_TYPE=-6} a limits key has another type.
]]
-- @include codes
-- @include rcall
-- @include limit_keys
-- @include limit_keys_ok
-- @include limit_waits
-- @include limit_idle

local L = limit_keys(1)
local exec = ARGV[1]
if not limit_keys_ok(L) then return {WRONG_TYPE} end
local raw = rcall('HGET', L.jobs, exec)
if not raw then return NOT_PENDING end
rcall('HDEL', L.jobs, exec)
local ok, rec = pcall(cjson.decode, raw)
if ok and type(rec) == 'table' and type(rec.k) == 'string' and type(rec.o) == 'string' then
  rcall('ZREM', L.waiting, rec.k .. '\0' .. rec.o .. '\0' .. exec)
  if type(rec.l) == 'table' then limit_waits(L, rec, -1) end
  limit_idle(L, rec.k)
end
return OK
