--[[ reclaim — take over entries idle longer than the visibility timeout (their worker died or
hung without heartbeats), each with its delivery count, from one or more streams of a
partition (a worker's queues at every level: one call per partition and round).

Entries the stream no longer holds (deleted while pending) have nothing to run: they are
acknowledged. Redis 7 lists them apart and drops them from the pending list itself; older
servers return them with no fields — both are handled. A key that is not a stream, or a stream
without the group, has nothing to reclaim (the reader re-creates a lost group).

KEYS[1..n]   streams  {p}:queue:<queue> (or a priority level's stream)
ARGV[1] group   ARGV[2] consumer   ARGV[3] min idle ms
ARGV[4] count   most entries claimed by the call (over all its streams, in KEYS order)
ARGV[4 + i]     start id of KEYS[i] (the next start id a previous call returned, or 0-0)

Returns one {next start id, {{entry id, {field, value, …}, deliveries}, …}} per stream, in KEYS
order: a stream the count did not reach keeps its start id; one with nothing to reclaim (not a
stream, no group) gets 0-0.
]]
-- @include rcall

local group, consumer, min_idle = ARGV[1], ARGV[2], ARGV[3]
local left = tonumber(ARGV[4])
local out = {}
for i = 1, #KEYS do
  local stream, start = KEYS[i], ARGV[4 + i]
  local item = {start, {}}
  if left > 0 then
    local r = redis.pcall('XAUTOCLAIM', stream, group, consumer, min_idle, start, 'COUNT', left)
    if type(r) == 'table' and r['err'] then
      -- Nothing here to take over; any other error (out of memory, ...) aborts the script.
      if not (string.find(r['err'], 'WRONGTYPE', 1, true)
              or string.find(r['err'], 'NOGROUP', 1, true)) then
        error(r)
      end
      item = {'0-0', {}}
    else
      local claimed = {}
      for _, e in ipairs(r[2]) do
        if e[2] then
          local p = rcall('XPENDING', stream, group, e[1], e[1], 1)
          local deliveries = 1
          if p[1] then deliveries = p[1][4] end
          claimed[#claimed + 1] = {e[1], e[2], deliveries}
        else
          rcall('XACK', stream, group, e[1])
        end
      end
      left = left - #claimed
      item = {r[1], claimed}
    end
  end
  out[i] = item
end
return out
