--[[ lease_release — give up the lease on shutdown so a standby takes over at once.

KEYS[1] leader   STRING "<token>:<owner>"
ARGV[1] value    the caller's lease value

Returns OK=5 when released, NOT_LEADER=-1 when the caller did not hold it (nothing changed).
]]
-- @include codes
-- @include rcall

if rcall('GET', KEYS[1]) ~= ARGV[1] then return NOT_LEADER end
rcall('DEL', KEYS[1])
return OK
