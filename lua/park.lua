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

Returns how many were parked | NOT_LEADER=-1 | WRONG_TYPE=-6 (the index or the parked set holds
another type; a bucket that does keeps its ids in the index) | BAD_ARGS=-7
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include now_ms

local leader_key, schedules_key, parked_key = KEYS[1], KEYS[2], KEYS[3]
local after = tonumber(ARGV[2])
if not after or #ARGV ~= #KEYS - 1 then return BAD_ARGS end
local groups = {}
for g = 3, #ARGV do
  local n, rest = string.match(ARGV[g], '^([0-9]+) (.+)$')
  if not n or KEYS[g + 1] ~= parked_key .. ':' .. n then return BAD_ARGS end
  local ids = {}
  for sid in string.gmatch(rest, '[^ ]+') do ids[#ids + 1] = sid end
  groups[#groups + 1] = {key = KEYS[g + 1], n = n, ids = ids}
end
if rcall('GET', leader_key) ~= ARGV[1] then return NOT_LEADER end
if not (key_is(schedules_key, 'zset') and key_is(parked_key, 'zset')) then return WRONG_TYPE end

local horizon = now_ms() + after
-- One read and one removal from the index for the whole call, one ZADD per bucket, and the
-- buckets' bounds in one ZADD LT (per element): a bucket's four commands cost twice as much.
local ids = {}
for _, g in ipairs(groups) do
  for _, sid in ipairs(g.ids) do ids[#ids + 1] = sid end
end
local scores = rcall('ZMSCORE', schedules_key, unpack(ids))
local gone, bounds = {}, {}
local i = 0
for _, g in ipairs(groups) do
  local moves, moved, low = {}, {}, nil
  for _, sid in ipairs(g.ids) do
    i = i + 1
    local score = scores[i]
    local value = score and (score == 'inf' and math.huge or tonumber(score))
    if value and value > horizon then
      moves[#moves + 1], moves[#moves + 2] = score, sid
      moved[#moved + 1] = sid
      if not low or value < low[1] then low = {value, score} end
    end
  end
  -- A bucket key of another type (not rsched's) refuses the ZADD: its ids stay in the index.
  if low and type(redis.pcall('ZADD', g.key, unpack(moves))) == 'number' then
    for _, sid in ipairs(moved) do gone[#gone + 1] = sid end
    bounds[#bounds + 1], bounds[#bounds + 2] = low[2], g.n
  end
end
if #gone > 0 then
  rcall('ZREM', schedules_key, unpack(gone))
  rcall('ZADD', parked_key, 'LT', unpack(bounds))
end
return #gone
