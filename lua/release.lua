--[[ release — queue the next pending occurrence of each schedule whose unfinished run was lost.

A schedule's pending occurrences (marker.lua) are normally released by the worker script that
records the end of its run. When that end is never recorded (the job was lost, not merely its
worker: a reclaimed job still ends), the run marker expires and nothing would release them:
the leading scheduler calls this now and then. Listed in {p}:backlogs by the time their marker
expires, each schedule due there is checked again: its marker still live (the expiry moved:
another run took it) puts it back at the new time; an expired marker releases the oldest
pending occurrence under a fresh marker ("released" with reason marker_expired); no pending
set (released, removed or updated since) drops it from the index. Writes nothing unless the
caller holds the lease.

KEYS[1] leader     STRING lease value "<token>:<owner>"
KEYS[2] backlogs   ZSET of schedule ids by marker expiry (ms)
ARGV[1] lease      the caller's lease value
ARGV[2] cap        history length cap
ARGV[3] limit      at most this many schedules looked at in one call
ARGV[4..7]         key prefixes of a schedule's hash, history, pending set and of a queue's
                   stream ("{p}:schedule:", "{p}:history:", "{p}:pending:", "{p}:queue:"); every
                   key keeps the hash tag of KEYS (one slot)

Returns the number of occurrences released, or NOT_LEADER=-1 | BAD_INDEX=-8 (backlogs is not a
sorted set) | BAD_ARGS=-7, nothing written.
]]
-- @include common
-- @include marker

local leader_key, backlogs_key = KEYS[1], KEYS[2]
local lease, cap, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local hash_prefix, history_prefix, pending_prefix, stream_prefix = ARGV[4], ARGV[5], ARGV[6],
  ARGV[7]
if #KEYS ~= 2 or #ARGV ~= 7 or not cap or cap < 1 or not limit or limit < 1 then return -7 end
if rcall('GET', leader_key) ~= lease then return -1 end
if not key_is(backlogs_key, 'zset') then return -8 end

local now = now_ms()
local released = 0
local due = rcall('ZRANGE', backlogs_key, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
for _, sid in ipairs(due) do
  local hash, history = hash_prefix .. sid, history_prefix .. sid
  local pending = pending_prefix .. sid
  if not (key_is(hash, 'hash') and key_is(history, 'list') and key_is(pending, 'zset'))
     or rcall('EXISTS', pending) == 0 then
    rcall('ZREM', backlogs_key, sid)  -- nothing rsched can release there
  else
    local m = rcall('HMGET', hash, 'run', 'run_until', 'queue', 'priority')
    local stream = schedule_stream(stream_prefix, m[3], m[4])
    if marker_live(m[1], m[2], now) then
      rcall('ZADD', backlogs_key, tonumber(m[2]) or now, sid)
    elseif not key_is(stream, 'stream') then
      rcall('ZREM', backlogs_key, sid)  -- its queue key holds another type: leave it alone
    elseif release_next(hash, pending, stream, history, cap, now, '', backlogs_key, sid) then
      released = released + 1
    end
  end
end
return released
