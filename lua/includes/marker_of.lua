-- Include: marker_of(hash, now) — marker_live of the run marker stored in `hash`, and the stored
-- `run` (live or not).
-- @include rcall
-- @include marker_live

local function marker_of(hash, now)
  local m = rcall('HMGET', hash, 'run', 'run_until')
  return marker_live(m[1], m[2], now), m[1]
end
