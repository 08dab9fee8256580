-- Include: hist(key, cap, json) — push one entry on a capped history list (newest first).
-- @include rcall

-- LPUSH returns the length, so the trim costs a call only when the list is over its cap.
local function hist(key, cap, json)
  if rcall('LPUSH', key, json) > cap then rcall('LTRIM', key, 0, cap - 1) end
end
