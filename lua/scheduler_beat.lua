--[[ scheduler_beat — a scheduler says it is alive and reads who else is.

The schedulers of a deployment share its partitions: each partition is led by the live
scheduler that ranks first for it (rendezvous hashing, rsched._scheduler.membership). A scheduler is live
while its last beat is younger than the liveness window; this script records the caller's beat
by Redis TIME (no client clock decides who is live), drops the entries older than the window
and returns the live ids, so every scheduler computes the owners from the same list.

KEYS[1] schedulers  ZSET scheduler id -> its last beat (ms, Redis time)
ARGV[1] id          the calling scheduler's id
ARGV[2] window_ms   liveness window (at most the lease TTL, so a dead scheduler's partitions
                    get a live owner by the time their leases expire)

Returns {now_ms, id...}: Redis time and the live ids (the caller's among them).
]]
-- @include rcall
-- @include int_text
-- @include now_ms

local schedulers = KEYS[1]
local id, window = ARGV[1], tonumber(ARGV[2])

local now = now_ms()
rcall('ZADD', schedulers, now, id)
rcall('ZREMRANGEBYSCORE', schedulers, '-inf', '(' .. int_text(now - window))
local out = {now}
for _, member in ipairs(rcall('ZRANGE', schedulers, 0, -1)) do
  out[#out + 1] = member
end
return out
