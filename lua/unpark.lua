--[[ unpark — bring parked schedules that come due soon back into the index (see park.lua).

The leading scheduler calls this every second or so, for the buckets whose lower bound is due
within `within_ms`: their entries due by then go back to the index, and each bucket's bound is
set to its earliest entry left (the bucket leaves the parked set when it is empty).

KEYS[1] leader    {p}:leader (the lease this call must hold)
KEYS[2] schedules {p}:schedules
KEYS[3] parked    {p}:parked, ZSET bucket number -> lower bound of its scores
KEYS[4..] buckets {p}:parked:<n>, one per ARGV[4..], in that order
ARGV[1] lease     the caller's lease (fencing token and owner)
ARGV[2] within_ms bring back what is due by now + within_ms ('inf': everything)
ARGV[3] limit     how many entries to move at most
ARGV[4..] n       the bucket numbers

Returns {moved, earliest} (earliest: the smallest score moved, '' when none) | {NOT_LEADER=-1} |
{WRONG_TYPE=-6} (the index or the parked set holds another type; a bucket that does is dropped
from the parked set) | {BAD_ARGS=-7}
]]
-- @include codes
-- @include rcall
-- @include int_text
-- @include key_is
-- @include now_ms

local leader_key, schedules_key, parked_key = KEYS[1], KEYS[2], KEYS[3]
local within, limit = ARGV[2] == 'inf' and math.huge or tonumber(ARGV[2]), tonumber(ARGV[3])
if not within or not limit or limit < 1 or #ARGV ~= #KEYS then return {BAD_ARGS} end
for g = 4, #ARGV do
  if not string.match(ARGV[g], '^[0-9]+$') or KEYS[g] ~= parked_key .. ':' .. ARGV[g] then
    return {BAD_ARGS}
  end
end
if rcall('GET', leader_key) ~= ARGV[1] then return {NOT_LEADER} end
if not (key_is(schedules_key, 'zset') and key_is(parked_key, 'zset')) then return {WRONG_TYPE} end

local until_ms = within == math.huge and '+inf' or int_text(now_ms() + within)
local moved, earliest = 0, nil
for g = 4, #KEYS do
  if moved >= limit then break end
  local bucket = KEYS[g]
  local due = redis.pcall('ZRANGE', bucket, '-inf', until_ms, 'BYSCORE', 'LIMIT', 0,
                          limit - moved, 'WITHSCORES')
  if due.err then
    due = {}  -- a key of another type (not rsched's): nothing to bring back, no bound to keep
  elseif #due > 0 then
    local adds, ids = {}, {}
    for i = 1, #due, 2 do
      adds[#adds + 1], adds[#adds + 2] = due[i + 1], due[i]
      ids[#ids + 1] = due[i]
    end
    rcall('ZADD', schedules_key, unpack(adds))
    rcall('ZREM', bucket, unpack(ids))
    moved = moved + #ids
    if due[2] ~= 'inf' and (not earliest or tonumber(due[2]) < tonumber(earliest)) then
      earliest = due[2]
    end
  end
  local head = redis.pcall('ZRANGE', bucket, 0, 0, 'WITHSCORES')
  if head[2] then
    rcall('ZADD', parked_key, head[2], ARGV[g])
  else
    rcall('ZREM', parked_key, ARGV[g])
  end
end
return {moved, earliest or ''}
