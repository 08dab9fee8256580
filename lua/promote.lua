--[[ promote — move a queue's delayed jobs that are due (by Redis TIME) into its stream.

Guarantees: each due member is moved exactly once (XADD and ZREM in one script; running it
again only moves what is due then). A member that is not a JSON list of strings (written by
someone else) is still moved, as a single 'malformed' field, so that a worker dead-letters it
instead of it blocking the set forever.

A member goes to the stream of its priority level (its 'priority' field; the normal stream
when it has none or the caller gave no stream for that level), so that a retry keeps its level.

KEYS[1] delayed  {p}:delayed:<queue>
KEYS[2] stream   {p}:queue:<queue>         (normal level)
KEYS[3] high     {p}:queue:<queue>#high    optional
KEYS[4] low      {p}:queue:<queue>#low     optional
ARGV[1] limit    most members moved by one call

Returns {moved, ms until the next member is due (-1 when none is left)} | {WRONG_TYPE=-6} a
key has the wrong type.
]]
-- @include common
-- @include marker
-- @include job_run

local delayed, stream, high, low = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local limit = tonumber(ARGV[1])
if not (key_is(delayed, 'zset') and key_is(stream, 'stream')) then return {-6} end  -- WRONG_TYPE
if (high and not key_is(high, 'stream')) or (low and not key_is(low, 'stream')) then
  return {-6}  -- WRONG_TYPE
end

local now = now_ms()
local due = rcall('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit)
for _, member in ipairs(due) do
  local fields = decode_fields(member)
  if fields then
    rcall('XADD', stream_of(fields, stream, high, low), '*', unpack(fields))
  else
    rcall('XADD', stream, '*', 'malformed', member)
  end
  rcall('ZREM', delayed, member)
end
local nxt = rcall('ZRANGE', delayed, 0, 0, 'WITHSCORES')
local wait = -1
if nxt[2] then wait = math.max(0, tonumber(nxt[2]) - now) end
return {#due, wait}
