--[[ lease_acquire — try to become the leading scheduler.

The lease is one string "<token>:<owner>" with a TTL. Every acquisition takes a new token from
the fence counter, so tokens only grow and a scheduler that lost its lease (paused, partitioned)
can never act with it again: fire compares the whole value.

KEYS[1] leader   STRING "<token>:<owner>" (PX ttl)
KEYS[2] fence    STRING counter of tokens handed out
KEYS[3] ttl      STRING the lease's TTL in ms, with the lease's own TTL
ARGV[1] owner    unique name of the calling process
ARGV[2] ttl_ms   lease time to live

Returns {OK=5, token} when the caller holds the lease (newly, or already: a re-sent call is
harmless), {NOT_LEADER=-1, current_value, pttl_ms} when another process holds it.
]]
-- @include codes
-- @include rcall

local leader_key, fence_key, ttl_key = KEYS[1], KEYS[2], KEYS[3]
local owner, ttl = ARGV[1], tonumber(ARGV[2])

local cur = rcall('GET', leader_key)
if cur then
  local token, who = string.match(cur, '^(%d+):(.*)$')
  if who == owner then
    rcall('PEXPIRE', leader_key, ttl)
    rcall('SET', ttl_key, ttl, 'PX', ttl)
    return {OK, token}
  end
  return {NOT_LEADER, cur, rcall('PTTL', leader_key)}
end
local token = rcall('INCR', fence_key)
rcall('SET', leader_key, token .. ':' .. owner, 'PX', ttl)
rcall('SET', ttl_key, ttl, 'PX', ttl)
return {OK, tostring(token)}
