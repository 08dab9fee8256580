-- Include: sched_ms(sched) — a scheduled time (ms, text) as a number.

-- The occurrences of a batch mostly share a few: remember them.
local SCHED_MS = {}
local function sched_ms(sched)
  local v = SCHED_MS[sched]
  if not v then
    v = tonumber(sched)
    SCHED_MS[sched] = v
  end
  return v
end
