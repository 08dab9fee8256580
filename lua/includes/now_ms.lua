-- Include: now_ms() — the server's time in ms: due-ness must not depend on any client's clock.
-- @include rcall

local function now_ms()
  local t = rcall('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
