--[[ trim_history — drop history events older than a cutoff, a bounded slice of schedules at a
time (the leader's retention sweep walks the schedules index by rank, a slice per sweep).

Each schedule's history is newest first, so its old records are at the tail: pop from the right
while the last record's time is older than the cutoff: a run's record (history.lua) by its
newest event (a run is dropped whole, once it has ended long enough ago), an event of an older
rsched (a JSON object) by its "at" (ms). Anything else (written by hand) stops the trim of that
list. A key of another type is skipped.

KEYS[1] schedules   {p}:schedules (ZSET of every schedule id)
ARGV[1] history key prefix ("{p}:history:"): a schedule's history is the prefix and its id,
        with the hash tag of KEYS[1], so the script touches a single slot
ARGV[2] cutoff (ms): records (events) last written before it are dropped
ARGV[3] start rank in the index   ARGV[4] how many schedules to look at

Returns {records removed, next start rank (0 when the walk went round the whole index)}: two
counts, no code.
]]
-- @include common
-- @include history

local schedules, prefix = KEYS[1], ARGV[1]
local cutoff, start, count = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local removed, nxt = 0, 0
if not key_is(schedules, 'zset') then return {removed, nxt} end  -- someone else's key: nothing
local ids = rcall('ZRANGE', schedules, start, start + count - 1)
for i = 1, #ids do
  local history = prefix .. ids[i]
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
if #ids == count then nxt = start + count end
return {removed, nxt}
