--[[ promote — move a queue's delayed jobs that are due (by Redis TIME) into its stream.

Guarantees: each due member is moved exactly once (XADD and ZREM in one script; running it
again only moves what is due then). A member that is not a JSON list of strings (written by
someone else) is still moved, as a single 'malformed' field, so that a worker dead-letters it
instead of it blocking the set forever.

KEYS[1] delayed  {p}:delayed:<queue>
KEYS[2] stream   {p}:queue:<queue>
ARGV[1] limit    most members moved by one call

Returns {moved, ms until the next member is due (-1 when none is left)} | {WRONG_TYPE=-6} a
key has the wrong type.
]]
-- @include common
-- @include marker
-- @include job_run

local delayed, stream = KEYS[1], KEYS[2]
local limit = tonumber(ARGV[1])
if not (key_is(delayed, 'zset') and key_is(stream, 'stream')) then return {-6} end  -- WRONG_TYPE

local now = now_ms()
local due = rcall('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit)
for _, member in ipairs(due) do
  local fields = decode_fields(member)
  if fields then
    rcall('XADD', stream, '*', unpack(fields))
  else
    rcall('XADD', stream, '*', 'malformed', member)
  end
  rcall('ZREM', delayed, member)
end
local nxt = rcall('ZRANGE', delayed, 0, 0, 'WITHSCORES')
local wait = -1
if nxt[2] then wait = math.max(0, tonumber(nxt[2]) - now) end
return {#due, wait}
