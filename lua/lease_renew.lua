--[[ lease_renew — extend the lease the caller holds.

KEYS[1] leader   STRING "<token>:<owner>"
KEYS[2] ttl      STRING the lease's TTL in ms, with the lease's own TTL
ARGV[1] value    the caller's lease value "<token>:<owner>"
ARGV[2] ttl_ms   new time to live

Returns OK=5 when renewed, NOT_LEADER=-1 when the caller no longer holds the lease (it expired
or another scheduler took it): the caller must stop acting as leader at once.
]]
-- @include codes
-- @include rcall

if rcall('GET', KEYS[1]) ~= ARGV[1] then return NOT_LEADER end
rcall('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
rcall('SET', KEYS[2], ARGV[2], 'PX', tonumber(ARGV[2]))
return OK
