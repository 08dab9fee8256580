--[[ unregister — a worker stops cleanly: its registry entry goes at once (no waiting for the
record's TTL). Safe to run any number of times.

KEYS[1] workers  {p}:workers (ZSET)
KEYS[2] record   {p}:worker:<id> (STRING)
ARGV[1] worker id

Returns OK=5.
]]
-- @include codes
-- @include rcall
-- @include key_is

if key_is(KEYS[1], 'zset') then rcall('ZREM', KEYS[1], ARGV[1]) end
if key_is(KEYS[2], 'string') then rcall('DEL', KEYS[2]) end
return OK
