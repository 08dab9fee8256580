--[[ trim_history — drop history events older than a cutoff, a bounded slice of schedules at a
time (the leader's retention sweep walks the schedules index by rank, a slice per sweep).

Each schedule's history is newest first, so its old records are at the tail: pop from the right
while the last record's time is older than the cutoff: a run's record (rec_first.lua) by its
newest event (a run is dropped whole, once it has ended long enough ago), an event kept as a
JSON object (job_event.lua) by its "at" (ms). Anything else (written by hand) stops the trim of that
list. A key of another type is skipped.

The caller walks the schedules index by rank (ZRANGE) and declares the history of each schedule
of the slice: a cluster decides ASK / TRYAGAIN from the declared keys only, so a live migration
of the slot holds the whole call back instead of failing it half-way.

KEYS[1..n] histories  {p}:history:<id> of the schedules to trim (absent ones are skipped)
ARGV[1] cutoff (ms): records (events) last written before it are dropped

Returns the number of records removed (a count, no code).
]]
-- @include rcall
-- @include key_is
-- @include num62
-- @include rec_time

local cutoff = tonumber(ARGV[1])
local removed = 0
if not cutoff then return removed end
for i = 1, #KEYS do
  local history = KEYS[i]
  if key_is(history, 'list') then
    while true do
      local last = rcall('LINDEX', history, -1)
      local at = nil
      if last then
        local sched = string.match(last, '^(%-?%w+)|')
        if sched then
          at = rec_time(last, num62(sched))
        else
          at = tonumber(string.match(last, '"at":(%d+)'))
        end
      end
      if not at or at >= cutoff then break end
      rcall('RPOP', history)
      removed = removed + 1
    end
  end
end
return removed
