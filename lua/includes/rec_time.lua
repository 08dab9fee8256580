-- Include: rec_time(rec, sched) — the time (ms) of the last token (the newest event) of history
-- record `rec` of occurrence `sched` (ms; rec_first.lua has the record's form).
-- @include num62
-- @include hist_outcomes

local function rec_time(rec, sched)
  local code, d, second = string.match(rec, '|(%a)([%-%w]*),?([%-%w]*)[^|]*$')
  if not code then return sched end
  if HIST_OUTCOME[code] then return sched + num62(d) + num62(second) end
  return sched + num62(d)
end
