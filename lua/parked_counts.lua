--[[ parked_counts — what parked buckets hold (read-only): Client.stats in one partition.

KEYS[1..] buckets  {p}:parked:<n>
ARGV[1] up_to_ms   count as due what is due at or before this (ms)

Returns {total, active (with a next run, not at +inf), due (at or before up_to_ms), the earliest
due id or '', its score or '', the ids at +inf (paused or completed) joined by spaces}; a key of
another type (not rsched's) counts nothing. Read by
rsched rather than pipelined: ~1 ms for 1,024 buckets where a pipeline of their 3,000 commands
took ~40 ms of the client's time.
]]
-- @include rcall

local up_to = ARGV[1]
local total, active, due, oldest, oldest_score = 0, 0, 0, '', ''
local idle = {}
for _, key in ipairs(KEYS) do
  local card = redis.pcall('ZCARD', key)
  if type(card) == 'number' then
    total = total + card
    local live = rcall('ZCOUNT', key, '-inf', '(inf')
    active = active + live
    if live < card then
      for _, sid in ipairs(rcall('ZRANGE', key, '+inf', '+inf', 'BYSCORE')) do idle[#idle + 1] = sid end
    end
    local late = rcall('ZCOUNT', key, '-inf', up_to)
    if late > 0 then
      due = due + late
      local first = rcall('ZRANGE', key, 0, 0, 'WITHSCORES')
      if oldest == '' or tonumber(first[2]) < tonumber(oldest_score) then
        oldest, oldest_score = first[1], first[2]
      end
    end
  end
end
return {total, active, due, oldest, oldest_score, table.concat(idle, ' ')}
