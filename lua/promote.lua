--[[ promote — move the delayed jobs that are due (by Redis TIME) of one or more queues of a
partition into their streams, and say when the next one is due.

Guarantees: each due member is moved exactly once (XADD and ZREM in one script; running it
again only moves what is due then). A member that is not a JSON list of strings (written by
someone else) is still moved, as a single 'malformed' field, so that a worker dead-letters it
instead of it blocking the set forever.

A member goes to the stream of its priority level (its 'priority' field; the normal stream
when it has none), so that a retry keeps its level.

Cost: a worker calls it once per partition every promote_interval_ms for all its queues, so
the call with nothing due is kept small: one ZRANGE per queue (which also checks the delayed
set's type), TIME only when some delayed set holds a member, and the streams' types only for a
queue with something due.

KEYS     4 per queue: delayed  {p}:delayed:<queue>
                      stream   {p}:queue:<queue>         (normal level)
                      high     {p}:queue:<queue>#high
                      low      {p}:queue:<queue>#low
ARGV[1] limit    most members moved by one call (over all its queues)

Returns {moved, ms until the next member is due (-1 when none is left)} | {WRONG_TYPE=-6} a
key has the wrong type (nothing moved).
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include now_ms
-- @include pcall_read
-- @include decode_fields
-- @include stream_of

local limit = tonumber(ARGV[1])
local now = nil
local wait = -1
local function note_next(score)
  local ms = math.max(0, tonumber(score) - now)
  if wait < 0 or ms < wait then wait = ms end
end

-- Look at every queue before the first write: a wrong type anywhere moves nothing.
local due = {}
for q = 1, #KEYS, 4 do
  local head = pcall_read('ZRANGE', KEYS[q], 0, 0, 'WITHSCORES')
  if not head then return {WRONG_TYPE} end
  if head[2] then
    now = now or now_ms()
    if tonumber(head[2]) <= now then
      for i = q + 1, q + 3 do
        if not key_is(KEYS[i], 'stream') then return {WRONG_TYPE} end
      end
      due[#due + 1] = q
    else
      note_next(head[2])
    end
  end
end

local moved = 0
for _, q in ipairs(due) do
  local delayed, stream, high, low = KEYS[q], KEYS[q + 1], KEYS[q + 2], KEYS[q + 3]
  if moved < limit then
    local members = rcall('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit - moved)
    for _, member in ipairs(members) do
      local fields = decode_fields(member)
      if fields then
        rcall('XADD', stream_of(fields, stream, high, low), '*', unpack(fields))
      else
        rcall('XADD', stream, '*', 'malformed', member)
      end
      rcall('ZREM', delayed, member)
    end
    moved = moved + #members
  end
  local nxt = rcall('ZRANGE', delayed, 0, 0, 'WITHSCORES')
  if nxt[2] then note_next(nxt[2]) end
end
return {moved, wait}
