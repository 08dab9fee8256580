--[[ release_lost — queue the next pending occurrence of each schedule whose unfinished run was lost.

A schedule's pending occurrences (pending_push.lua) are normally released by the worker script
that records the end of its run. When that end is never recorded (the job was lost, not merely its
worker: a reclaimed job still ends), the run marker expires and nothing would release them:
the leading scheduler calls this now and then. Listed in {p}:backlogs by the time their marker
expires, each schedule due there is checked again: its marker still live (the expiry moved:
another run took it) puts it back at the new time; an expired marker releases the oldest
pending occurrence under a fresh marker ("released" with reason marker_expired); no pending
set (released, removed or updated since) drops it from the index. Writes nothing unless the
caller holds the lease.

The caller reads the ids due in backlogs, and each one's queue and priority, and declares
every key of each (a cluster decides ASK / TRYAGAIN from the declared keys only, so a live
migration of the slot holds the whole call back instead of failing it half-way). What it read may
have changed since: each schedule is checked again here, and one whose declared stream is no
longer the stream of its queue and priority is left for the next sweep.

KEYS[1] leader     STRING lease value "<token>:<owner>"
KEYS[2] backlogs   ZSET of schedule ids by marker expiry (ms)
then 4 keys per schedule of ARGV[3..], in that order: its hash {p}:schedule:<id>, history
  {p}:history:<id>, pending set {p}:pending:<id>, and the stream of its queue and priority as the
  caller read them ({p}:queue:<queue>[#<priority>])
ARGV[1] lease      the caller's lease value
ARGV[2] cap        history length cap
ARGV[3..]          schedule ids due in backlogs (one not due, or no longer listed, is skipped)

Returns the number of occurrences released, or NOT_LEADER=-1 | BAD_INDEX=-8 (backlogs is not a
sorted set) | BAD_ARGS=-7, nothing written.
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include now_ms
-- @include marker_live
-- @include schedule_stream
-- @include release_next

local leader_key, backlogs_key = KEYS[1], KEYS[2]
local lease, cap = ARGV[1], tonumber(ARGV[2])
if #KEYS ~= 2 + 4 * (#ARGV - 2) or not cap or cap < 1 then return BAD_ARGS end
if rcall('GET', leader_key) ~= lease then return NOT_LEADER end
if not key_is(backlogs_key, 'zset') then return BAD_INDEX end

local now = now_ms()
local released = 0
for i = 3, #ARGV do
  local sid, k = ARGV[i], 3 + 4 * (i - 3)
  local hash, history, pending, declared = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  local due = tonumber(rcall('ZSCORE', backlogs_key, sid))
  if not due or due > now then
    -- released, or its marker renewed, since the caller read it
  elseif not (key_is(hash, 'hash') and key_is(history, 'list') and key_is(pending, 'zset'))
     or rcall('EXISTS', pending) == 0 then
    rcall('ZREM', backlogs_key, sid)  -- nothing rsched can release there
  else
    local m = rcall('HMGET', hash, 'run', 'run_until', 'queue', 'priority')
    local prefix = string.match(declared, '^(.-}:queue:)')
    if marker_live(m[1], m[2], now) then
      rcall('ZADD', backlogs_key, tonumber(m[2]) or now, sid)
    elseif not prefix or schedule_stream(prefix, m[3], m[4]) ~= declared then
      -- its queue or priority changed since the caller read it: the next sweep names the stream
    elseif not key_is(declared, 'stream') then
      rcall('ZREM', backlogs_key, sid)  -- its queue key holds another type: leave it alone
    elseif release_next(hash, pending, declared, history, cap, now, '', backlogs_key, sid) then
      released = released + 1
    end
  end
end
return released
