-- Include: hist_first(key, cap, json) — hist() as the *first* write of an item, to a key whose
-- type was not checked. Returns false for a key of another type (nothing written).
-- @include rcall
-- @include wrong_type

-- A wrong type fails the LPUSH itself, which writes nothing, so the item can still be refused
-- whole: one call instead of a TYPE check followed by the push.
local function hist_first(key, cap, json)
  local len = redis.pcall('LPUSH', key, json)
  if wrong_type(len) then return false end
  if len > cap then rcall('LTRIM', key, 0, cap - 1) end
  return true
end
