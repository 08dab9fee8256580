--[[ park — move schedules whose next run is far off out of the index, into parked buckets.

A schedule in the index costs ~110 bytes of skiplist; in a bucket of a hundred or so, which Redis
keeps as a listpack, ~28. The leading scheduler parks what is due later than `after_ms` from now
(paused and completed schedules, at +inf, included) and brings entries back (unpark.lua) well
before they are due, so due reads and fires only ever look at the index. Each id is checked
again here: an id that is no longer in the index, or due sooner by now, stays where it is.

KEYS[1] leader    {p}:leader (the lease this call must hold)
KEYS[2] schedules {p}:schedules
KEYS[3] parked    {p}:parked, ZSET bucket number -> lower bound of its scores
KEYS[4..] buckets {p}:parked:<n>, one per group of ARGV[3..], in that order
ARGV[1] lease     the caller's lease (fencing token and owner)
ARGV[2] after_ms  park what is due later than now + after_ms
ARGV[3..] groups  one per bucket: "<n> <id> <id> …" (rsched ids hold no space)

Returns how many were parked | NOT_LEADER=-1 | WRONG_TYPE=-6 (the index, the parked set or a
bucket holds another type) | BAD_ARGS=-7
]]
-- @include common

local leader_key, schedules_key, parked_key = KEYS[1], KEYS[2], KEYS[3]
local after = tonumber(ARGV[2])
if not after or #ARGV ~= #KEYS - 1 then return -7 end  -- BAD_ARGS
local groups = {}
for g = 3, #ARGV do
  local n, rest = string.match(ARGV[g], '^([0-9]+) (.+)$')
  if not n or KEYS[g + 1] ~= parked_key .. ':' .. n then return -7 end  -- BAD_ARGS
  local ids = {}
  for sid in string.gmatch(rest, '[^ ]+') do ids[#ids + 1] = sid end
  groups[#groups + 1] = {key = KEYS[g + 1], n = n, ids = ids}
end
if rcall('GET', leader_key) ~= ARGV[1] then return -1 end  -- NOT_LEADER
if not (key_is(schedules_key, 'zset') and key_is(parked_key, 'zset')) then return -6 end
for _, g in ipairs(groups) do
  if not key_is(g.key, 'zset') then return -6 end  -- WRONG_TYPE
end

local horizon = now_ms() + after
local parked = 0
for _, g in ipairs(groups) do
  local scores = rcall('ZMSCORE', schedules_key, unpack(g.ids))
  local moves, gone, low = {}, {}, nil
  for i, sid in ipairs(g.ids) do
    local score = scores[i]
    local value = score and (score == 'inf' and math.huge or tonumber(score))
    if value and value > horizon then
      moves[#moves + 1], moves[#moves + 2] = score, sid
      gone[#gone + 1] = sid
      if not low or value < low[1] then low = {value, score} end
    end
  end
  if low then
    rcall('ZADD', g.key, unpack(moves))
    rcall('ZREM', schedules_key, unpack(gone))
    rcall('ZADD', parked_key, 'LT', low[2], g.n)
    parked = parked + #gone
  end
end
return parked
