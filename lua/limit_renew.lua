--[[ limit_renew — a worker's heartbeat keeps the limit holds of the jobs it runs.

Each hold still there lasts ARGV[1] ms more; a hold that lapsed meanwhile (the worker stalled
past it and another job may have taken the slot) is not brought back, and is reported. Safe to
run any number of times.

KEYS[1]..KEYS[11] the limits' keys (rsched._core.keys.Keys.limits; lua/includes/limit_keys.lua)
ARGV[1] hold ms   ARGV[2..] members: limit key NUL execution id

Returns how many of the holds had lapsed | {WRONG_TYPE=-6} the holds set has another type.
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include now_ms
-- @include limit_keys

local L = limit_keys(1)
if not key_is(L.holds, 'zset') then return {WRONG_TYPE} end
local deadline = now_ms() + tonumber(ARGV[1])
local lapsed = 0
for i = 2, #ARGV do
  if rcall('ZADD', L.holds, 'XX', 'GT', 'CH', deadline, ARGV[i]) == 0
     and not rcall('ZSCORE', L.holds, ARGV[i]) then
    lapsed = lapsed + 1
  end
end
return lapsed
