--[[ lease_release — give up the lease on shutdown so a standby takes over at once.

KEYS[1] leader   STRING "<token>:<owner>"
ARGV[1] value    the caller's lease value

Returns 1 when released, 0 when the caller did not hold it (nothing changed).
]]
-- @include common

if rcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end
rcall('DEL', KEYS[1])
return 1
